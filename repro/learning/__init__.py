"""The real learning loop: tabular Q-learning and a softmax actor on gymnasium toy-text tasks,
coupled by λ-weighted distillation, with the compiled controller kernel driving λ.

Modules: ``env`` (batched stepper from gymnasium's transition table), ``rng`` (counter-based uniforms, the
same bits on NumPy and CuPy), ``agent`` (the learners and the batched loop), ``controllers`` (contract
names, constant-λ baselines, ablation variants → compiled kernels), ``prereg`` and ``study2`` (the two
studies' pre-registered parameters, grids and criteria), ``incident`` (the second study's incident run). The
studies are run by :mod:`analysis.cli.study_runs` and judged in :mod:`analysis.judge`.
"""
