"""The state directory and its sandbox directories: which are kata-mem's (the markers),
making them, the node-wide lock, and one sandbox's directory made, locked, probed and
removed (:class:`SandboxDirectory`) (docs/design/state.md). The files' names, the
refusals and the atomic writes are :mod:`kata_mem.edges.statefiles`'.

kata-mem only reads, changes or removes what it provably created: a state
directory with its marker (it writes one when it creates the directory or finds
it empty), and inside it only sandbox directories with their own marker, and in
those only the files :mod:`~kata_mem.edges.statefiles` names. Anything else is left alone
and reported. A state directory that is not a directory, or is not empty and has no marker,
is a configuration error: kata-mem cannot tell its own state from someone else's.

It runs as root, so it also trusts only what no other user could have written, checked on
the opened descriptor (:func:`~kata_mem.edges.statefiles.refusal`); every directory
above the state directory, and every symlink on the way to it, belongs to root or
the caller and is not writable by others (unless sticky, as ``/tmp``), so that no
one else can swap the directory between a check and a use.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, Optional, Union

from kata_mem.core.errors import ConfigError, KataMemError
from kata_mem.core.model import SANDBOX_ID, Note, NoteCode, check_sandbox_id
from kata_mem.core.values import Frozen
from kata_mem.edges.files import read_open
from kata_mem.edges.locks import flock_until, same_file
from kata_mem.edges.ownership import check_way, others_could_write
from kata_mem.edges.statefiles import (
    CREATE,
    LEDGER,
    LOCK,
    OWN_FILES,
    READ,
    SANDBOX_DIR_SCHEMA,
    SANDBOX_MARKER,
    SERVICE_OWN,
    STATE_DIR_SCHEMA,
    STATE_MARKER,
    TEMP,
    WHAT_TO_DO,
    StateDirError,
    atomic_write,
    cannot_write,
    refusal,
    temp_name,
    what_to_do,
)

DirState = Literal["absent", "empty", "ours"]

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
            if os.path.islink(root) and not os.path.exists(root):
                raise StateDirError(
                    f"state_dir {root}: is a symlink to nothing; nothing was changed. {WHAT_TO_DO}",
                    "dangling",
                ) from exc
            if os.path.lexists(root):
                continue  # made since it was opened (another call sets it up too): look again
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
    elif not [n for n in names if not (TEMP.fullmatch(n) or n in SERVICE_OWN)]:
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


class Listing(Frozen):
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
        found, why = entry(root, name)
        if found == "own":
            continue
        if found == "ours":
            ours.append(name)
        elif found == "refused":
            assert why is not None  # sandbox_dir: a refused directory comes with its error
            refused.append((name, why))
        else:
            foreign.append(name)
    return Listing(ours, refused, foreign)


def entry(
    root: Path, name: str
) -> tuple[Union[SandboxDirState, Literal["own"]], Optional[StateDirError]]:
    """What the entry ``name`` of the state directory ``root`` is, as a listing sorts it:
    kata-mem's own (its marker, ledger, the service's files, a temporary file: ``own``,
    never listed), a sandbox directory (:func:`sandbox_dir`: ``ours``, ``refused`` with
    its error), or anything else (listed as not kata-mem's). ``absent`` and ``changed``
    (gone or replaced while it was read) are left to the caller, which reads it again
    or lists it as not kata-mem's. Call it with the node lock held, as :func:`sandboxes`."""
    if name in (STATE_MARKER, LEDGER) or name in SERVICE_OWN or TEMP.fullmatch(name):
        return "own", None
    if SANDBOX_ID.fullmatch(name):
        return sandbox_dir(root, name)
    return "foreign", None


# -- one sandbox directory ----------------------------------------------------------------

SandboxDirState = Literal["absent", "empty", "ours", "foreign", "changed", "refused"]

#: How long a second call for the same sandbox waits for the first to finish.
LOCK_WAIT_S = 120.0


def sandbox_dir(root: Path, sandbox: str) -> tuple[SandboxDirState, Optional[StateDirError]]:
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


def _look(root: Path, sandbox: str, fd: int) -> tuple[SandboxDirState, Optional[StateDirError]]:
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


class SandboxDirectory:
    """One sandbox's directory: what it is, made, locked, probed and removed. Its files
    are :class:`kata_mem.edges.journal.SandboxState`'s."""

    def __init__(self, state_dir: str | Path, sandbox: str) -> None:
        self.root = Path(state_dir)
        self.sandbox = check_sandbox_id(sandbox)
        self.dir = self.root / sandbox
        self.notes: list[Note] = []

    def _dir_state(self, refuse: tuple[SandboxDirState, ...] = ("refused",)) -> SandboxDirState:
        """What the sandbox directory is (:func:`sandbox_dir`).

        :raises StateDirError: it is one of ``refuse`` because another user could have
            written it (a ``foreign`` directory others can write, say).
        """
        found, refused = sandbox_dir(self.root, self.sandbox)
        if refused is not None and found in refuse:
            raise refused
        return found

    def owned(self) -> bool:
        """Whether the sandbox directory exists and kata-mem created it. Reads only.

        :raises StateDirError: it carries kata-mem's marker, but another user could have
            written it, its marker or one of its files.
        """
        return self._dir_state() == "ours"

    def _ensure_dir(self) -> None:
        """Make the sandbox directory (or adopt an empty one, left by a crash), marked as
        kata-mem's. Call it with the root lock held.

        :raises StateDirError: it is someone else's, changed while it was read, or cannot
            be written; nothing was changed.
        """
        # An empty directory others can write is refused too: adopted, it would be theirs.
        found = self._dir_state(refuse=("refused", "foreign"))
        if found == "ours":
            return
        if found == "changed":
            raise StateDirError(
                f"state_dir {self.root}: {self.dir} was removed or replaced while kata-mem "
                "read it (another process than kata-mem: kata-mem's own calls wait for its "
                "lock); nothing was changed. Try again",
                "changed",
            )
        if found not in {"absent", "empty"}:
            raise StateDirError(
                f"state_dir {self.root}: {self.dir} exists but kata-mem did not create it "
                f"(no valid {SANDBOX_MARKER} marker); nothing in it was read or changed. "
                "Move it away, or use another sandbox id or state_dir",
                "not_ours",
            )
        if found == "absent":
            try:
                self.dir.mkdir(mode=0o700)
            except OSError as exc:
                raise cannot_write(
                    self.root, "the sandbox state", exc, "nothing was changed"
                ) from exc
            with contextlib.suppress(OSError):
                os.chmod(self.dir, 0o700)
        doc = {"schema": SANDBOX_DIR_SCHEMA, "sandbox": self.sandbox}
        try:
            atomic_write(self.dir, self.dir / SANDBOX_MARKER, json.dumps(doc).encode(), self.root)
        except ConfigError:
            if found == "absent":
                # Made just now and still empty (atomic_write removed its temporary file):
                # left, it would be an unmarked directory no later call could tell from
                # another tool's, reported as "not created by kata-mem" for good.
                with contextlib.suppress(OSError):
                    self.dir.rmdir()
            raise

    def _probe(self) -> None:
        """Fail before anything is changed when the sandbox directory is not writable."""
        probe = self.dir / temp_name("probe")
        try:
            with contextlib.suppress(FileNotFoundError):
                probe.unlink()  # left by a crashed call that had this pid and thread
            os.close(os.open(probe, CREATE, 0o600))
            probe.unlink()
        except OSError as exc:
            raise cannot_write(self.root, "the sandbox state", exc, "nothing was changed") from exc

    def _open_lock(self) -> int:
        """The sandbox's lock file, opened (made when missing).

        :raises ConfigError: it cannot be made, is not a regular file, or another user
            could have written it.
        """
        lock = self.dir / LOCK
        try:
            fd = os.open(
                lock,
                os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o600,
            )
        except OSError as exc:
            raise cannot_write(self.root, "the sandbox state", exc, "nothing was changed") from exc
        info = os.fstat(fd)
        if others_could_write(info) or not stat.S_ISREG(info.st_mode):
            os.close(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(
                    f"state_dir {self.root}: {lock} is not a regular file, so kata-mem did not "
                    "make it; nothing was changed. Move it away"
                )
            raise refusal(self.root, lock, info)
        return fd

    @contextlib.contextmanager
    def locked(self, wait_s: float) -> Iterator[bool]:
        """Hold the sandbox lock; yields False if it could not be had within ``wait_s``.

        A caller that did not get the lock has changed nothing (it may have created the
        directories, if there were none). The lock is the file at its path when it is
        taken: :meth:`clear` moves the directory away, and a waiter that then gets the
        old file starts again.

        :raises ConfigError: the state is someone else's or cannot be written.
        """
        deadline = time.monotonic() + wait_s
        while True:
            ensure_state_dir(self.root)
            with node_lock(self.root):
                self._ensure_dir()
                fd = self._open_lock()
            try:
                got = flock_until(fd, deadline)
                # Removed (and maybe made anew) while we waited: the lock is the file at the path.
                if got and same_file(fd, self.dir / LOCK):
                    break
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
            if not got:
                yield False
                return
        try:
            self._probe()
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def remove(self, wait_s: float) -> Literal["removed", "absent", "not-ours", "busy"]:
        """Forget the sandbox (it is gone): delete its state under the lock. Its entry in
        the node's ledger is its caller's to release (:func:`kata_mem.edges.ledger.release`),
        once this has removed its journal.

        Only a directory kata-mem created is touched; when the lock is not had within
        ``wait_s`` nothing is changed ("busy").

        :raises ConfigError: it carries kata-mem's marker, but another user could have
            written it (nothing is changed).
        """
        found = self._dir_state()
        if found == "absent":
            return "absent"
        if found != "ours":
            return "not-ours"
        with self.locked(wait_s) as got:
            if not got:
                return "busy"
            self.clear()
        return "removed"

    def clear(self) -> None:
        """Delete kata-mem's files and then the directory, if nothing else is in it.

        Call it with the lock held. The directory is first renamed out of the way, so
        that a concurrent caller finds either the whole marked directory or none (and
        makes a new one), never one half removed.
        """
        names = set(listdir(self.dir, self.root))
        removable = {n for n in names if (n in OWN_FILES or TEMP.fullmatch(n))}
        removable = {n for n in removable if _is_file(self.dir / n)}
        for name in sorted(removable - {LOCK}):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()
        others = names - removable - {SANDBOX_MARKER}
        if others:
            self._warn(
                "state",
                f"kata-mem's files were removed, but the directory {self.dir} was kept because "
                "it holds entries kata-mem did not create: " + ", ".join(sorted(others)[:5]),
            )
            return
        away = self.root / temp_name(f"removing.{self.sandbox}")
        try:
            with node_lock(self.root):
                os.rename(self.dir, away)
        except OSError as exc:
            self._warn("state", f"{self.dir}: could not be removed ({exc.strerror or exc})")
            return
        for name in os.listdir(away):
            if (name in (LOCK, SANDBOX_MARKER) or TEMP.fullmatch(name)) and _is_file(away / name):
                (away / name).unlink()
        with contextlib.suppress(OSError):
            away.rmdir()

    def _warn(self, code: NoteCode, text: str) -> None:
        from kata_mem.edges.logs import get_logger

        get_logger(__name__).warning("%s", text)
        self.notes.append(Note(code, text))


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
