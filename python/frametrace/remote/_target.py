"""What attach reads of a target in /proc and in its interpreter's files:
its user's, maybe hostile, so checked before use; nothing of the
target's is run."""
from __future__ import annotations

import os
import re
import shutil
import stat
import struct
import sys
from typing import Optional


def read_text(path: str, default: Optional[str] = None) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        if default is None:
            raise
        return default


def interpreter_for(minor: int) -> Optional[str]:
    if sys.version_info[:2] == (3, minor):
        return sys.executable
    return shutil.which(f"python3.{minor}")


# Bounds on what is read of a target's files (its own, maybe hostile).
_MAPS_LIMIT = 1 << 26  # /proc/PID/maps: 65,530 mappings (the default limit) take ~10 MB
_ELF_LIMIT = 1 << 24  # one ELF table (section headers, .dynsym, .dynstr)


def cpython_version(pid: int) -> tuple[Optional[tuple[int, int, int]], bool]:
    """The CPython version process pid runs, read from the ELF file of its
    interpreter (the libpython3.X it maps, else its program), which is
    opened and read, never run; and whether that is a libpython (an
    application may embed it).  The micro version is -1 where only the
    file's name tells the version; None where nothing does (not CPython)."""
    embedded = False
    minor = None
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            maps = f.read(_MAPS_LIMIT)
    except OSError:
        maps = b""
    found = re.search(rb"^([0-9a-f]+-[0-9a-f]+) \S+ \S+ ([0-9a-f]+):([0-9a-f]+) (\d+) +"
                      rb"(/\S*/libpython3\.(\d+)[a-z]*\.so[^\n]*)$", maps, re.MULTILINE)
    version = None
    try:
        if found:
            embedded = True
            minor = int(found.group(6))
            device = os.makedev(int(found.group(2), 16), int(found.group(3), 16))
            fd = _open_mapped(pid, os.fsdecode(found.group(1)), os.fsdecode(found.group(5)),
                              (device, int(found.group(4))))
        else:
            name = os.path.basename(readlink(f"/proc/{pid}/exe"))
            named = re.fullmatch(r"python3\.(\d+)[a-z]*(?: \(deleted\))?", name)
            minor = int(named.group(1)) if named else None
            # A magic link: the very file the process runs, no lookup by name.
            fd = open_regular(f"/proc/{pid}/exe")
    except OSError:
        fd = -1
    if fd >= 0:
        try:
            version = None if on_fuse(fd) else elf_version(fd)
        except (OSError, ValueError, struct.error):
            version = None
        finally:
            os.close(fd)
    if version is None and minor is not None:
        version = (3, minor, -1)
    return version, embedded


MOUNTINFO = "/proc/self/mountinfo"


def on_fuse(fd: int) -> bool:
    """Whether the file open as fd is on a FUSE filesystem: its server, which
    any user may run, can keep a read blocked for good (not even Ctrl-C
    ends it)."""
    device = os.fstat(fd).st_dev
    wanted = f"{os.major(device)}:{os.minor(device)}".encode()
    try:
        with open(MOUNTINFO, "rb") as f:
            mounts = f.read(_MAPS_LIMIT)
    except OSError:
        return False
    for line in mounts.splitlines():
        # "ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [TAGS...] - FSTYPE SOURCE ..."
        head, sep, tail = line.partition(b" - ")
        fields = head.split()
        if sep and len(fields) > 2 and fields[2] == wanted and tail.startswith(b"fuse"):
            return True
    return False


