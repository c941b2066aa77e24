"""``python -m analysis.gate``: the gate under the name the pre-commit hook and CI recipes use (= ``python -m analysis gate``)."""

import signal
import sys

if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # until the gate is imported: policy.hold_interrupt
    from analysis.cli import policy

    policy.leave(policy.dispatch(["gate", *sys.argv[1:]]))
