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

# ``__global__``, then any attributes (``__launch_bounds__(…)``, ``__attribute__((…))``, qualifiers) and
# line breaks, ``void``, perhaps more attributes, the name and ``(``.
_ATTR = r"(?:__launch_bounds__\s*\([^()]*\)|__attribute__\s*\(\([^()]*(?:\([^()]*\)[^()]*)*\)\)|__noinline__|static|inline)"
_KERNEL_DEF = re.compile(rf"\b__global__(?:\s+{_ATTR})*\s+void(?:\s+{_ATTR})*\s+([A-Za-z_]\w*)\s*\(")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_EXTERN_C = re.compile(r'extern\s+"C"')
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

    def kernels(self) -> list[str]:
        """Names of the ``__global__`` functions the source defines (comments ignored)."""
        return _KERNEL_DEF.findall(code_only(self.text))

    def is_extern_c(self, name: str) -> bool:
        """True when kernel ``name`` has C linkage: ``extern "C"`` in its declaration or an enclosing block."""
        code = code_only(self.text)
        match = next((m for m in _KERNEL_DEF.finditer(code) if m.group(1) == name), None)
        if match is None:
            return False
        before = code[: match.start()]
        cut = max(before.rfind(";"), before.rfind("}"), before.rfind("{"))
        if _EXTERN_C.search(before[cut + 1 :]):
            return True
        opened = []  # an enclosing ``extern "C" {`` block: the innermost brace still open, right after extern "C"
        for brace in re.finditer(r"[{}]", before):
            if brace.group() == "{":
                opened.append(brace.start())
            elif opened:
                opened.pop()
        return bool(opened) and bool(re.search(r'extern\s+"C"\s*$', before[: opened[-1]]))

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
    """Read a ``.cu`` file and check that it defines the kernel ``symbol``."""
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
    source = KernelSource(text=text, symbol=symbol, origin=shown(path))
    check_symbol(source)
    return source


def code_only(text: str) -> str:
    """``text`` with comments blanked (line breaks kept, so offsets map to the same lines)."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def check_symbol(source: KernelSource) -> None:
    """Raise a one-line error unless the source defines ``extern "C" __global__ void SYMBOL(``."""
    found = source.kernels()
    if source.symbol not in found:
        listed = ", ".join(found) if found else "no __global__ function"
        raise SuiteError(f"{source.origin}: no kernel named {source.symbol!r} (found: {listed})")
    if not source.is_extern_c(source.symbol):
        raise SuiteError(f'{source.origin}: kernel {source.symbol!r} is not extern "C" (C++ mangles its name, so it '
                         f'cannot be launched by name): declare it extern "C" __global__ void {source.symbol}(…)')