def environment(pid: int) -> dict:
    """The environment process pid started with (empty if unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            entries = f.read(1 << 24).split(b"\0")
    except OSError:
        return {}
    return dict(entry.split(b"=", 1) for entry in entries if b"=" in entry[1:])


def ptrace_scope() -> str:
    """kernel.yama.ptrace_scope ("0" without Yama)."""
    return read_text("/proc/sys/kernel/yama/ptrace_scope", default="0").strip()


def readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _open_mapped(pid: int, span: str, path: str, identity: tuple[int, int]) -> int:
    """A file descriptor for reading the file process pid maps at span
    ("start-end" in its maps), whose maps line names path and (device,
    inode) identity.  The path is the target's user's to change (replace
    it with a symlink to a device, a FIFO, a FUSE file whose open never
    returns), so it is never opened by name: /proc/PID/map_files/SPAN is
    the mapped file itself (it needs CAP_SYS_ADMIN or
    CAP_CHECKPOINT_RESTORE); without it, the path is looked up with
    O_PATH and O_NOFOLLOW, which opens nothing, and reopened only once it
    is that regular file (open_regular)."""
    try:
        return open_regular(f"/proc/{pid}/map_files/{span}", identity)
    except OSError:
        return open_regular(path, identity, follow=False)


def open_regular(path: str, identity: Optional[tuple[int, int]] = None,
                  follow: bool = True) -> int:
    """A file descriptor of path for reading, which must be a regular file
    (never a FIFO or a device that blocks, never ends or acts when opened),
    and, given (device, inode), that file.  What path names is only
    opened (for reading) once it is checked: it is looked up with O_PATH
    (no open of the file itself: no driver, FIFO or FUSE server sees it),
    then reopened through /proc/self/fd.  follow=False: a symlink as the
    last component is refused, not followed (a path by name); True for
    /proc's magic links (/proc/PID/exe, map_files, fd), which name the
    file itself."""
    flags = os.O_PATH | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    handle = os.open(path, flags)
    try:
        st = os.fstat(handle)
        if not stat.S_ISREG(st.st_mode) or (
                identity is not None and (st.st_dev, st.st_ino) != identity):
            raise OSError(f"{path} is not the file expected")
        return os.open(f"/proc/self/fd/{handle}",
                       os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    finally:
        os.close(handle)


def elf_version(fd: int) -> Optional[tuple[int, int, int]]:
    """The CPython version an ELF file (an interpreter or a libpython) was
    built as: PY_VERSION_HEX after the b"xdebugpy" cookie that starts its
    .PyRuntime section (_Py_DebugOffsets, 3.13+), else the value of its
    exported Py_Version (3.11+); None without either.  Every offset and
    size is checked against the file; ValueError for a malformed one."""
    size = os.fstat(fd).st_size

    def read(offset: int, length: int) -> bytes:
        if offset < 0 or length < 0 or length > _ELF_LIMIT or offset + length > size:
            raise ValueError("an ELF table out of bounds")
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise ValueError("the ELF file changed while read")
        return data

    ident = read(0, 64)
    if ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    order = "<" if ident[5] == 1 else ">"
    if ident[4] == 2:  # 64-bit
        shoff, shentsize, shnum, shstrndx = struct.unpack_from(order + "Q10xHHH", ident, 0x28)
        sh_format, sym_format = order + "IIQQQQIIQQ", order + "IBBHQQ"
    else:
        shoff, shentsize, shnum, shstrndx = struct.unpack_from(order + "I10xHHH", ident, 0x20)
        sh_format, sym_format = order + "IIIIIIIIII", order + "IIIBBH"
    if shentsize != struct.calcsize(sh_format) or not 0 < shnum or shstrndx >= shnum:
        return None
    table = read(shoff, shnum * shentsize)
    # (name, type, addr, offset, size, link) of each section
    sections = [(name, kind, addr, offset, length, link) for name, kind, _, addr, offset,
                length, link, _, _, _ in (struct.unpack_from(sh_format, table, i * shentsize)
                                          for i in range(shnum))]
    names = read(sections[shstrndx][3], min(sections[shstrndx][4], _ELF_LIMIT))

    def name_of(strings: bytes, at: int) -> bytes:
        return strings[at:strings.find(b"\0", at)] if 0 <= at < len(strings) else b""

    def decode(hexversion: int) -> Optional[tuple[int, int, int]]:
        major, minor, micro = (hexversion >> shift & 0xFF for shift in (24, 16, 8))
        return (major, minor, micro) if major == 3 else None

    nobits = 8
    for name, kind, _, offset, length, _ in sections:
        if name_of(names, name) == b".PyRuntime" and kind != nobits and length >= 16:
            head = read(offset, 16)
            if head[:8] == b"xdebugpy":
                return decode(struct.unpack_from(order + "Q", head, 8)[0])
    dynsym = 11
    for _, kind, _, offset, length, link in sections:
        if kind != dynsym or link >= shnum:
            continue
        strings = read(sections[link][3], min(sections[link][4], _ELF_LIMIT))
        entry = struct.calcsize(sym_format)
        symbols = read(offset, min(length, _ELF_LIMIT) // entry * entry)
        for i in range(len(symbols) // entry):
            fields = struct.unpack_from(sym_format, symbols, i * entry)
            if ident[4] == 2:
                name, _, _, shndx, value, length = fields
            else:
                name, value, length, _, _, shndx = fields
            if length not in (4, 8) or not 0 < shndx < shnum \
                    or name_of(strings, name) != b"Py_Version":
                continue
            _, kind, addr, base, _, _ = sections[shndx]
            if kind == nobits:
                return None
            data = read(base + value - addr, length)
            return decode(struct.unpack(order + ("I" if length == 4 else "Q"), data)[0])
    return None


def remote_debug_disabled(pid: int) -> str:
    """Why the target refuses remote debugging, from its command line and
    environment ("" when neither says so; sys.remote_exec has the last
    word)."""
    try:
        environ = read_text(f"/proc/{pid}/environ").split("\0")
    except OSError:
        environ = []
    if any(e.startswith("PYTHON_DISABLE_REMOTE_DEBUG=") for e in environ):
        return "PYTHON_DISABLE_REMOTE_DEBUG is set in its environment"
    try:
        argv = read_text(f"/proc/{pid}/cmdline").split("\0")
    except OSError:
        argv = []
    for i, arg in enumerate(argv[1:], 1):
        option = arg[2:] if arg.startswith("-X") and len(arg) > 2 else (
            argv[i + 1] if arg == "-X" and i + 1 < len(argv) else "")
        if option.replace("-", "_") == "disable_remote_debug":
            return f"it runs with -X {option}"
        if not arg.startswith("-") or arg in ("-c", "-m", "--"):
            break  # the program's own arguments follow
    return ""
