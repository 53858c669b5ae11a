"""The state files: their names, the refusals that say why one is not used, and how one
is written (atomically and durably). Which directories are kata-mem's, and the locks, are
:mod:`kata_mem.edges.statedir`'s (docs/design/state.md).

Layout (mode 0700, files 0600)::

    <state_dir>/.kata-mem-state                 marker: kata-mem created or adopted this directory
    <state_dir>/.kata-mem-ledger                the node's commitments (kata_mem.edges.ledger)
    <state_dir>/<sandbox>/.kata-mem-sandbox     marker: kata-mem created this sandbox directory
    <state_dir>/<sandbox>/lock                  flock(2): one resize of a sandbox at a time
    <state_dir>/<sandbox>/journal.json          the intent record (schema kata-mem/journal/v1)
    <state_dir>/<sandbox>/request.json          the last request, for ``kata-mem reconcile``
    <state_dir>/.kata-mem.sock.service          serve's record, when its socket is here
                                                (kata_mem.edges.service_record)

It runs as root, so it trusts only what no other user could have written (as sshd's
``StrictModes`` and sudo treat their files): the state directory, a sandbox directory, a
marker, journal, saved request, ledger or lock is used only when the calling uid owns it
and neither group nor others may write it, checked on the opened descriptor
(``O_NOFOLLOW``, ``fstat``) rather than by path (:mod:`kata_mem.edges.ownership`). Anything
else is a configuration error naming the path, its owner and its mode (:func:`refusal`),
and nothing is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import threading
from pathlib import Path
from typing import Literal

from kata_mem.core.errors import ConfigError
from kata_mem.core.model import SERVICE_ENTRIES
from kata_mem.edges.ownership import who

STATE_DIR_SCHEMA = "kata-mem/state-dir/v1"
SANDBOX_DIR_SCHEMA = "kata-mem/sandbox-dir/v1"
STATE_MARKER = ".kata-mem-state"
SANDBOX_MARKER = ".kata-mem-sandbox"
#: The node's commitments (:mod:`kata_mem.edges.ledger`), at the root of the state directory.
LEDGER = ".kata-mem-ledger"
#: The record ``kata-mem serve`` keeps beside its socket
#: (:func:`kata_mem.edges.service_record.publish_service`), when
#: the socket lies in the state directory, as the defaults put it (its name there is
#: ``SERVICE_ENTRIES[0]``): kata-mem's own entry, like the socket and its lock.
SERVICE_RECORD = f".{SERVICE_ENTRIES[0]}.service"
#: A sandbox's journal (:mod:`kata_mem.edges.journal`), its last request, and its lock.
JOURNAL, REQUEST, LOCK = "journal.json", "request.json", "lock"
#: The files kata-mem writes in a sandbox directory: the only ones it ever removes.
OWN_FILES = (JOURNAL, REQUEST, LOCK)
#: Its temporary files (``.<name>.<pid>.<tid>.tmp``, and a sandbox directory being removed
#: as ``.removing.<sandbox>.<pid>.<tid>.tmp``; an older kata-mem named them without the
#: thread), left behind only by a crash.
TEMP = re.compile(
    r"\.(?:journal\.json|request\.json|kata-mem-state|kata-mem-sandbox|kata-mem-ledger|probe"
    r"|kata-mem\.sock\.service|removing\.[A-Za-z0-9][A-Za-z0-9_.-]*)\.\d+(?:\.\d+)?\.tmp"
)


def temp_name(name: str) -> str:
    """kata-mem's temporary name for ``name`` (:data:`TEMP`): its process and thread, so
    that no other call takes it while this one lives (the threads of ``kata-mem serve``
    make two sandboxes, or the state directory, at once: with the pid alone, one took the
    other's file for a crashed call's and removed it), and one that is there was left by a
    crashed call."""
    return f".{name.lstrip('.')}.{os.getpid()}.{threading.get_native_id()}.tmp"


WHAT_TO_DO = (
    "Set [kata_mem] state_dir (or the command's --state-dir) to a directory kata-mem "
    "created, an empty directory, or a path that does not exist yet"
)


#: The entries of ``kata-mem serve`` in a state directory that holds its socket.
SERVICE_OWN = (*SERVICE_ENTRIES, SERVICE_RECORD)


def what_to_do(exc: OSError) -> str:
    """The advice for a state directory the caller cannot open or write: a refusal of
    permission to a user other than root is most often kata-mem run without root (the
    node's state directory is root's, as Kata's shim and QEMU are)."""
    if exc.errno in (errno.EACCES, errno.EPERM) and os.geteuid() != 0:
        return (
            f"kata-mem runs as root on a node, and this is uid {os.geteuid()}: run it as "
            "root (preview, host, config check and runtimeclass need no root), or "
            + WHAT_TO_DO[0].lower()
            + WHAT_TO_DO[1:]
        )
    return WHAT_TO_DO


#: Why the state directory cannot be used, as a value (:class:`StateDirError`): a directory
#: or symlink on the way to it another user could change (``way``), a symlink to nothing
#: (``dangling``), not a directory, not opened or not listed (``unopenable``, ``unreadable``),
#: changed while kata-mem looked, it or a marker another user could have written
#: (``refused``), not empty and without a marker (``not_ours``), not created or not written
#: (``uncreatable``, ``unwritable``), its file system full (``full``).
StateDirFault = Literal[
    "way",
    "dangling",
    "not_directory",
    "unopenable",
    "unreadable",
    "changed",
    "refused",
    "not_ours",
    "uncreatable",
    "unwritable",
    "full",
]


class StateDirError(ConfigError):
    """The state directory cannot be used (exit 3, as any :class:`ConfigError`): the
    message names the path and what to do, ``fault`` says which of the
    :data:`StateDirFault` it is, for callers that decide by it (serve's reconcile loop logs
    a fault once, not every pass) without reading the message."""

    def __init__(self, message: str, fault: StateDirFault) -> None:
        super().__init__(message)
        self.fault: StateDirFault = fault


# -- opening a state file, and the trust rule's refusals --------------------------------

#: How a state file is opened to be read: never through a symlink, never blocking on a FIFO.
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: How a temporary file is made: a new file, never one that was there (a link to another file).
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def refusal(root: Path, path: Path, info: os.stat_result) -> StateDirError:
    return StateDirError(
        f"state_dir {root}: {path} is owned by {who(info.st_uid)}, mode "
        f"{stat.S_IMODE(info.st_mode):04o}; kata-mem, running as {who(os.geteuid())}, uses "
        "only state that it owns and that no group or other user can write, so nothing was "
        "read or changed. Remove it, or chown it and chmod go-w if it is kata-mem's",
        "refused",
    )


def cannot_write(root: Path, what: str, exc: OSError, done: str) -> StateDirError:
    """Why kata-mem cannot write ``what`` under the state directory ``root``, and what to do:
    a full file system (ENOSPC, or EDQUOT for a quota) is said so, with room to make there;
    only other failures advise another ``state_dir``. ``done`` says what was changed."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StateDirError(
            f"state_dir {root}: cannot write {what}: the file system is full "
            f"({exc.strerror or exc}); {done}. Free space on it (or raise the quota), then "
            "call again",
            "full",
        )
    return StateDirError(
        f"state_dir {root}: cannot write {what} ({exc.strerror or exc}); {done}. "
        + what_to_do(exc),
        "unwritable",
    )


def os_error_text(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symlink, expected a regular file"
    if exc.errno == errno.ENXIO:
        return "is a socket, expected a regular file"
    return exc.strerror or str(exc)


# -- writing a state file -----------------------------------------------------------------


def write_durably(tmp: Path, path: Path, data: bytes, mode: int, *, replace: bool = True) -> None:
    """Write ``data`` to ``path`` atomically and durably: into ``tmp`` (kata-mem's own name
    beside it; one a crashed call of this pid left is taken again), fsync, rename, fsync
    the directory. With ``replace=False`` an existing ``path`` is kept as it is (its inode
    too: the root marker is a lock). ``mode`` whatever the umask.

    :raises OSError: nothing is left at ``tmp`` then."""
    try:
        try:
            fd = os.open(tmp, CREATE, mode)
        except FileExistsError:
            tmp.unlink()  # left by a crashed call that had this pid and thread: ours
            fd = os.open(tmp, CREATE, mode)
        try:
            os.fchmod(fd, mode)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(tmp, path)
        else:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
            tmp.unlink()
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def atomic_write(
    directory: Path, path: Path, data: bytes, root: Path, *, replace: bool = True
) -> None:
    """Write the state file ``path`` (in ``directory``) atomically and durably, 0600; with
    ``replace=False`` an existing ``path`` is kept as it is.

    :raises StateDirError: when the directory cannot be written.
    """
    tmp = directory / temp_name(path.name)
    try:
        write_durably(tmp, path, data, 0o600, replace=replace)
    except OSError as exc:
        raise cannot_write(root, str(path), exc, "it was not written") from exc
