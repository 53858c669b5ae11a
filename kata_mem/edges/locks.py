"""flock(2) as kata-mem takes it: with a deadline, and only on the file that is at the
path when it is held (a lock file moved away while a caller waited locks nothing)."""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Union


def flock_until(fd: int, deadline: float) -> bool:
    """Take an exclusive flock on ``fd``, trying until ``deadline`` (``time.monotonic``);
    False when it was not had by then."""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def same_file(fd: int, path: Union[str, Path]) -> bool:
    """Whether ``path`` is still the file open as ``fd``. A path that cannot be looked at
    (gone, or a directory on the way replaced) is not shown to be it."""
    held = os.fstat(fd)
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
