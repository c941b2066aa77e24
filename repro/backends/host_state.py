"""State a host-built candidate keeps outside the ISV: its own writable data, after its runs, against its load image.

The kernel promises that all its state lives in the ISV. On the host build a ``__device__`` or ``__constant__``
variable, a file-scope or function-local ``static`` is an object in the candidate library's writable data
(``.data``, ``.bss``): :func:`changed_objects` reads each such object of the loaded library (found in the ELF
symbol table: ``STT_OBJECT``, a size, a writable non-TLS section) and compares its bytes with what the file
loads it as (its initial bytes; zeros in ``.bss``). Any byte changed is state kept outside the ISV, named by
symbol. The harness and the shim define no such object (their launch coordinates are thread-local); the
toolchain's (``completed.0``, written only when the library unloads) are left out by name.

Reads only the library file and this process's memory at the symbols' addresses; no candidate code runs here,
and no process starts (it runs in the sandboxed worker; :func:`readable` names the symbols in the gate's process).
"""

from __future__ import annotations

import ctypes
import shutil
import struct
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

_SHF_WRITE, _SHF_TLS = 0x1, 0x400
_SHT_SYMTAB, _SHT_NOBITS = 2, 8
_STT_OBJECT = 1
#: Objects the toolchain links into every shared library (crtstuff): not the candidate's.
_TOOLCHAIN = frozenset({"completed.0", "__dso_handle", "__TMC_END__"})


@dataclass(frozen=True)
class DataObject:
    """One writable object of the library: its name, offset from the load base, size (bytes), initial bytes."""

    name: str
    offset: int
    size: int
    initial: bytes


@dataclass(frozen=True)
class HostState:
    """What :func:`changed_objects` found: the objects read, and those whose bytes changed (name, bytes changed)."""

    objects: tuple[str, ...]
    changed: tuple[tuple[str, int], ...]
    measured: bool = True  # False: this build's data could not be read (not an ELF64 little-endian library)
    why: str = ""
    runs: int = 0  # experiment groups this process ran on the kernel before reading it (0: the read shows nothing)


def data_objects(path: Path) -> tuple[DataObject, ...] | None:
    """The writable, non-thread-local data objects the ELF64 little-endian library at ``path`` defines (None:
    another format)."""
    blob = path.read_bytes()
    if blob[:4] != b"\x7fELF" or blob[4] != 2 or blob[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", blob, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", blob, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", blob, shoff + i * shentsize) for i in range(shnum)]
    symtab = next((s for s in sections if s[1] == _SHT_SYMTAB), None)
    if symtab is None:  # stripped: the dynamic symbols only
        symtab = next((s for s in sections if s[1] == 11), None)  # SHT_DYNSYM
    if symtab is None:
        return ()
    strings = sections[symtab[6]]
    out = {}
    for i in range(symtab[5] // 24):
        name_at, info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", blob, symtab[4] + i * 24)
        if info & 0xF != _STT_OBJECT or size == 0 or not 0 < shndx < len(sections):
            continue
        _name, kind, flags, addr, offset, *_ = sections[shndx]
        if not flags & _SHF_WRITE or flags & _SHF_TLS:
            continue
        start = strings[4] + name_at
        name = blob[start: blob.index(b"\0", start)].decode(errors="replace")
        if name in _TOOLCHAIN:
            continue
        initial = bytes(size) if kind == _SHT_NOBITS else blob[offset + value - addr: offset + value - addr + size]
        out[(value, name)] = DataObject(name, value, size, initial)
    return tuple(out.values())


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def _load_base(function) -> int | None:
    """The load address of the library holding the ctypes ``function`` (dladdr), or None."""
    try:
        dladdr = ctypes.CDLL(None).dladdr
    except (OSError, AttributeError):
        return None
    dladdr.argtypes, dladdr.restype = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)], ctypes.c_int
    info = _DlInfo()
    if not dladdr(ctypes.cast(function, ctypes.c_void_p), ctypes.byref(info)):
        return None
    return info.dli_fbase


def changed_objects(library: Path, function) -> HostState:
    """Each writable data object of the loaded ``library`` (``function``: one of its functions, as ctypes
    loaded it) whose bytes in this process differ from its load image."""
    objects = data_objects(library)
    base = _load_base(function)
    if objects is None or base is None:
        return HostState((), (), measured=False,
                         why="the library is not an ELF64 little-endian file" if objects is None else "dladdr failed")
    changed = []
    for obj in objects:
        now = ctypes.string_at(base + obj.offset, obj.size)
        diff = sum(a != b for a, b in zip(now, obj.initial, strict=True))
        if diff:
            changed.append((obj.name, diff))
    return HostState(tuple(o.name for o in objects), tuple(changed))


def readable(state: HostState) -> HostState:
    """``state`` with its C++ symbols as the source spells them (:func:`demangled`). Not in the worker that read
    it: the sandbox lets no worker start a process, and c++filt is one."""
    names = demangled([*state.objects, *(n for n, _ in state.changed)])
    return replace(state, objects=tuple(names[n] for n in state.objects),
                   changed=tuple((names[n], d) for n, d in state.changed))


def demangled(names: list[str]) -> dict[str, str]:
    """Each C++ symbol as its source spells it (``rl_q_distill_lambda_controller::calls`` for a function-local
    static), where c++filt is installed; else as the symbol table has it."""
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    done = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
    shown = done.stdout.splitlines() if done.returncode == 0 else []
    return dict(zip(names, shown, strict=True)) if len(shown) == len(names) else {n: n for n in names}
