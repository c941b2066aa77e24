"""Kernel sources: loading with clear errors, content hashes, and ``#define`` variants.

``with_defines`` is the suite's one mechanism for kernel variants (mutants in
the tests, the ablation of the closed-loop study): it rewrites the value of
existing ``#define NAME value`` lines and rejects a name the source lacks.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

from repro.errors import SuiteError
from repro.paths import shown

_KERNEL_DEF = re.compile(r"__global__\s+void\s+([A-Za-z_]\w*)\s*\(")
_DEFINE = re.compile(r"^(?P<head>\s*#\s*define\s+(?P<name>[A-Za-z_]\w*)\s+)(?P<value>.*?)\s*$", re.M)


@dataclass(frozen=True)
class KernelSource:
    """A controller's CUDA source text, where it came from, and its entry point."""

    text: str
    symbol: str
    origin: str  # file path, or a description for generated variants

    @property
    def sha256(self) -> str:
        """Hash of the source text (what the report prints to trace a result)."""
        return hashlib.sha256(self.text.encode()).hexdigest()

    def kernels(self) -> list[str]:
        """Names of the ``__global__`` functions the source defines."""
        return _KERNEL_DEF.findall(self.text)

    def defines(self) -> dict[str, str]:
        """The source's ``#define NAME value`` pairs, values as written."""
        return {m.group("name"): m.group("value") for m in _DEFINE.finditer(self.text)}

    def with_defines(self, **overrides: str | float) -> KernelSource:
        """A variant whose named ``#define``s carry new values (floats become ``1.5f``)."""
        known = self.defines()
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise SuiteError(
                f"{self.origin}: no #define named {', '.join(unknown)} (it defines: {', '.join(known)})"
            )

        def rewrite(match: re.Match) -> str:
            name = match.group("name")
            if name not in overrides:
                return match.group(0)
            value = overrides[name]
            text = f"{float(value)!r}f" if isinstance(value, float) else str(value)
            return match.group("head") + text

        label = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items()))
        return replace(self, text=_DEFINE.sub(rewrite, self.text), origin=f"{self.origin} [{label}]")

    def with_edit(self, old: str, new: str, label: str) -> KernelSource:
        """A variant with one exact text substitution (a hand-made mutant); ``old`` must occur."""
        if old not in self.text:
            raise SuiteError(f"{self.origin}: text to replace not found: {old!r}")
        return replace(self, text=self.text.replace(old, new, 1), origin=f"{self.origin} [{label}]")


def load_kernel(path: Path | str, symbol: str) -> KernelSource:
    """Read a ``.cu`` file and check that it defines the kernel ``symbol``."""
    path = Path(path)
    if not path.is_file():
        raise SuiteError(f"kernel file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SuiteError(f"cannot read kernel file {path}: {err}") from None
    source = KernelSource(text=text, symbol=symbol, origin=shown(path))
    check_symbol(source)
    return source


def check_symbol(source: KernelSource) -> None:
    """Raise a one-line error unless the source defines ``extern "C" __global__ void SYMBOL(``."""
    found = source.kernels()
    if source.symbol not in found:
        listed = ", ".join(found) if found else "no __global__ function"
        raise SuiteError(f"{source.origin}: no kernel named {source.symbol!r} (found: {listed})")
