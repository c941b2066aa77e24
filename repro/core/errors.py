"""The one error type a user sees: a single clear line, exit code 2 from the CLIs."""


class SuiteError(Exception):
    """Bad input or an unusable backend; ``str(err)`` is the one line to show."""


class BackendUnavailable(SuiteError):
    """A backend cannot run on this machine (no compiler, no CuPy, no device)."""
