"""What every command line shares: argparse errors in one line (exit 2), and stdout closed early by a reader."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, ``NAME: error: … (see --help)``, and exit 2."""

    def error(self, message: str):
        name = self.prog.split()[-1].rsplit(".", 1)[-1]
        print(f"{name}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


@contextmanager
def dependencies(name: str, module: str) -> Iterator[None]:
    """Around a command line's imports: run as ``__main__``, a missing package is one line and exit 2."""
    try:
        yield
    except ModuleNotFoundError as err:
        if module != "__main__":
            raise
        print(f"{name}: error: missing dependency {err.name!r} (install the run group: pip install --group run)",
              file=sys.stderr)
        sys.exit(2)


def run(main: Callable[[], int]) -> int:
    """``main()`` as a process's exit code; a reader that closes stdout early (``| head``) ends it quietly (2)."""
    try:
        code = main()
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit (which would exit 120)
        return code
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 2  # the output was not delivered
