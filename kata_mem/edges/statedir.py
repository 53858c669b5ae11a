"""The state directory: what in it is kata-mem's, who may have written it, and the
node-wide lock on it (docs, "State, locking and recovery").

Layout (mode 0700, files 0600)::

    <state_dir>/.kata-mem-state                 marker: kata-mem created or adopted this directory
    <state_dir>/.kata-mem-ledger                the node's commitments (kata_mem.edges.ledger)
    <state_dir>/<sandbox>/.kata-mem-sandbox     marker: kata-mem created this sandbox directory
    <state_dir>/<sandbox>/lock                  flock(2): one resize of a sandbox at a time
    <state_dir>/<sandbox>/journal.json          the intent record (schema kata-mem/journal/v1)
    <state_dir>/<sandbox>/request.json          the last request, for ``kata-mem reconcile``
    <state_dir>/.kata-mem.sock.service          serve's record, when its socket is here
                                                (kata_mem.edges.service_record)

kata-mem only reads, changes or removes what it provably created: a state
directory with its marker (it writes one when it creates the directory or finds
it empty), and inside it only sandbox directories with their own marker, and in
those only the files named above. Anything else is left alone and reported. A
state directory that is not a directory, or is not empty and has no marker, is a
configuration error: kata-mem cannot tell its own state from someone else's.

It runs as root, so it also trusts only what no other user could have written
(as sshd's ``StrictModes`` and sudo treat their files): the state directory, a
sandbox directory, a marker, journal, saved request, ledger or lock is used only when
the calling uid owns it and neither group nor others may write it, checked on the
opened descriptor (``O_NOFOLLOW``, ``fstat``) rather than by path; every directory
above the state directory, and every symlink on the way to it, belongs to root or
the caller and is not writable by others (unless sticky, as ``/tmp``), so that no
one else can swap the directory between a check and a use. Anything else is a
configuration error naming the path, its owner and its mode, and nothing is written.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, Optional

from kata_mem.core.errors import ConfigError, KataMemError
from kata_mem.core.frozen import frozen
from kata_mem.core.model import SANDBOX_ID, SERVICE_ENTRIES
from kata_mem.edges.files import read_open
from kata_mem.edges.locks import same_file
from kata_mem.edges.ownership import check_way, others_could_write, who

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
#: The files kata-mem writes in a sandbox directory: the only ones it ever removes.
OWN_FILES = ("journal.json", "request.json", "lock")
#: Its temporary files (``.<name>.<pid>.tmp``, and a sandbox directory being removed as
#: ``.removing.<sandbox>.<pid>.tmp``), left behind only by a crash.
TEMP = re.compile(
    r"\.(?:journal\.json|request\.json|kata-mem-state|kata-mem-sandbox|kata-mem-ledger|probe"
    r"|kata-mem\.sock\.service|removing\.[A-Za-z0-9][A-Za-z0-9_.-]*)\.\d+\.tmp"
)
WHAT_TO_DO = (
    "Set [kata_mem] state_dir (or the command's --state-dir) to a directory kata-mem "
    "created, an empty directory, or a path that does not exist yet"
)


#: The entries of ``kata-mem serve`` in a state directory that holds its socket.
_SERVICE_OWN = (*SERVICE_ENTRIES, SERVICE_RECORD)


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


DirState = Literal["absent", "empty", "ours"]

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


# -- who could have written it: the trust rule ------------------------------------------------

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


# -- what kata-mem created: the markers ------------------------------------------------------


def marker(
    dir_fd: int,
    where: Path,
    name: str,
    schema: str,
    root: Path,
    sandbox: Optional[str] = None,
) -> Literal["ok", "missing", "bad"]:
    """Whether ``name`` in the directory open as ``dir_fd`` (``where``) is a marker
    kata-mem wrote: a regular file, the caller's and writable by no one else, with ``schema``.

    :raises StateDirError: the marker could have been written by another user.
    """
    try:
        fd = os.open(name, READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "bad"  # a symlink, or unreadable
    try:
        info = os.fstat(fd)
        if others_could_write(info):
            raise refusal(root, where / name, info)
        try:
            doc = json.loads(
                read_open(fd, info, where / name, cap=4096, what="marker", error=ConfigError)
            )
        except (KataMemError, ValueError, RecursionError):
            return "bad"
    finally:
        os.close(fd)
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        return "bad"
    return "ok" if sandbox is None or doc.get("sandbox") == sandbox else "bad"


def listdir(path: Path, root: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError as exc:
        raise StateDirError(
            f"state_dir {root}: cannot read {path} ({exc.strerror or exc}); nothing was changed",
            "unreadable",
        ) from exc


def atomic_write(
    directory: Path, path: Path, data: bytes, root: Path, *, replace: bool = True
) -> None:
    """Write ``path`` (in ``directory``) atomically and durably; with ``replace=False``
    an existing ``path`` is kept as it is (its inode too: the root marker is a lock).

    :raises StateDirError: when the directory cannot be written.
    """
    tmp = directory / f".{path.name.lstrip('.')}.{os.getpid()}.tmp"
    try:
        try:
            fd = os.open(tmp, CREATE, 0o600)
        except FileExistsError:
            tmp.unlink()  # left by a crashed call that had this pid: kata-mem's own name
            fd = os.open(tmp, CREATE, 0o600)
        try:
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
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise cannot_write(root, str(path), exc, "it was not written") from exc


def state_dir_state(state_dir: str | Path) -> DirState:
    """Whether the state directory is absent, empty, or kata-mem's. Reads only.

    :raises StateDirError: it is not a directory, it has content and no marker, or it
        (its marker, a directory above it) could have been written by another user.
    """
    root = Path(state_dir)
    for _ in range(3):
        try:
            check_way(root, f"state_dir {root}", "the state directory")
        except ConfigError as exc:
            raise StateDirError(exc.message, "way") from exc
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            if os.path.lexists(root):
                raise StateDirError(
                    f"state_dir {root}: is a symlink to nothing; nothing was changed. {WHAT_TO_DO}",
                    "dangling",
                ) from exc
            return "absent"
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and os.path.exists(root):
                raise StateDirError(
                    f"state_dir {root}: is not a directory; kata-mem cannot write the sandbox "
                    f"state there, and nothing was changed. {WHAT_TO_DO}",
                    "not_directory",
                ) from exc
            raise StateDirError(
                f"state_dir {root}: cannot use it ({exc.strerror or exc}); nothing was changed. "
                + what_to_do(exc),
                "unopenable",
            ) from exc
        try:
            found = _root_state(root, fd)
        finally:
            os.close(fd)
        if found is not None:
            return found
    raise StateDirError(
        f"state_dir {root}: changed while kata-mem looked at it; try again", "changed"
    )


def _root_state(root: Path, fd: int) -> Optional[DirState]:
    """:func:`state_dir_state` of the directory open as ``fd``; None: look again."""
    info = os.fstat(fd)
    if others_could_write(info):
        raise refusal(root, root, info)
    # The marker appears by an atomic link and is never removed: once there, it is whole.
    # It is looked up first, so that the directory (a thousand sandboxes on a busy node)
    # is listed only when it has none, to tell an empty directory from someone else's.
    mark = marker(fd, root, STATE_MARKER, STATE_DIR_SCHEMA, root)
    if mark == "ok":
        return "ours"
    try:
        names = os.listdir(fd)
    except OSError as exc:
        raise StateDirError(
            f"state_dir {root}: cannot read it ({exc.strerror or exc}); nothing was changed",
            "unreadable",
        ) from exc
    if STATE_MARKER in names:
        if mark == "missing":
            return None  # made while we looked: look again
    elif not [n for n in names if not (TEMP.fullmatch(n) or n in _SERVICE_OWN)]:
        return "empty"
    raise StateDirError(
        f"state_dir {root}: is a directory that kata-mem did not create (it has no valid "
        f"{STATE_MARKER} marker) and it is not empty; nothing in it was read or changed. "
        f"{WHAT_TO_DO}",
        "not_ours",
    )


def _make_dirs(root: Path) -> None:
    """Make the state directory (0700) and the parents it lacks (0755), with those
    modes whatever the umask: a parent others could write would let them swap it.

    :raises FileExistsError: one appeared meanwhile (look again: it may not be ours).
    """
    missing = []
    here = Path(os.path.abspath(root))
    while not os.path.lexists(here):
        missing.append(here)
        here = here.parent
    for directory in reversed(missing):
        mode = 0o700 if directory == missing[0] else 0o755
        os.mkdir(directory, mode)
        os.chmod(directory, mode)  # just made, ours: the umask must not widen or narrow it


def ensure_state_dir(state_dir: str | Path) -> None:
    """Create the state directory (or adopt an empty one) and mark it as kata-mem's.

    :raises StateDirError: as :func:`state_dir_state`, or it cannot be written.
    """
    root = Path(state_dir)
    for _ in range(4):
        found = state_dir_state(root)
        if found == "ours":
            return
        if found == "absent":
            try:
                _make_dirs(root)
            except FileExistsError:
                pass  # another call (or user) made one first: look again
            except OSError as exc:
                raise StateDirError(
                    f"state_dir {root}: cannot create it ({exc.strerror or exc}); nothing was "
                    f"changed. {WHAT_TO_DO}",
                    "uncreatable",
                ) from exc
            continue  # and check what was made before writing in it
        doc = {
            "schema": STATE_DIR_SCHEMA,
            "note": "kata-mem state; only subdirectories with a .kata-mem-sandbox marker are kata-mem's",
        }
        data = json.dumps(doc).encode() + b"\n"
        atomic_write(root, root / STATE_MARKER, data, root, replace=False)
        return
    raise StateDirError(f"state_dir {root}: changed while kata-mem set it up; try again", "changed")


@contextlib.contextmanager
def node_lock(root: Path, shared: bool = False) -> Iterator[None]:
    """Serialize making and removing sandbox directories (a flock on the root marker).

    Held only for those few file operations, never while waiting for a sandbox lock.
    """
    try:
        fd = os.open(root / STATE_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise StateDirError(
            f"state_dir {root}: cannot open {STATE_MARKER} ({exc.strerror or exc}); "
            f"nothing was changed. {WHAT_TO_DO}",
            "unopenable",
        ) from exc
    try:
        info = os.fstat(fd)
        if others_could_write(info):  # replaced since state_dir_state read it
            raise refusal(root, root / STATE_MARKER, info)
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@frozen
class Listing:
    """The entries of a state directory: sandboxes kata-mem created, those that carry
    its marker but that another user could have written (name, the error that says so),
    and everything else."""

    sandboxes: list[str]
    refused: list[tuple[str, StateDirError]]
    foreign: list[str]


def list_state_dir(state_dir: str | Path) -> Listing:
    """What is in the state directory (nothing when it is absent or empty). Reads only.

    :raises StateDirError: as :func:`state_dir_state`.
    """
    root = Path(state_dir)
    if state_dir_state(root) != "ours":
        return Listing([], [], [])
    with node_lock(root, shared=True):  # no sandbox directory half made or half removed
        return sandboxes(root)


def sandboxes(root: Path) -> Listing:
    """The entries of the state directory ``root`` (kata-mem's). Call it with the node lock
    held (shared or exclusive), so that no sandbox directory is half made or half removed."""
    ours, refused, foreign = [], [], []
    for name in sorted(listdir(root, root)):
        if name in (STATE_MARKER, LEDGER) or name in _SERVICE_OWN or TEMP.fullmatch(name):
            continue
        if SANDBOX_ID.fullmatch(name):
            found, why = sandbox_dir(root, name)
            if found == "ours":
                ours.append(name)
                continue
            if found == "refused":
                assert why is not None  # sandbox_dir: a refused directory comes with its error
                refused.append((name, why))
                continue
        foreign.append(name)
    return Listing(ours, refused, foreign)


# -- one sandbox directory ----------------------------------------------------------------

SandboxDir = Literal["absent", "empty", "ours", "foreign", "changed", "refused"]


def sandbox_dir(root: Path, sandbox: str) -> tuple[SandboxDir, Optional[StateDirError]]:
    """What the sandbox directory ``root/sandbox`` is, and the error that refuses it when
    another user could have written it (None: no such refusal). ``refused``: it carries
    kata-mem's marker, but it, the marker or one of kata-mem's files in it could have
    been written by another user; an empty directory others can write is ``foreign``
    (with its error). Reads only."""
    directory = root / sandbox
    try:
        # A symlink is not followed: kata-mem makes real directories.
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return "absent", None
    except OSError:
        return "foreign", None
    try:
        found = _look(root, sandbox, fd)
        # Moved away while we looked (a concurrent removal): look again.
        return found if same_file(fd, directory) else ("changed", None)
    finally:
        os.close(fd)


def _look(root: Path, sandbox: str, fd: int) -> tuple[SandboxDir, Optional[StateDirError]]:
    directory = root / sandbox
    info = os.fstat(fd)
    try:
        names = os.listdir(fd)
    except OSError:
        return "foreign", None
    if SANDBOX_MARKER not in names:
        if [n for n in names if not TEMP.fullmatch(n)]:
            return "foreign", None
        if others_could_write(info):
            return "foreign", refusal(root, directory, info)
        return "empty", None
    if others_could_write(info):
        return "refused", refusal(root, directory, info)
    try:
        mark = marker(fd, directory, SANDBOX_MARKER, SANDBOX_DIR_SCHEMA, root, sandbox)
    except StateDirError as exc:
        return "refused", exc
    if mark != "ok":
        return ("changed" if mark == "missing" else "foreign"), None
    for name in sorted(set(names).intersection(OWN_FILES)):
        try:
            entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if others_could_write(entry):
            return "refused", refusal(root, directory / name, entry)
    return "ours", None
