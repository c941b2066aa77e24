"""``python -m analysis COMMAND [ARGS]``: every command line of the suite (``python -m analysis --help`` lists them)."""

import sys

try:
    from analysis.cli.policy import dispatch

    code = dispatch(sys.argv[1:])
except KeyboardInterrupt:  # Ctrl-C before the dispatcher's own guard is up (while importing it)
    print("analysis: error: interrupted", file=sys.stderr)
    code = 2
sys.exit(code)
