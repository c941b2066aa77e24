"""The system calls a confined worker may make: an allow-list, everything else refused and named.

Measured, not guessed: ``strace -f`` of the gate on the fixed kernel, a crashing candidate and a coverage build, of
``replay``/``toy``/``report --kernel`` and ``study --deep --reduced --kernel`` on the host (from the moment each
process loaded its seccomp filter to its end). A call is here because one of those runs made it, or because a
process needs it to exist, wait and manage its own memory (:data:`PROCESS`); the record says which. The GPU
workers' calls were measured the same way on an H100 with ``RLQ_SANDBOX_AUDIT`` (:mod:`repro.runners.confine`:
each call outside the list logged with its arguments instead of refused) and the ioctl entries taken out: the
gate on the fixed kernel and on a candidate that crashes made ``stat`` and ioctls of the NVIDIA driver's type 'F'
(numbers 39, 41, 42, 43) and nvidia-uvm's plain numbers 33, 34 and 73, nothing else.

Where a call's arguments decide whether it stays inside the worker, it is allowed only with those arguments
(:data:`ALLOWED_IF`): a thread but no process, a signal to itself only, an ioctl of the kinds measured, the fcntl
commands measured. Opening for writing and making a folder are allowed by the filter only where the parent's
reading of the path finds the scratch folder (:data:`BY_PATH`); Landlock, required with the filter, is what keeps
every write inside it, so that reading names an attempt but never decides one.
"""

from __future__ import annotations

import os

#: Calls made in the measured runs, allowed outright: each acts on the calling process alone (its memory, its own
#: descriptors, its threads' futexes) or reads (Landlock bounds what may be opened; ``openat`` for reading is in
#: :data:`ALLOWED_IF`).
MEASURED = (
    "read", "write", "pread64", "lseek", "close", "fstat", "newfstatat", "getdents64", "getcwd",
    "brk", "mmap", "mprotect", "munmap", "madvise", "mbind",
    "futex", "set_robust_list", "rseq", "rt_sigprocmask",
    "getpid", "getppid", "gettid", "getrandom", "sched_getaffinity",
    "sendmsg", "getsockname",  # on the pipe to the parent (a socket pair) only: no socket can be made
    "exit", "exit_group",
    "stat",  # the CUDA driver's own (a GPU worker, measured on an H100): metadata only, as newfstatat gives
    # the confined host-backend study on an H100 machine (its torch starts CUDA inside the sandbox): a counter
    # descriptor and a pipe of the process's own (pipe2 with O_CLOEXEC, twice), which reach nothing outside it
    "eventfd2", "pipe2",
)
#: Calls a process needs to exist and wait that no measured run happened to make, allowed with the reason: a
#: signal's return and a restarted call (the kernel's own), time and sleep (a candidate that sleeps must meet its
#: time limit, not be named), yielding, reading its own resource use.
PROCESS = (
    "rt_sigreturn", "restart_syscall", "rt_sigaction", "sigaltstack",
    "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep", "clock_nanosleep", "sched_yield",
    "getrusage", "times", "poll", "ppoll", "select", "pselect6",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "epoll_ctl", "mremap", "getcpu", "sched_getparam",
    "sched_getscheduler",  # waiting and memory inside the process, as a driver's threads do
    "getuid", "geteuid", "getgid", "getegid",
)
#: Calls allowed with conditions on their arguments: ``(argument index, mask, value)`` tuples, every one of which
#: must hold (``args[i] & mask == value``); several lists for one call are alternatives. ``None`` in place of a
#: value: the worker's own process id, filled in when the filter is built.
_CLONE_THREAD = 0x00010000
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_LOW32 = 0xFFFFFFFF
#: fcntl commands measured (F_DUPFD_CLOEXEC, F_GETFL, F_SETLKW) and their plain siblings: duplicate, read and set
#: the close-on-exec flag and the status flags, take record locks. Not F_SETOWN/F_SETSIG (a signal to another
#: process when its descriptor is ready), not leases, not directory notifications.
FCNTL_COMMANDS = {0: "F_DUPFD", 1: "F_GETFD", 2: "F_SETFD", 3: "F_GETFL", 4: "F_SETFL", 5: "F_GETLK", 6: "F_SETLK",
                  7: "F_SETLKW", 1030: "F_DUPFD_CLOEXEC", 36: "F_OFD_GETLK", 37: "F_OFD_SETLK", 38: "F_OFD_SETLKW"}
