"""A worker that runs candidate code makes only the system calls it was measured to need, and writes only inside
its own scratch folder.

Two kernel mechanisms, both installed by the worker on itself before any candidate code runs (before the kernel's
library is loaded: its load-time code is the candidate's too), and kept for the rest of its life:

- **seccomp** through libseccomp (the ``pyseccomp`` binding of the system's ``libseccomp.so.2``), deny by default:
  the calls of :mod:`repro.runners.syscall_policy` are allowed (some with conditions on their arguments); any other
  is handed to the parent as a *user notification* (seccomp_unotify(2)), whose :class:`SyscallWatch` refuses it, names it
  and ends the worker. The parent reads one thing from a notification: the path of an open for writing or a new
  folder, to name one outside the scratch folder; inside it the call goes on to Landlock, which decides.
- **Landlock** (kernel 5.13+, required): the scratch folder is the only place the worker may create, write,
  remove or rename files (by path, in the kernel: no race with the parent's reading); it may execute no file, and
  where the kernel has them (ABI 4-6) connect or bind no TCP port, use no device opened after the sandbox, and
  signal no process outside itself.

Where either cannot be installed, :func:`unavailable` says why in one line and the worker runs unconfined
(``--require-sandbox`` makes that exit 2).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import select
import signal
import struct
import sys
import threading
from collections.abc import Callable
from functools import cache
from pathlib import Path

from repro.backends.base import READ_ONLY_CACHE
from repro.runners import syscall_policy as policy

#: Landlock's file-system rights (linux/landlock.h) by the ABI that introduced them.
_LL_EXECUTE = 1 << 0
_LL_WRITES = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write file, remove, make *
_LL_MAKE_SPECIAL = sum(1 << b for b in (6, 9, 10, 11, 12))  # char and block devices, sockets, FIFOs, symlinks
_LL_REFER, _LL_TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
# ABI 5: an ioctl on a device opened after the sandbox (a loop device bound to a file outside, /dev/loop-control, a
# console or terminal made its own after setsid). CUDA's descriptors, opened before, keep it.
_LL_IOCTL_DEV = 1 << 15
_LL_NET_TCP = 1 | 2  # bind, connect (ABI 4)
_LL_SCOPE = 1 | 2  # abstract unix sockets, signals (ABI 6)
_SYS_LANDLOCK = (444, 445, 446)  # create_ruleset, add_rule, restrict_self (one number on every architecture)
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
_CAP_VERSION_3 = 0x20080522
_AT_FDCWD = -100

#: seccomp_unotify(2): struct seccomp_notif, struct seccomp_notif_resp and the ioctls that carry them.
_NOTIF = struct.Struct("=QIIiIQ6Q")
_RESP = struct.Struct("=QqiI")
_NOTIF_RECV, _NOTIF_SEND, _NOTIF_ID_VALID = 0xC0502100, 0xC0182101, 0x40082102
_FLAG_CONTINUE = 1
#: The least Landlock ABI the sandbox needs: 1 confines writes to the scratch folder.
LANDLOCK_MIN_ABI = 1
#: Set to a file's path, the filter logs each call outside :mod:`repro.runners.syscall_policy` there (a JSON line)
#: and lets it go on instead of refusing it: how the allow-list is measured on a new machine, never a verdict.
AUDIT_VAR = "RLQ_SANDBOX_AUDIT"
#: What an attempt is called in the row, by the call's name (any other: "make the system call NAME").
_WORDS = {
    **dict.fromkeys(("execve", "execveat"), "start a program ({call})"),
    **dict.fromkeys(("fork", "vfork", "clone"), "start a process ({call})"),
    **dict.fromkeys(("socket", "socketpair"), "open a socket ({call})"),
    **dict.fromkeys(("kill", "tkill", "tgkill", "pidfd_send_signal", "rt_sigqueueinfo", "rt_tgsigqueueinfo"),
                    "signal another process ({call})"),
    "prlimit64": "change another process's resource limits ({call})",
    "setpriority": "change a process's priority ({call})",
    **dict.fromkeys(("shmget", "semget", "msgget", "mq_open", "add_key", "request_key", "keyctl"),
                    "make a kernel object that outlives the run ({call})"),
    "setsid": "start a session of its own, which may take a terminal ({call})",
    **dict.fromkeys(("open", "creat", "openat"), "open {path} for writing"),
    **dict.fromkeys(("mkdir", "mkdirat"), "make the folder {path}"),
}


@cache
def _seccomp():
    import pyseccomp

    pyseccomp.get_api()  # raises where libseccomp.so.2 cannot be loaded
    return pyseccomp


def unavailable() -> str | None:
    """None when a worker can be confined here, else the one-line reason."""
    if not sys.platform.startswith("linux"):
        return f"sandbox: seccomp is Linux only (this is {sys.platform})"
    try:
        sc = _seccomp()
    except ImportError:
        return "sandbox: the pyseccomp package is missing (pip install --group run)"
    except (OSError, AttributeError) as err:
        return f"sandbox: libseccomp.so.2 cannot be loaded ({err})"
    if not hasattr(sc._libseccomp, "seccomp_notify_fd"):
        return "sandbox: libseccomp is older than 2.5 (no user notifications)"
    if landlock_abi() < LANDLOCK_MIN_ABI:
        return "sandbox: this kernel offers no Landlock (5.13+ with Landlock enabled), which keeps writes in the scratch folder"
    return _probe()


@cache
def _probe() -> str | None:
    """Install the filter in a throw-away child (a forked one: nothing is imported there)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            f = _filter()
            f.load()
            code = 0 if _seccomp()._libseccomp.seccomp_notify_fd(f._filter) >= 0 else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return "sandbox: seccomp user notifications are not permitted here (kernel 5.5+ and a container that allows seccomp)"
    return None


