"""Start a program (linux.uml) under a seccomp filter that makes ptrace(PTRACE_GETREGSET, .., NT_X86_XSTATE, ..)
fail with EIO:  python -m vnetbench.guests.nofpx PROGRAM ARGS...

Why: UML 6.1 probes for XSAVE register access with a fixed-size buffer. On a host whose CPU has AMX (an XSAVE area of
~11 KB) the kernel refuses PTRACE_SETREGSET of any other size with EFAULT, and every guest dies at init ("ptrace set
fp regs failed, errno = 14"). When the probe fails, UML falls back to the 512-byte FXSAVE area (PTRACE_GETFPREGS),
which works. That area holds x87/SSE state only, so programs in the guest must not use AVX: the guest's environment
turns it off for glibc and OpenSSL (see uml.NO_AVX_ENV).
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
RET_ALLOW, RET_ERRNO, EIO = 0x7FFF0000, 0x00050000, 5
AUDIT_ARCH_X86_64, NR_PTRACE = 0xC000003E, 101
PTRACE_GETREGSET, NT_X86_XSTATE = 0x4204, 0x202
# struct seccomp_data: nr @0, arch @4, instruction pointer @8, args[6] @16 (8 bytes each, low word first)
OFF_NR, OFF_ARCH, OFF_ARG0, OFF_ARG2 = 0, 4, 16, 32


def _ins(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program() -> bytes:
    return b"".join([
        _ins(LD_W_ABS, 0, 0, OFF_ARCH), _ins(JEQ_K, 0, 7, AUDIT_ARCH_X86_64),
        _ins(LD_W_ABS, 0, 0, OFF_NR), _ins(JEQ_K, 0, 5, NR_PTRACE),
        _ins(LD_W_ABS, 0, 0, OFF_ARG0), _ins(JEQ_K, 0, 3, PTRACE_GETREGSET),
        _ins(LD_W_ABS, 0, 0, OFF_ARG2), _ins(JEQ_K, 0, 1, NT_X86_XSTATE),
        _ins(RET_K, 0, 0, RET_ERRNO | EIO),
        _ins(RET_K, 0, 0, RET_ALLOW)])


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install() -> None:
    code = program()
    buf = ctypes.create_string_buffer(code, len(code))
    prog = _Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: python -m vnetbench.guests.nofpx PROGRAM ARGS...")
    if platform.machine() == "x86_64":
        install()
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