#: arch_prctl operations (arch/x86/include/uapi/asm/prctl.h) a GPU machine's PyTorch makes in a confined child (the
#: host-backend study of study --deep --kernel on an H100's Intel host; refused, it ended the run): oneDNN asks the
#: kernel which extended CPU state it supports and for the AMX tile data (XTILEDATA) permission — each for the
#: calling process alone. Which of the three was made is not known: the refusal named the call only (it names the
#: operation now).
ARCH_PRCTL_OPERATIONS = {0x1021: "ARCH_GET_XCOMP_SUPP", 0x1022: "ARCH_GET_XCOMP_PERM", 0x1023: "ARCH_REQ_XCOMP_PERM"}
#: prctl options a thread may use on itself: its name (the CUDA driver and PyTorch name their threads). The
#: confined host-backend study on an H100 machine made prctl (refused; the refusal named the call only, it names
#: the option now): these are the options a thread's start makes, not yet confirmed by an audit there.
PRCTL_OPTIONS = {15: "PR_SET_NAME", 16: "PR_GET_NAME"}
#: Calls allowed for the listed values of one argument: call -> (argument index, what the value is called, the
#: allowed values and their names, how a refused value is written). A refusal names the value and the list.
BY_VALUE: dict[str, tuple[int, str, dict[int, str], str]] = {
    "fcntl": (1, "command", FCNTL_COMMANDS, "d"),
    "arch_prctl": (0, "operation", ARCH_PRCTL_OPERATIONS, "#x"),
    "prctl": (0, "option", PRCTL_OPTIONS, "#x"),
}
#: ioctl requests measured by number (the low 32 bits: the kernel reads no more): TCGETS (Python asks whether a
#: descriptor is a terminal).
IOCTL_REQUESTS = {0x5401: "TCGETS"}
#: ioctl types (the request's bits 8-15) allowed whole for a GPU worker: the NVIDIA driver's frontend (type 'F',
#: nv-ioctl-numbers.h), on the descriptors CUDA opened before the sandbox (Landlock refuses ioctls on a device
#: opened after it, ABI 5+). Measured on an H100 (above): numbers 39, 41, 42, 43 of this type.
IOCTL_TYPES: dict[int, str] = {0x46: "the NVIDIA driver's (type 'F')"}
#: The NVIDIA unified-memory driver's requests (nvidia-uvm: uvm_linux_ioctl.h's UVM_INITIALIZE/UVM_DEINITIALIZE,
#: uvm_ioctl.h's plain numbers below 256, which carry no type, size or direction bits).
IOCTL_UVM = ((0x30000001, 0xFFFFFFFF), (0x30000002, 0xFFFFFFFF), (0, 0xFFFFFF00))

ALLOWED_IF: dict[str, list[list[tuple[int, int, int | None]]]] = {
    "clone": [[(0, _CLONE_THREAD, _CLONE_THREAD)]],  # a thread (CUDA's, PyTorch's), never a process
    "openat": [[(2, _WRITE_FLAGS, 0)]],  # for reading; for writing: BY_PATH
    "kill": [[(0, _LOW32, None)]], "tgkill": [[(0, _LOW32, None)]],  # itself (abort() raises SIGABRT with tgkill)
    "prlimit64": [[(0, _LOW32, 0)], [(0, _LOW32, None)]],  # its own limits (glibc's getrlimit: pid 0)
    **{call: [[(index, _LOW32, value)] for value in values] for call, (index, _, values, _) in BY_VALUE.items()},
    "ioctl": [[(1, _LOW32, request)] for request in IOCTL_REQUESTS]
             + [[(1, 0xFF00, kind << 8)] for kind in IOCTL_TYPES]
             + [[(1, mask, request)] for request, mask in IOCTL_UVM],
}
#: Calls refused with an error, not named: glibc tries ``clone3`` for a new thread and, on ENOSYS, uses ``clone``
#: (whose flags seccomp can read; clone3's are behind a pointer).
QUIET = {"clone3": "ENOSYS"}
#: Calls that write by path, handed to the parent (seccomp user notification) with the (dirfd, path) argument
#: pairs to read: inside the scratch folder they go on to Landlock, which decides; outside they are named.
BY_PATH = {"openat": [(0, 1)], "mkdir": [(None, 0)], "mkdirat": [(0, 1)]}


def allowed() -> tuple[str, ...]:
    """Every call allowed outright."""
    return MEASURED + PROCESS
