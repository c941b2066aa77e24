"""``python -m analysis COMMAND [ARGS]``: every command line of the suite (``python -m analysis --help`` lists them)."""

import sys

from analysis.cli.policy import dispatch

sys.exit(dispatch(sys.argv[1:]))
