"""What every command line shares: argparse errors in one line (exit 2), and stdout closed early by a reader."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, ``NAME: error: … (see --help)``, and exit 2."""

    def error(self, message: str):
        name = self.prog.split()[-1].rsplit(".", 1)[-1]
        print(f"{name}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)



def run(main: Callable[[], int]) -> int:
    """``main()`` as a process's exit code; a reader that closes stdout early (``| head``) ends it quietly (2)."""
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit (which would exit 120)
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 2  # the output was not delivered


def dispatch(argv: list[str]) -> int:
    """``python -m analysis COMMAND ARGS``: import the command's module and run its ``main`` under :func:`run`."""
    import importlib

    from analysis.cli import COMMANDS

    width = max(map(len, COMMANDS))
    listing = "\n".join(f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items())
    if not argv or argv[0] in ("-h", "--help"):
        print(f"usage: python -m analysis COMMAND [ARGS] (COMMAND --help for its own)\n\ncommands:\n{listing}")
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"analysis: error: unknown command {name!r} (one of: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as err:
        print(f"{name}: error: missing dependency {err.name!r} (install the run group: pip install --group run)",
              file=sys.stderr)
        return 2
    return run(lambda: module.main(rest))
