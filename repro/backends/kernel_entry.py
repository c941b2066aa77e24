"""The kernel the production path launches by name, read from the candidate's preprocessed tokens.

Production builds the candidate's own text with NVRTC and launches ``cupy.RawModule(code=…).get_function(SYMBOL)``:
that finds a kernel only where NVRTC's PTX has an ``.entry SYMBOL``, which it has for a ``__global__`` function
that is defined, has C language linkage (its name is not mangled) and is not internal (``static``, or in an unnamed
namespace: NVRTC mangles those whatever their linkage). However the name is spelled (a macro, a pasted token, a line
continuation), in whichever namespace, ``extern "C"`` on the declaration or a block around it, or on an earlier
declaration of it. :func:`declarations` reads each function declared at namespace scope from the tokens, and
:func:`launchable` applies those rules; tests/test_kernel_entry.py checks them against NVRTC's PTX on every form and
every candidate of the catalogue.

The harness calls the controller by its qualified name (``::rlq::NAME`` for a kernel in ``namespace rlq``): an
``extern "C"`` function is still a member of its namespace for C++'s name lookup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from repro.core.errors import SuiteError

#: Names followed by ``(`` among a declaration's specifiers that are not its declarator (attributes, specifiers).
_NOT_DECLARATORS = frozenset({
    "__launch_bounds__", "__maxnreg__", "__cluster_dims__", "__attribute__", "__attribute", "__declspec", "alignas",
    "_Alignas", "__align__", "decltype", "__decltype", "noexcept", "throw", "sizeof", "alignof", "__pragma", "operator",
})


@dataclass(frozen=True)
class Declaration:
    """One function declared at namespace scope (a definition when ``defined``)."""

    name: str
    scope: tuple[str, ...]  # enclosing namespaces, outermost first ("": an unnamed one)
    linkage: str | None  # "C" or "C++" where the declaration or an enclosing block says so; None: C++ by default
    is_global: bool  # __global__
    static: bool
    defined: bool


@dataclass(frozen=True)
class Entry:
    """The kernel production launches by ``symbol``, and the name the harness calls it by (qualified)."""

    symbol: str
    call: str


def _namespace(head: Sequence[str]) -> tuple[str, ...] | None:
    """The names a ``namespace`` head opens (``a::b`` → two, unnamed → ``("",)``); None: not a namespace head."""
    rest = list(head[1:] if head[:1] == ["inline"] else head)
    if rest[:1] != ["namespace"]:
        return None
    names = [t for t in rest[1:] if t not in ("::", "inline") and (t[0].isalpha() or t[0] == "_")]
    names = [t for t in names if not t.startswith("__attribute")]
    return tuple(names) or ("",)


def _declarator(head: Sequence[str]) -> tuple[int, tuple[str, ...], bool] | None:
    """Where ``head`` (a declaration's tokens up to its body or ``;``) declares a function: the index of its name,
    the name's own qualifier (``a::f`` → ``("a",)``) and whether that qualifier starts at the global scope."""
    depth = 0
    for i, tok in enumerate(head):
        if tok in ("(", "["):
            depth += 1
        elif tok in (")", "]"):
            depth -= 1
        elif tok == "=" and depth == 0:
            return None  # an initializer: a variable, not a function
        elif depth == 0 and (tok[0].isalpha() or tok[0] == "_") and tok not in _NOT_DECLARATORS:
            j = i + 1
            while head[j : j + 2] == ["[", "["]:  # f [[attribute]] (…)
                close = next((k for k in range(j + 2, len(head) - 1) if head[k : k + 2] == ["]", "]"]), len(head))
                j = close + 2
            if j < len(head) and head[j] == "(":
                qualifier, k = [], i
                while k >= 2 and head[k - 1] == "::" and (head[k - 2][0].isalpha() or head[k - 2][0] == "_"):
                    qualifier.insert(0, head[k - 2])
                    k -= 2
                return i, tuple(qualifier), k >= 1 and head[k - 1] == "::"
    return None


def _specifiers(head: Sequence[str], end: int) -> set[str]:
    """The tokens of ``head[:end]`` outside brackets (``__global__``, ``static``, …)."""
    depth, out = 0, set()
    for tok in head[:end]:
        depth += (tok in ("(", "[")) - (tok in (")", "]"))
        if depth == 0:
            out.add(tok)
    return out


def declarations(tokens: Sequence[str]) -> list[Declaration]:
    """Each function declared at namespace scope in ``tokens`` (a preprocessed translation unit), in order."""
    frames: list[tuple[str, tuple[str, ...] | str]] = []  # ("namespace", names) or ("linkage", "C" / "C++")
    out, start, i, n = [], 0, 0, len(tokens)

    def record(head: Sequence[str], defined: bool) -> None:
        found = _declarator(head)
        if found is None:
            return
        at, qualifier, absolute = found
        specifiers = _specifiers(head, at)
        scope = tuple(name for kind, names in frames if kind == "namespace" for name in names)
        if list(head[:2]) in (["extern", '"C"'], ["extern", '"C++"']):
            linkage = head[1].strip('"')
        else:
            linkage = next((value for kind, value in reversed(frames) if kind == "linkage"), None)
        out.append(Declaration(head[at], qualifier if absolute else scope + qualifier, linkage,
                               "__global__" in specifiers or "global" in head[:at], "static" in specifiers, defined))

    depth = 0  # parentheses and brackets of the declaration being read
    while i < n:
        tok = tokens[i]
        if tok in ("(", "["):
            depth += 1
        elif tok in (")", "]"):
            depth -= 1
        elif tok == ";" and depth == 0:
            record(tokens[start:i], defined=False)
            start = i + 1
        elif tok == "}" and depth == 0:
            if frames:
                frames.pop()
            start = i + 1
        elif tok == "{":
            head = list(tokens[start:i])
            names = _namespace(head) if depth == 0 else None
            if names is not None:
                frames.append(("namespace", names))
            elif depth == 0 and head in (["extern", '"C"'], ["extern", '"C++"']):
                frames.append(("linkage", head[1].strip('"')))
            else:  # a body (function, class, initializer, lambda): skipped whole
                if depth == 0:
                    record(head, defined=True)
                level = 0
                while i < n:
                    level += (tokens[i] == "{") - (tokens[i] == "}")
                    if level == 0:
                        break
                    i += 1
                if depth:
                    i += 1
                    continue
            start = i + 1
        i += 1
    return out


def launchable(decls: Sequence[Declaration], symbol: str, origin: str) -> Entry:
    """The kernel ``symbol`` as production launches it, or a one-line :class:`SuiteError` saying why it cannot."""
    named = [d for d in decls if d.name == symbol]
    kernels = list(dict.fromkeys(d.name for d in decls if d.is_global))
    # a redeclaration keeps the linkage of the first declaration of the same function (the same scope)
    c_scopes = {d.scope for d in named if d.linkage == "C"}
    with_c = [d for d in named if d.scope in c_scopes]  # every C function of one name is one function
    if not any(d.is_global for d in named):
        listed = ", ".join(kernels) if kernels else "no __global__ function"
        raise SuiteError(f"{origin}: no kernel named {symbol!r} (found: {listed})")
    if not with_c or not any(d.is_global for d in with_c):
        raise SuiteError(f'{origin}: kernel {symbol!r} is not extern "C" (C++ mangles its name, so it '
                         f'cannot be launched by name): declare it extern "C" __global__ void {symbol}(…)')
    defined = [d for d in with_c if d.defined]
    if not defined:
        raise SuiteError(f"{origin}: kernel {symbol!r} is declared but never defined (found no body for it)")
    if any(d.static or "" in d.scope for d in with_c):
        raise SuiteError(f"{origin}: kernel {symbol!r} is internal (static, or in an unnamed namespace): NVRTC "
                         f'mangles its name, so it cannot be launched by name; declare it extern "C" __global__ '
                         f"void {symbol}(…) outside an unnamed namespace, without static")
    scope = defined[-1].scope
    return Entry(symbol, "::" + "::".join((*scope, symbol)) if scope else symbol)
