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
