"""``python -m analysis.gate``: the gate under the name the pre-commit hook and CI recipes use (= ``python -m analysis gate``)."""

import sys

if __name__ == "__main__":
    try:
        from analysis.cli import policy

        policy.leave(policy.dispatch(["gate", *sys.argv[1:]]))
    except KeyboardInterrupt:  # Ctrl-C while importing the dispatcher
        print("gate: error: interrupted", file=sys.stderr)
        sys.exit(2)
