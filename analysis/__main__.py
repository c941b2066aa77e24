"""``python -m analysis COMMAND [ARGS]``: every command line of the suite (``python -m analysis --help`` lists them)."""

import sys

try:
    from analysis.cli import policy

    policy.leave(policy.dispatch(sys.argv[1:]))
except KeyboardInterrupt:  # Ctrl-C before the dispatcher's own guard is up (while importing it)
    print(f"{sys.argv[1] if len(sys.argv) > 1 else 'analysis'}: error: interrupted", file=sys.stderr)
    sys.exit(2)