def landlock_abi() -> int:
    """The Landlock ABI the kernel offers, 0 where it has none (older than 5.13, or not enabled)."""
    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(_SYS_LANDLOCK[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, abi)


def mechanism() -> str:
    """What confines a worker here, in words (or why nothing does)."""
    why = unavailable()
    if why:
        return why
    version = ".".join(map(str, _seccomp_version()))
    return f"sandbox: seccomp allow-list (libseccomp {version}) + Landlock ABI {landlock_abi()}"


def _seccomp_version() -> tuple[int, int, int]:
    sc = _seccomp()

    class _Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]

    fn = sc._libseccomp.seccomp_version
    fn.restype = ctypes.POINTER(_Version)
    v = fn().contents
    return v.major, v.minor, v.micro


def _filter():
    """The seccomp filter (not yet loaded): the calls of :mod:`repro.runners.syscall_policy` allowed, any other
    handed to the parent, which names it and ends the worker (:class:`SyscallWatch`)."""
    sc = _seccomp()
    f = sc.SyscallFilter(sc.NOTIFY)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)  # every thread of the worker, CUDA's included
    me = os.getpid()

    def rule(action, call, *args) -> None:
        with contextlib.suppress(ValueError, OSError, RuntimeError):  # a call this architecture lacks
            f.add_rule(action, call, *args)

    for call in policy.allowed():
        rule(sc.ALLOW, call)
    for call, alternatives in policy.ALLOWED_IF.items():
        for conditions in alternatives:
            rule(sc.ALLOW, call, *(sc.Arg(i, sc.MASKED_EQ, mask, me if value is None else value)
                                   for i, mask, value in conditions))
    for call, name in policy.QUIET.items():
        rule(sc.ERRNO(getattr(errno, name)), call)
    return f


