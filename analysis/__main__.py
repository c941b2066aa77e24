"""``python -m analysis COMMAND [ARGS]``: every command line of the suite (``python -m analysis --help`` lists them)."""

import signal
import sys

# Ctrl-C and SIGTERM wait until the command's module is imported (analysis.cli.policy.hold_interrupt says why)
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
from analysis.cli import policy  # noqa: E402

policy.listen_for_stops()
policy.leave(policy.dispatch(sys.argv[1:]))
