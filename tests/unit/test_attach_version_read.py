"""attach reads the target's CPython version from its ELF file, never from
a file on FUSE, whose server (any user may run one) can block the read for
good: the version then comes from the file's name."""
import os
import sys

import pytest

from frametrace.remote import _target

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def mountinfo_naming(tmp_path, path, fstype):
    """A mountinfo in which the filesystem of path is of type fstype."""
    device = os.stat(path).st_dev
    line = (f"36 25 {os.major(device)}:{os.minor(device)} / /somewhere rw,relatime shared:1 - "
            f"{fstype} /dev/whatever rw\n")
    other = "20 1 0:999 / /elsewhere rw - fuse.sshfs host: rw\n"
    (tmp_path / "mountinfo").write_text(other + line)
    return str(tmp_path / "mountinfo")


@pytest.mark.parametrize("fstype,on_fuse", [("fuse.sshfs", True), ("fuseblk", True),
                                            ("fuse", True), ("ext4", False)])
def test_on_fuse(tmp_path, monkeypatch, fstype, on_fuse):
    monkeypatch.setattr(_target, "MOUNTINFO", mountinfo_naming(tmp_path, sys.executable, fstype))
    fd = os.open(sys.executable, os.O_RDONLY)
    try:
        assert _target.on_fuse(fd) is on_fuse
    finally:
        os.close(fd)


def interpreter_file():
    """The file cpython_version reads for this process."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "/libpython3" in parts[5]:
                return parts[5].strip()
    return os.path.realpath("/proc/self/exe")


def test_a_file_on_fuse_is_not_read(tmp_path, monkeypatch):
    path = interpreter_file()
    read = []
    monkeypatch.setattr(_target, "elf_version", lambda fd: read.append(fd))
    monkeypatch.setattr(_target, "MOUNTINFO", mountinfo_naming(tmp_path, path, "fuse.sshfs"))
    version, _ = _target.cpython_version(os.getpid())
    assert not read
    named = "libpython3" in path or os.path.basename(path).startswith("python3.")
    assert version == ((*sys.version_info[:2], -1) if named else None)


def test_a_file_elsewhere_is_read(tmp_path, monkeypatch):
    path = interpreter_file()
    monkeypatch.setattr(_target, "MOUNTINFO", mountinfo_naming(tmp_path, path, "ext4"))
    version, _ = _target.cpython_version(os.getpid())
    assert version is not None and version[:2] == sys.version_info[:2]
