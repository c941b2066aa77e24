"""What the tests run on, in one place: the controllers under test (read from the contract), the candidate
kernels of tests/candidates/ with their headers, and the mutants of the fixed kernel.

Test modules import these from here, never from one another.
"""

from __future__ import annotations

import json
from pathlib import Path

from repro.core.contract import CONTRACTS, ROOT, Contract
from repro.core.kernel_source import KernelSource

CANDIDATES = sorted((Path(__file__).parent / "candidates").glob("*.cu"))
#: The kernel symbol every candidate defines (the fixed controller's).
SYMBOL = "rl_q_distill_lambda_controller"
#: The header keys a candidate may carry (``// key: value`` lines at its top).
HEADER_KEYS = ("expect-exit", "expect-row", "expect-text", "gate-args", "needs")


def subjects(contract: Contract) -> list[str]:
    """The suite's own controllers, in file order: every contract entry that is not a peer (a peer carries a
    ``source``; tests/test_peers.py judges those). A new controller entry in kernels/contracts.toml is a subject of
    the property and agreement tests with nothing else to edit."""
    return [name for name, entry in contract.controllers.items() if not entry.source]


def header(path: Path) -> dict[str, str]:
    """The ``// key: value`` lines of a candidate's header comment."""
    out = {}
    for line in path.read_text().splitlines():
        if not line.startswith("//"):
            break
        key, sep, value = line[2:].strip().partition(":")
        if sep and key in HEADER_KEYS:
            out[key] = value.strip()
    return out


_WRITE = "isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;"

#: name -> (how the fixed kernel is broken, properties that must fail)
MUTANTS = {
    "floor_0.04": (dict(defines={"MIN_LAMBDA": 0.04}), {"floor"}),
    "no_floor_clamp": (dict(edit=("fmaxf(MIN_LAMBDA, lambda * LAMBDA_DECAY_RATE)", "lambda * LAMBDA_DECAY_RATE")),
                       {"floor"}),
    "ceiling_0.9": (dict(defines={"MAX_LAMBDA": 0.9}), {"ceiling"}),
    "tolerance_2.5": (dict(defines={"KL_TOLERANCE": 2.5}), {"dead_zone", "ramp_onset", "decay_onset"}),
    "decay_0.997": (dict(defines={"LAMBDA_DECAY_RATE": 0.997}), {"decay", "steps_to_halve"}),
    "ramp_1.25": (dict(defines={"LAMBDA_RAMP_RATE": 1.25}), {"ramp"}),
    "ramp_ge": (dict(edit=("kl_observed > upper", "kl_observed >= upper")), {"ramp_onset", "dead_zone"}),
    "decay_le": (dict(edit=("kl_observed < lower", "kl_observed <= lower")), {"decay_onset", "dead_zone"}),
    "writes_slot_487": (dict(edit=(_WRITE, _WRITE + "\n    isv[RL_Q_DISTILL_LAMBDA_INDEX + 1] = lambda;")), {"isolation"}),
    "writes_slot_0": (dict(edit=(_WRITE, _WRITE + "\n    isv[0] = kl_observed;")), {"isolation"}),
    "no_kl_guard": (dict(edit=("kl_observed <= 0.0f || ", "")), {"guards"}),
    "no_target_guard": (dict(edit=("kl_target <= 0.0f || ", "")), {"guards"}),
    "no_lambda_guard": (dict(edit=(" || lambda <= 0.0f", "")), {"guards"}),
    "reads_slot_489": (dict(defines={"RL_Q_DISTILL_KL_EMA_INDEX": 489}), {"spec_agreement", "floor"}),
    # decays ×0.99 (5× faster) where KL is between target/30 and target/3: no sustained-KL scenario sits there
    # (aligned KL is target/100), a warming EMA passes through it
    "fast_decay_near_band": (dict(edit=("lambda * LAMBDA_DECAY_RATE",
                                        "lambda * (kl_observed > lower * 0.1f ? 0.99f : LAMBDA_DECAY_RATE)")),
                             {"warm_up_loss", "spec_agreement"}),
    "nan_lambda_kept": (dict(edit=("fminf(MAX_LAMBDA, lambda * LAMBDA_RAMP_RATE)",
                                   "(lambda * LAMBDA_RAMP_RATE > MAX_LAMBDA ? MAX_LAMBDA : lambda * LAMBDA_RAMP_RATE)")),
                        {"nonfinite"}),
}


def mutant(contract: Contract, name: str) -> KernelSource:
    """The fixed kernel broken as :data:`MUTANTS` says for ``name``."""
    how, _ = MUTANTS[name]
    src = contract.source("fixed")
    if "defines" in how:
        return src.with_defines(**how["defines"])
    old, new = how["edit"]
    return src.with_edit(old, new, name)


def contracts_file(config) -> Path:
    """The contract file a pytest session judges against: its ``--contracts FILE`` (given with ``--kernel``), else
    the tracked one (what the ``contract`` fixture, the subjects and test_agreement's parameters load)."""
    return config.getoption("--contracts", default=None) or CONTRACTS


def forger(tmp_path: Path, name: str, payload: str, status: int) -> Path:
    """The fixed kernel whose host build, at load, writes ``payload`` where a confined command's child hands back
    what it measured ($TMPDIR/out/NAME: :func:`analysis.cli.confined.measure`) and ends the child with exit status
    ``status`` before anything runs."""
    forge = ("#if !defined(__CUDACC_RTC__) && !defined(__CUDA_ARCH__)\n#include <stdio.h>\n#include <stdlib.h>\n"
             "#include <unistd.h>\n__attribute__((constructor)) static void rlq_forge() {\n"
             '    const char* tmp = getenv("TMPDIR");\n    char path[4096];\n'
             f'    if (tmp && snprintf(path, sizeof path, "%s/out/{name}", tmp) > 0) {{\n'
             '        FILE* f = fopen(path, "w");\n'
             f'        if (f) {{ fputs({json.dumps(payload)}, f); fclose(f); }}\n    }}\n    _exit({status});\n}}\n#endif\n')
    path = tmp_path / "forger.cu"
    fixed = (ROOT / "kernels" / "rl_q_distill_lambda_controller.cu").read_text()
    path.write_text(fixed.replace('extern "C"', forge + 'extern "C"', 1))
    return path
