"""What the kernel tells ``kata-mem serve`` without being asked again: that a file or
directory changed (inotify(7)) and that a process exited (a pidfd, pidfd_open(2)).

Both are hints that something should be read again, never facts: whoever acts on one
reads the state, and checks who may have written it, as every reader does. Each is a
file descriptor the service's event loop waits on, so a node where nothing happens costs
nothing, whatever the number of sandboxes.

inotify through ``ctypes`` (glibc's and musl's ``inotify_init1``, ``inotify_add_watch``
and ``inotify_rm_watch``, linux/inotify.h's event layout): the standard library has no
binding, and the maintained packages (``inotify_simple``, ``asyncinotify``) are this
same thin wrapper around the same three calls, one more dependency on every node for
some sixty lines. ``os.pidfd_open`` is in the standard library from Python 3.9 (the
oldest kata-mem supports) on Linux 5.3 and later; an older kernel says ``ENOSYS`` and
the caller watches that VM the old way (:func:`pidfd`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import struct
import threading
from typing import NamedTuple, Optional

#: What a watch is for: its kind (``state``: the state directory, ``sandbox``: a sandbox's
#: directory, ``socket``: a VM's monitor socket) and the sandbox (empty for ``state``).
Key = tuple[str, str]

# linux/inotify.h
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

#: A directory's entries made, removed, renamed, written or changed in mode or owner,
#: and the directory itself (its own mode and owner, removed, moved).
DIR_CHANGES = (
    IN_ATTRIB
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_CREATE
    | IN_DELETE
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_DONT_FOLLOW
)
#: A file that is removed (its link count changes: ``IN_ATTRIB``), renamed, or changed in
#: mode or owner: for a monitor socket, what a VM that went or a socket bound again does.
FILE_GONE = IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_DONT_FOLLOW

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)


class Event(NamedTuple):
    """One inotify event: what its watch was added for (``key``; None for a watch removed
    since, and for ``IN_Q_OVERFLOW``), its mask, and the name of the entry it is about in
    a watched directory (empty for the watched file or directory itself)."""

    key: Optional[Key]
    mask: int
    name: str

    @property
    def overflow(self) -> bool:
        """The kernel's queue overflowed: events were lost, everything must be read again."""
        return bool(self.mask & IN_Q_OVERFLOW)


class WatchFailed(OSError):
    """A watch could not be added (``ENOSPC``: ``fs.inotify.max_user_watches`` reached;
    ``ENOENT``: the path is gone): the caller reads that path the old way."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


class Inotify:
    """One inotify instance whose watches each carry a key of the caller's (a sandbox id,
    say). Thread-safe: watches are added from pool threads (before the path is read, so
    that no change between the read and the watch is missed) while the event loop reads
    the events."""

    def __init__(self) -> None:
        self._c = _libc()
        fd = self._c.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self.fd: int = fd
        self._keys: dict[int, Key] = {}
        self._lock = threading.Lock()

    def add(self, path: str, mask: int, key: Key) -> int:
        """Watch ``path`` for ``mask``; its events carry ``key``. A path already watched
        (the same inode) keeps its watch, now with this mask and key.

        :raises WatchFailed: the kernel refused (the path's errno).
        """
        wd = self._c.inotify_add_watch(self.fd, os.fsencode(path), ctypes.c_uint32(mask))
        if wd < 0:
            err = ctypes.get_errno()
            raise WatchFailed(err, os.strerror(err), path)
        with self._lock:
            self._keys[wd] = key
        return int(wd)

    def remove(self, wd: int) -> None:
        """Stop watching ``wd`` (one the kernel removed already is no error)."""
        with self._lock:
            self._keys.pop(wd, None)
        self._c.inotify_rm_watch(self.fd, wd)

    def read(self) -> list[Event]:
        """The events queued now (none when nothing happened: the descriptor never blocks)."""
        chunks = []
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
        events: list[Event] = []
        at = 0
        with self._lock:
            while at + _EVENT.size <= len(data):
                wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
                at += _EVENT.size
                name = data[at : at + size].rstrip(b"\0").decode("utf-8", "surrogateescape")
                at += size
                key = self._keys.get(wd)
                if mask & IN_IGNORED:  # the kernel removed the watch (its file went)
                    self._keys.pop(wd, None)
                events.append(Event(key, mask, name))
        return events

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def pidfd(pid: int) -> Optional[int]:
    """A pidfd of process ``pid`` (readable once it has exited), or None when the kernel
    or this Python has none (Linux before 5.3: ``ENOSYS``; not Linux) or the process is
    gone already (``ESRCH``: the caller finds the VM gone by asking, as before).

    The pid came from the monitor socket's ``SO_PEERCRED`` at the last apply; it may
    have been reused since. A caller proves the pidfd is the VMM's by asking the socket
    once more *after* opening it (its listener is still that pid, so the process the
    pidfd refers to has not exited).
    """
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.ESRCH, errno.EINVAL, errno.EPERM):
            return None
        raise


__all__ = [
    "DIR_CHANGES",
    "FILE_GONE",
    "Event",
    "Inotify",
    "Key",
    "WatchFailed",
    "pidfd",
]