def _landlock(scratch: Path) -> int:
    """Restrict this process (all its threads made from now on and itself) with Landlock: the ABI used, 0 if none."""
    abi = landlock_abi()
    if abi == 0:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    fs = (_LL_EXECUTE | _LL_WRITES | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
          | (_LL_IOCTL_DEV if abi >= 5 else 0))
    net = _LL_NET_TCP if abi >= 4 else 0
    scoped = _LL_SCOPE if abi >= 6 else 0
    attr = struct.pack("=QQQ", fs, net, scoped)[: 24 if abi >= 6 else 16 if abi >= 4 else 8]
    ruleset = libc.syscall(_SYS_LANDLOCK[0], ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0
    try:
        folder = os.open(scratch, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            # in the scratch folder: files and folders only (a block device made there, as root, wrote to a disk)
            beneath = struct.pack("=Qi", fs & ~_LL_EXECUTE & ~_LL_MAKE_SPECIAL, folder)
            if libc.syscall(_SYS_LANDLOCK[1], ruleset, 1, ctypes.c_char_p(beneath), ctypes.c_uint32(0)) != 0:
                return 0
        finally:
            os.close(folder)
        if libc.syscall(_SYS_LANDLOCK[2], ruleset, ctypes.c_uint32(0)) != 0:
            return 0
        return abi
    finally:
        os.close(ruleset)


def keep_caches_in(scratch: Path) -> None:
    """Point the caches CUDA and CuPy write on their own at ``scratch``, before CUDA starts in this process (the
    driver reads its variables once, at cuInit): a PTX the driver compiles for this GPU is cached under
    ~/.nv/ComputeCache otherwise, a write outside the folder that the sandbox would end the worker for."""
    os.environ["CUPY_CACHE_DIR"] = str(scratch)  # a kernel CuPy compiles later caches here
    os.environ["CUDA_CACHE_PATH"] = str(scratch)
    os.environ["CUDA_CACHE_DISABLE"] = "1"  # a worker's scratch is its own: nothing to reuse
    os.environ[READ_ONLY_CACHE] = "1"  # the suite's own build cache (NVRTC's CUBINs and PTX) is read, not written


def _first_to_go() -> None:
    """Make this process the out-of-memory killer's first choice (``oom_score_adj`` 1000, which any process may
    raise): memory a candidate holds in a memfd counts in no process's RSS, and the killer would otherwise pick the
    gate or a job beside it."""
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("1000")


def _drop_capabilities(libc) -> None:
    """Give up every capability, root's included (a CI job's worker runs as root: it could make a block device and
    write a disk through it, or mark any file immutable). Nothing to give up for another user."""
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == errno.EINVAL:
            break  # past the kernel's last capability (EPERM: no CAP_SETPCAP, nothing to drop)
    nr = _SYS_CAPSET.get(os.uname().machine)
    if nr is not None:  # effective, permitted and inheritable sets emptied
        header = ctypes.create_string_buffer(struct.pack("=Ii", _CAP_VERSION_3, 0), 8)
        libc.syscall(nr, header, ctypes.create_string_buffer(24))


def confine(conn, scratch: Path, forked: bool, command: bool = False, keep: tuple[int, ...] = ()) -> None:
    """Worker side: confine this process to ``scratch`` (its new working folder) and hand the parent the
    seccomp listener over ``conn`` (a ``("confined", abi)`` message, then the descriptor). ``forked``: the
    worker holds copies of the parent's descriptors (closed here); a GPU one keeps what it holds (CUDA's, and
    from a forkserver multiprocessing's pipes to the server and the command, which reach no file).
    ``command`` (:func:`run_confined`): the working folder stays (relative inputs still resolve; a relative
    write lands outside ``scratch`` and is an attempt), and stdin, stdout and stderr stay the command's, as do
    the descriptors in ``keep``."""
    from multiprocessing import reduction

    from repro.runners import plain

    _seccomp()  # imported before Landlock: finding libseccomp.so.2 runs ldconfig, which is a program
    sys.dont_write_bytecode = True  # a module imported from now on leaves no .pyc beside its source
    keep_caches_in(scratch)
    if command:
        _close_inherited(conn, keep)
    else:
        os.chdir(scratch)
        _own_descriptors(conn, scratch, forked)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _first_to_go()
    _drop_capabilities(libc)
    abi = _landlock(scratch)
    f = _filter()
    f.load()
    fd = _seccomp()._libseccomp.seccomp_notify_fd(f._filter)
    conn.send_bytes(plain.dumps(("confined", abi)))  # plain data: the parent unpickles nothing of ours
    reduction.send_handle(conn, fd, os.getppid())
    os.close(fd)


def confine_alone(scratch: Path) -> int:
    """Confine this process with no parent to answer (a child of compute-sanitizer): no new privileges, no
    capabilities, Landlock as in :func:`confine` (writes beneath ``scratch`` only, no program started, no TCP, no
    device opened after it, no signal out); no system-call filter. compute-sanitizer's own library runs in this
    process and makes calls of its own that the allow-list refused on an H100 (each CUDA call then failed), never
    measured; the candidate's code here is device code from NVRTC, which makes no system call. The Landlock ABI
    used (0: none, and writes by path are then not limited); nothing when the sandbox is unavailable here
    (:func:`unavailable` says why)."""
    if unavailable() is not None:
        return 0
    sys.dont_write_bytecode = True
    keep_caches_in(scratch)
    os.chdir(scratch)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    _first_to_go()
    _drop_capabilities(libc)
    return _landlock(scratch)


def _own_descriptors(conn, scratch: Path, forked: bool) -> None:
    """Send the worker's output to the scratch folder and, in a forked worker, close what it inherited beyond its
    pipe (the parent's files, a test runner's pipes: open for writing before the sandbox, they would stay so)."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(scratch / "output.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for fd in (1, 2):
        with contextlib.suppress(OSError):
            os.dup2(log, fd)
    os.close(log)
    if forked:
        _close_inherited(conn)


def _close_inherited(conn, keep: tuple[int, ...] = ()) -> None:
    """Close every descriptor above stderr but ``conn``'s and ``keep`` (a file open for writing before the sandbox
    would stay so)."""
    for fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
        if fd > 2 and fd != conn.fileno() and fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


class SyscallWatch:
    """Parent side: answers a confined worker's notifications in a thread of its own.

    A write inside ``scratch`` goes through; anything else is refused (EPERM), named in :attr:`attempt`, and
    the worker is killed (``pid``): its run ends there, as a crash would end it."""

    def __init__(self, fd: int, pid: int, scratch: Path):
        self.fd, self.pid, self.scratch = fd, pid, os.path.realpath(scratch)
        self.attempt: str | None = None
        self.audit = os.environ.get(AUDIT_VAR) or None
        self.thread = threading.Thread(target=self._serve, daemon=True, name=f"sandbox-{pid}")
        self.thread.start()

    def _serve(self) -> None:
        sc = _seccomp()
        arch = sc.system_arch()
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        try:
            while True:
                events = poller.poll(None)
                if any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in events):
                    return  # the worker is gone
                buf = bytearray(_NOTIF.size)
                try:
                    fcntl.ioctl(self.fd, _NOTIF_RECV, buf)
                except OSError as err:
                    if err.errno in (errno.ENOENT, errno.EINTR):  # the call was interrupted meanwhile
                        continue
                    return
                nid, tid, _flags, nr, _arch, _ip, *args = _NOTIF.unpack(buf)
                call = _name(sc, arch, nr)
                attempt = self._judge(call, tid, nid, args)
                if attempt is None:
                    self._respond(nid, 0, _FLAG_CONTINUE)
                    continue
                if isinstance(attempt, int):  # it would change nothing: the error it would get
                    self._respond(nid, -attempt, 0)
                    continue
                self.attempt = self.attempt or attempt
                self._respond(nid, -errno.EPERM, 0)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
        finally:
            os.close(self.fd)

    def _respond(self, nid: int, error: int, flags: int) -> None:
        with contextlib.suppress(OSError):  # the worker died meanwhile
            fcntl.ioctl(self.fd, _NOTIF_SEND, bytearray(_RESP.pack(nid, 0, error, flags)))

    def _judge(self, call: str, tid: int, nid: int, args: list[int]) -> str | int | None:
        """None when the call may go on (a write by path inside the scratch folder, which Landlock then decides;
        any call while auditing), an errno for one refused quietly, else the attempt in words."""
        if call not in policy.BY_PATH:
            return None if self._audited(call, args) else "the candidate tried to " + _said(call, args)
        paths = [self._path(tid, None if d is None else _signed(args[d]), args[p]) for d, p in policy.BY_PATH[call]]
        valid = struct.pack("=Q", nid)
        try:  # the paths were read from a call still waiting (seccomp_unotify(2): check after reading)
            fcntl.ioctl(self.fd, _NOTIF_ID_VALID, bytearray(valid))
        except OSError:
            return None  # it is gone: nothing to decide
        outside = [p for p in paths if p is None or not (p == self.scratch or p.startswith(self.scratch + os.sep))]
        if not outside:
            return None
        if call == "openat" and self._own_thread_name(outside[0]):
            return errno.EACCES  # naming one's own thread (PyTorch's pools do): harmless, refused as Landlock would
        if call in ("mkdir", "mkdirat") and outside[0] is not None and os.path.lexists(outside[0]):
            return errno.EEXIST  # the host backend's cache lookup makes its folder
        if self._audited(call, args):
            return None
        return "the candidate tried to " + _said(call, args, outside[0] or "a path it hid")

    def _audited(self, call: str, args: list[int]) -> bool:
        """With :data:`AUDIT_VAR` set: the call appended to that file as a JSON line, and True (it goes on)."""
        if not self.audit:
            return False
        with contextlib.suppress(OSError), open(self.audit, "a", encoding="utf-8") as log:
            log.write(json.dumps({"call": call, "args": [a & 0xFFFFFFFF for a in args[:3]]}) + "\n")
        return True

    def _own_thread_name(self, path: str | None) -> bool:
        """Whether ``path`` is the name file of one of the worker's own threads (``pthread_setname_np`` writes it
        for a thread other than the caller's): /proc/self/task/TID/comm, /proc/thread-self/comm, or the same under
        the worker's pid. procfs lists only a process's own threads beneath its task folder."""
        return path is not None and re.fullmatch(rf"/proc/(?:self|thread-self|{self.pid})(?:/task/\d+)?/comm", path) is not None

    @staticmethod
    def _path(tid: int, dirfd: int | None, address: int) -> str | None:
        """The absolute path a call names (``dirfd``: its directory descriptor, None or AT_FDCWD: the working folder)."""
        try:
            with open(f"/proc/{tid}/mem", "rb", buffering=0) as mem:
                raw = os.pread(mem.fileno(), 4096, address)
            name = raw.split(b"\0", 1)[0].decode(errors="replace")
            if not name.startswith("/"):
                base = f"/proc/{tid}/cwd" if dirfd in (None, _AT_FDCWD) else f"/proc/{tid}/fd/{dirfd}"
                name = os.path.join(os.readlink(base), name)
            return os.path.normpath(name)
        except OSError:
            return None


def _said(call: str, args: list[int], path: str = "") -> str:
    """A refused call in words: what it would have done, with the argument that decided."""
    if call == "ioctl":
        return f"make an ioctl the sandbox does not allow (request {args[1] & 0xFFFFFFFF:#x})"
    if call in policy.BY_VALUE:
        index, noun, values, written = policy.BY_VALUE[call]
        return f"use {call} {noun} {args[index] & 0xFFFFFFFF:{written}} (not among {', '.join(values.values())})"
    return _WORDS.get(call, "make the system call {call}").format(call=call.removeprefix("system call "), path=path)


def _name(sc, arch, nr: int) -> str:
    try:
        return sc.resolve_syscall(arch, nr).decode()
    except (ValueError, OSError, RuntimeError):
        return f"system call {nr}"


def _signed(value: int) -> int:
    """A 64-bit argument read as the C int it carries (AT_FDCWD is negative)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


class Escaped(Exception):
    """A confined command's candidate attempted what its sandbox forbids (:func:`run_confined`): the attempt."""


def run_confined(body: Callable[[], int], scratch: Path, serve: Callable[[bytes], bytes] | None = None) -> int:
    """Run ``body()`` (→ an exit code) in a forked child confined to ``scratch`` for the rest of its life, and
    return its exit code; raise :class:`Escaped` naming the attempt when the sandbox ended it.

    For a command that loads a candidate in its own process (``report``/``replay``/``toy --kernel``, a study's
    learning loops). The child keeps the command's working folder and its stdin, stdout and stderr (what it
    prints is the command's output), writes only inside ``scratch`` (Landlock, and the parent's :class:`SyscallWatch`
    on every write by path), starts no process (its threads are fine), opens no socket. Nothing flows back but
    its exit status and the files it left in ``scratch``: the parent unpickles nothing the candidate could have
    written. A host library the child needs and the cache lacks is built by the parent: ``serve`` answers the
    child's requests (bytes → bytes, see :func:`repro.backends.host.build_remotely`), since a compiler is a
    program the child may not start.

    How a command adopts it (``analysis.cli.confined.run`` wraps this with the policy's one-line errors and the
    move of the outputs): read and check every input and output path first, start the backend, and run here
    whatever starts a process (the gate's workers, ``git``, a compiler other than the host backend's); then, in
    one line, ``return confined.run("NAME", backend, work, {"--json": args.json, "--plot": args.plot},
    require=args.require_sandbox)``, where ``work(out)`` does the rest and writes each output to ``out[flag]``
    (a path in the scratch folder; None where not asked for) and returns the exit code; the outputs are moved to
    their places only when it returns 0, and an attempt is ``NAME: error: the candidate tried to …``, exit 2.
    Where :func:`unavailable` says no sandbox can be installed, or the backend is a device's, ``work`` runs in
    the command's own process (the former hello in one line; ``--require-sandbox``: exit 2 instead).

    Set in the child before confinement: ``MPLCONFIGDIR``, ``TMPDIR`` and CuPy's cache in ``scratch`` (matplotlib
    writes its font cache on first use), no ``.pyc`` written. A GPU command must not have started CUDA before
    the fork (CUDA does not survive one); its device code makes no system calls.
    """
    from multiprocessing import Pipe, reduction

    from repro.runners import plain

    scratch = Path(scratch)
    parents, childs = Pipe()
    # What the child prints through sys.stdout and sys.stderr reaches the parent's (a caller's redirection, a
    # test's capture included) through a pipe each, relayed as it comes (progress lines stay live).
    streams = [(*os.pipe(), name) for name in ("stdout", "stderr")]
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child (its exit status is what the parent reads)
        code = 2
        try:
            parents.close()
            for read, write, name in streams:
                os.close(read)
                setattr(sys, name, open(write, "w", encoding="utf-8", errors="replace", buffering=1))  # noqa: SIM115
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PDEATHSIG: dies with the parent
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to answer (it ends this child)
            for var in ("MPLCONFIGDIR", "TMPDIR"):
                os.environ[var] = str(scratch)
            import tempfile

            tempfile.tempdir = str(scratch)
            confine(childs, scratch, forked=True, command=True, keep=tuple(w for _, w, _ in streams))
            if serve is not None:  # the host backend asks the parent for a library the cache lacks
                from repro.backends import host

                host.PARENT = childs
            code = body()
        except BaseException:  # noqa: BLE001 - body() is the caller's policy; anything past it is exit 2
            code = 2
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else 2)
    childs.close()
    relays = []
    for read, write, name in streams:
        os.close(write)
        relays.append(threading.Thread(target=_relay, args=(read, getattr(sys, name)), daemon=True))
        relays[-1].start()
    watch = None
    try:
        while True:
            try:
                if watch is None:
                    hello = plain.loads(parents.recv_bytes(plain.REPLY_MAX))  # plain data (read, never unpickled)
                    if not (isinstance(hello, tuple) and hello[:1] == ("confined",)):
                        break
                    watch = SyscallWatch(reduction.recv_handle(parents), pid, scratch)
                    continue
                request = parents.recv_bytes()  # from now on bytes only: the candidate may have written them
            except (EOFError, OSError, plain.Forged):
                break
            parents.send_bytes(serve(request) if serve is not None else b"")
    except BaseException:  # Ctrl-C, or an error here: the child ends with the command
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        raise
    finally:
        parents.close()
        _, status = os.waitpid(pid, 0)
        for relay in relays:
            relay.join(5.0)
    if watch is not None:
        watch.thread.join(1.0)
        if watch.attempt is not None:
            raise Escaped(watch.attempt)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 2



def _relay(fd: int, stream) -> None:
    """Copy what arrives on ``fd`` to the text ``stream`` until the writer is gone."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while chunk := os.read(fd, 65536):
            stream.write(decoder.decode(chunk))
            stream.flush()
    except (OSError, ValueError, AttributeError):  # the stream is closed or gone: the rest is dropped
        pass
    finally:
        os.close(fd)
