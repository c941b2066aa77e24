"""``python -m analysis.gate``: the gate under the name the pre-commit hook and CI recipes use (= ``python -m analysis gate``)."""

import sys

from analysis.cli.policy import dispatch

if __name__ == "__main__":
    sys.exit(dispatch(["gate", *sys.argv[1:]]))
