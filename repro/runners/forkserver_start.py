"""Imported first by a device backend's forkserver (multiprocessing's preload, :data:`repro.runners.isolation.
FORKSERVER_PRELOAD`), in the server, before its first fork: the server is killed when the command that started it
dies. Its workers die with the server (:func:`repro.runners.isolation._die_with`), so a command killed from outside
(a CI job's time limit) takes a worker hung in a candidate's loop with it; the server itself would otherwise live
on as long as any of its workers does (each holds its end of the server's pipe from the command)."""

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1  # prctl(2)


def _die_with_the_command() -> None:
    command = os.getppid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return
    prctl.argtypes, prctl.restype = [ctypes.c_int, *[ctypes.c_ulong] * 4], ctypes.c_int
    if prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0 and os.getppid() != command:
        os._exit(0)  # the command died before the call above


_die_with_the_command()
