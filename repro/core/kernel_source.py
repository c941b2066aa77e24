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

from repro.core.errors import SuiteError
from repro.core.paths import shown

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
#: CUDA intrinsics whose GPU result is approximate (not correctly rounded): the host computes them
#: with the C library's correctly rounded (or nearly so) function, so CPU and GPU may differ in the last bits.
APPROXIMATE_INTRINSICS = ("__expf", "__exp10f", "__logf", "__log2f", "__log10f", "__powf", "__sinf", "__cosf",
                          "__tanf", "__sincosf", "__fdividef", "__frsqrt_rn", "rsqrtf")
_APPROX = re.compile(r"\b(" + "|".join(APPROXIMATE_INTRINSICS) + r")\s*\(")
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

    def approximate_intrinsics(self) -> list[tuple[str, int]]:
        """``(intrinsic, line)`` for each approximate CUDA intrinsic the source calls (comments ignored)."""
        code = code_only(self.text)
        return [(m.group(1), code.count("\n", 0, m.start()) + 1) for m in _APPROX.finditer(code)]

    def defines(self) -> dict[str, str]:
        """The source's ``#define NAME value`` pairs, values as written."""
        return {m.group("name"): m.group("value") for m in _DEFINE.finditer(self.text)}

    def with_defines(self, **overrides: str | float) -> KernelSource:
        """A variant whose named ``#define``s carry new values (floats become ``1.5f``)."""
        known = self.defines()
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise SuiteError(f"{self.origin}: no #define named {', '.join(unknown)} (it defines: {', '.join(known)})")

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
    """Read a ``.cu`` file whose kernel is ``symbol`` (each backend checks that production can launch it by that name:
    :func:`repro.backends.translation_unit.entry`, which reads what the preprocessor makes of the text)."""
    path = Path(path)
    try:
        if path.is_dir():
            raise SuiteError(f"kernel file {path} is a folder; name the .cu file in it")
        if path.exists() and not path.is_file():
            raise SuiteError(f"kernel file {path} is not a regular file (a device or a pipe); name a .cu file")
        if not path.is_file():
            raise SuiteError(f"kernel file not found: {path}")
        text = path.read_text(encoding="utf-8")
    except OSError as err:  # a name too long, permission denied
        raise SuiteError(f"cannot read kernel file {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise SuiteError(f"cannot read kernel file {path}: {err}") from None
    if text.startswith("\ufeff"):  # nvcc, NVRTC and the C++ compiler all reject it, with a puzzling message
        raise SuiteError(f"kernel file {path} starts with a UTF-8 byte-order mark (BOM), which CUDA compilers "
                         "reject: save it as UTF-8 without a BOM")
    return KernelSource(text=text, symbol=symbol, origin=shown(path))


def code_only(text: str) -> str:
    """``text`` with comments blanked (line breaks kept, so offsets map to the same lines)."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)

