"""``python -m analysis.gate``: the gate under the name the pre-commit hook and CI recipes use (= ``python -m analysis gate``)."""

import sys

if __name__ == "__main__":
    try:
        from analysis.cli.policy import dispatch

        code = dispatch(["gate", *sys.argv[1:]])
    except KeyboardInterrupt:  # Ctrl-C while importing the dispatcher
        print("gate: error: interrupted", file=sys.stderr)
        code = 2
    sys.exit(code)
