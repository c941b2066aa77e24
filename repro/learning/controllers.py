"""Controller names → kernel sources with their seed λ, for the learning loop.

Names:
- a contract entry (``fixed``, ``original``, and any other entry ``kernels/contracts.toml`` holds, peers
  included), looked up through the contract;
- ``const:X`` — λ held at X: the fixed kernel's source with ramp and decay set to 1 and the floor to 0
  (``with_defines``), so λ·1 = λ exactly and the same batched harness runs (a test checks λ's bits hold);
- ``ablation:F1+F2…`` — the original with the named fixes of the toy's ablation applied
  (:data:`repro.core.ablation.FACTORS`: floor, asymmetric, tolerance, seed), by the same ``with_defines``.
"""

from __future__ import annotations

import itertools

import numpy as np

from repro.core.ablation import FACTORS, variant
from repro.core.contract import Contract
from repro.core.errors import SuiteError
from repro.learning.agent import Arm


def group(backend, name: str, contract: Contract, source=None) -> Arm:
    """The :class:`Arm` for one controller name, looked up in ``contract`` (one-line :class:`SuiteError` for a bad
    name or a source that does not compile on ``backend``).

    ``source`` runs that kernel source under a contract name (seeded with the entry's λ): a candidate.
    """
    source, seed = source_and_seed(name, contract, source)
    # an entry's own layout: a stateful controller's slots seeded with their start values in every run
    slots = contract.slots_of(name) if name in contract.controllers else contract.slots
    arm = Arm(name, source, slots, seed)
    backend.compile_learner(arm.source, arm.slots)  # compile errors now, as one line, before any run starts
    return arm


def source_and_seed(name: str, contract: Contract, source=None):
    """The kernel source and seed λ of controller ``name`` (one-line :class:`SuiteError` for a bad name); ``source``
    runs that source under a contract name (a candidate). Shared by :func:`group` and the deep loop."""
    if name.startswith("const:"):
        try:
            seed = float(name.split(":", 1)[1])  # the arm's seed λ is the constant: rates of 1, no floor
        except ValueError:
            raise SuiteError(f"controller {name!r}: const:X needs a number X") from None
        # λ lives in a float32 slot: no subnormal; 0 exactly is no distillation (the kernel's guard holds λ ≤ 0)
        if not (seed == 0 or np.finfo(np.float32).tiny <= seed <= 1):
            raise SuiteError(f"controller {name!r}: a constant λ must be 0 or lie in (0, 1] as a normal float32 "
                             f"(at least {np.finfo(np.float32).tiny:.3g})")
        source = contract.source("fixed").with_defines(LAMBDA_RAMP_RATE=1.0, LAMBDA_DECAY_RATE=1.0, MIN_LAMBDA=0.0)
    elif name.startswith("ablation:"):
        fixes = _fixes(name.split(":", 1)[1])
        if fixes is None:
            raise SuiteError(f"controller {name!r}: fixes must be from {', '.join(FACTORS)}, each at most once, "
                             "joined by +")
        source, seed = variant(contract.source("original"), contract.controller("original"),
                               contract.controller("fixed"), fixes)
    else:
        seed = contract.controller(name).value("seed_lambda")
        source = source or contract.source(name)
    return source, seed


def _fixes(text: str) -> list[str] | None:
    """``floor+seed`` → its fixes (each from :data:`FACTORS`, at most once); None when it is not such a list."""
    fixes = text.split("+")
    return fixes if set(fixes) <= set(FACTORS) and len(set(fixes)) == len(fixes) else None


def canonical(name: str) -> str:
    """One spelling per controller: ``const:1.0`` → ``const:1``, ``ablation:seed+floor`` → ``ablation:floor+seed``
    (a name that does not parse is left for :func:`group` to refuse)."""
    kind, _, rest = name.partition(":")
    if kind == "const":
        try:
            return f"const:{float(rest):g}"
        except ValueError:
            return name
    if kind == "ablation" and (fixes := _fixes(rest)) is not None:
        return "ablation:" + "+".join(f for f in FACTORS if f in fixes)
    return name


def _group_names(name: str, contract: Contract) -> list[str]:
    """A name that stands for several controllers, as the studies' pre-registrations write them (else itself):
    ``ablation`` the 14 variants strictly between the original (no fix) and the fixed kernel (all four),
    ``single_fixes`` each fix alone, ``fixes_removed`` all fixes but one, ``contract`` every entry of
    ``contract``, ``peers`` its entries other than fixed and original."""
    if name == "ablation":
        combos = [c for c in itertools.product((False, True), repeat=len(FACTORS)) if 0 < sum(c) < len(FACTORS)]
        return ["ablation:" + "+".join(itertools.compress(FACTORS, c)) for c in combos]
    if name == "single_fixes":
        return [f"ablation:{f}" for f in FACTORS]
    if name == "fixes_removed":
        return ["ablation:" + "+".join(g for g in FACTORS if g != f) for f in FACTORS]
    if name in ("contract", "peers"):  # as pre-registered: the entries without state of their own (issue 35's are new)
        entries = sorted(n for n, c in contract.controllers.items() if not c.stateful)
        return entries if name == "contract" else [e for e in entries if e not in ("fixed", "original")]
    return [name]


def expand(names: list[str], contract: Contract) -> list[str]:
    """Names with each group (:func:`_group_names`, the entry groups read from ``contract``) expanded, spelled
    canonically, duplicates dropped (order kept)."""
    return list(dict.fromkeys(canonical(n) for name in names for n in _group_names(name, contract)))
