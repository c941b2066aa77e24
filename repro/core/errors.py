"""The one error type a user sees: a single clear line, exit code 2 from the CLIs."""

from __future__ import annotations

from collections.abc import Callable


class SuiteError(Exception):
    """Bad input or an unusable backend; ``str(err)`` is the one line to show."""


class BackendUnavailable(SuiteError):
    """A backend cannot run on this machine (no compiler, no CuPy, no device)."""


def unavailable_reason(probe: Callable[[], object]) -> str | None:
    """None when ``probe()`` runs here, else the one line of the :class:`BackendUnavailable` it raised."""
    try:
        probe()
    except BackendUnavailable as err:
        return str(err)
    return None
