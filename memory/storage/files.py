"""Files only their owner can read: the data directory and everything Parley writes in it.

Modes are given at creation (never via the process-wide umask, which other threads
share), so nothing is ever readable by others, not even for a moment.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "create_private_file",
    "private_dir",
    "tighten",
    "write_private",
]

DIR_MODE = 0o700
FILE_MODE = 0o600
_OTHERS = 0o077


def private_dir(path: Path) -> Path:
    """Create `path` and any missing parents, each 0700; leave existing ones as they are.

    Only what is created here is ours for certain: an existing parent may be a home
    directory or a shared volume. Call `tighten` on the ones Parley owns by design.
    """
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process got there first
            directory.mkdir(mode=DIR_MODE)
    return path


def tighten(path: Path) -> None:
    """Take group and other permissions off `path` if it exists and we own it.

    Someone else's file is left alone: even root must not rewrite its modes.
    """
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    if info.st_uid == os.geteuid() and info.st_mode & _OTHERS:
        path.chmod(stat.S_IMODE(info.st_mode) & ~_OTHERS)


def create_private_file(path: Path) -> None:
    """Create an empty 0600 file unless it exists, and tighten it if it does."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, FILE_MODE))
    tighten(path)


def write_private(path: Path, data: str | bytes) -> None:
    """Replace `path` atomically with a 0600 file: a reader never sees half of it."""
    content = data.encode() if isinstance(data, str) else data
    # mkstemp opens with O_EXCL and mode 0600, under a name no concurrent writer shares.
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise
