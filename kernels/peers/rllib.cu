// rllib.cu — RLlib's PPO KL-coefficient update, as a one-thread ISV controller
// (kl_coeff in slot 486).
//
// Source: ray-project/ray (the release and commit are named in
// kernels/contracts.toml [rllib] release), rllib/algorithms/ppo/torch/
// ppo_torch_learner.py, PPOTorchLearner._update_module_kl_coeff (the new API
// stack's method; its old name was additional_update_for_module):
//   kl = convert_to_numpy(self.metrics.peek((module_id, LEARNER_RESULTS_KL_KEY)))
//   if kl > 2.0 * config.kl_target:   curr_var.data *= 1.5
//   elif kl < 0.5 * config.kl_target: curr_var.data *= 0.5
// Defaults (rllib/algorithms/ppo/ppo.py, PPOConfig.__init__): kl_coeff = 0.2,
// kl_target = 0.01. No bound on the coefficient; a NaN KL only logs a warning.
//
// Arithmetic as the source runs it: kl is the float32 mean of a torch loss, as
// NumPy; 2.0 * kl_target is a Python float (double), compared with a float32
// under NumPy ≥ 2's promotion (NEP 50): rounded once to float32. The
// coefficient is a float32 torch tensor: *= 1.5 and *= 0.5 are float32
// products. No guard: KL ≤ 0 (below 0.5·target) halves the coefficient. Only
// the slot layout is this suite's.

#define RLLIB_KL_COEFF_INDEX 486
#define RLLIB_KL_INDEX 488
#define RLLIB_KL_TARGET_INDEX 491

#define KL_UPPER_FACTOR 2.0
#define KL_LOWER_FACTOR 0.5
#define COEFF_INCREASE 1.5f
#define COEFF_DECREASE 0.5f

extern "C" __global__ void rllib_update_kl(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float kl = isv[RLLIB_KL_INDEX];
    const double kl_target = isv[RLLIB_KL_TARGET_INDEX];
    float kl_coeff = isv[RLLIB_KL_COEFF_INDEX];

    if (kl > (float)(KL_UPPER_FACTOR * kl_target)) {
        kl_coeff = kl_coeff * COEFF_INCREASE;
    } else if (kl < (float)(KL_LOWER_FACTOR * kl_target)) {
        kl_coeff = kl_coeff * COEFF_DECREASE;
    }

    isv[RLLIB_KL_COEFF_INDEX] = kl_coeff;
}
