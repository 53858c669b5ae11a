"""One sandbox's state on disk: its lock, its journal (the intent record, a
:class:`~kata_mem.core.record.Record`) and its saved request; and the node's
commitments that the journals add up to (:func:`node_admission`, :class:`NodeLedger`).

The record is written atomically (temp file, fsync, rename, fsync of the directory)
*before* every hypervisor command and again with the observed result after it. It is a
hint for recovery, never the truth about what is plugged: the hypervisor is. A missing,
truncated, corrupt or wrongly typed record is therefore replaced by what the hypervisor
reports, with a note, and nothing is lost. What in the state directory is kata-mem's and
who may have written it is :mod:`kata_mem.edges.statedir`'s.

One module (about 600 lines) because the node's commitments and a VM's owner are read from
the sandboxes' journals and saved requests: :class:`NodeLedger` rebuilds from them and
:func:`vm_owner` asks each, through :class:`SandboxState`: one reader of a sandbox's files
(its trust checks, its schema) serves the sandbox and the node alike (the ledger file itself is
:mod:`kata_mem.edges.ledger`'s).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable, Literal, Optional, TypeVar

from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import ConfigError, InputError, KataMemError
from kata_mem.core.model import Note, NoteCode, check_sandbox_id
from kata_mem.core.record import Record
from kata_mem.core.request import RequestHead, SandboxRequest, request_head
from kata_mem.core.units import fmt_bytes
from kata_mem.core.values import replace
from kata_mem.edges.files import STATE_CAP, read_open
from kata_mem.edges.ledger import read_ledger, write_ledger
from kata_mem.edges.locks import flock_until, same_file
from kata_mem.edges.ownership import others_could_write
from kata_mem.edges.statedir import (
    CREATE,
    OWN_FILES,
    READ,
    SANDBOX_DIR_SCHEMA,
    SANDBOX_MARKER,
    TEMP,
    SandboxDir,
    StateDirError,
    atomic_write,
    cannot_write,
    ensure_state_dir,
    listdir,
    node_lock,
    os_error_text,
    refusal,
    sandbox_dir,
    sandboxes,
    state_dir_state,
)

#: What a saved request is read as: all of it, or only as far as its backend.
_Saved = TypeVar("_Saved", SandboxRequest, RequestHead)

#: How long a second call for the same sandbox waits for the first to finish.
LOCK_WAIT_S = 120.0


class SandboxState:
    """The lock and record of one sandbox."""

    def __init__(self, state_dir: str | Path, sandbox: str) -> None:
        self.root = Path(state_dir)
        self.sandbox = check_sandbox_id(sandbox)
        self.dir = self.root / sandbox
        self.path = self.dir / "journal.json"
        self.notes: list[Note] = []

    def _dir_state(self, refuse: tuple[SandboxDir, ...] = ("refused",)) -> SandboxDir:
        """What the sandbox directory is (:func:`~kata_mem.edges.statedir.sandbox_dir`).

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
        probe = self.dir / f".probe.{os.getpid()}.tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                probe.unlink()  # left by a crashed call that had this pid
            os.close(os.open(probe, CREATE, 0o600))
            probe.unlink()
        except OSError as exc:
            raise cannot_write(self.root, "the sandbox state", exc, "nothing was changed") from exc

    def _open_lock(self) -> int:
        """The sandbox's lock file, opened (made when missing).

        :raises ConfigError: it cannot be made, is not a regular file, or another user
            could have written it.
        """
        lock = self.dir / "lock"
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
                if got and same_file(fd, self.dir / "lock"):
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

    def load(self, *, read_only: bool = False) -> Record:
        """The record, or a fresh one (with a warning) when it is missing or unreadable.
        ``read_only``: the caller shows it and rebuilds nothing (``status``), and its
        warning says so.

        :raises ConfigError: another user could have written it (it is not read).
        """
        then = (
            "shown as unknown; the next apply rebuilds it from the hypervisor"
            if read_only
            else "rebuilt from the hypervisor"
        )
        try:
            fd = os.open(self.path, READ)
        except FileNotFoundError:
            return Record(self.sandbox)
        except OSError as exc:
            self._warn(
                "journal", f"journal {self.path} cannot be read ({os_error_text(exc)}); {then}"
            )
            return Record(self.sandbox)
        try:
            info = os.fstat(fd)
            if others_could_write(info):
                raise refusal(self.root, self.path, info)
            try:
                raw = read_open(
                    fd, info, self.path, cap=STATE_CAP, what="journal", error=ConfigError
                )
                return Record.from_json(self.sandbox, json.loads(raw))
            except KataMemError as exc:
                self._warn("journal", f"journal unreadable ({exc.message}); {then}")
            except (ValueError, TypeError, RecursionError) as exc:
                why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
                self._warn(
                    "journal", f"journal {self.path} is corrupt or truncated ({why}); {then}"
                )
        finally:
            os.close(fd)
        return Record(self.sandbox)

    def save(self, record: Record) -> Record:
        """Write ``record`` atomically and durably, stamped with the time; return what was
        written. Call it with the lock held.

        :raises ConfigError: when the state directory cannot be written.
        """
        record = record.stamped(time.time())
        atomic_write(
            self.dir, self.path, json.dumps(record.to_json(), indent=1).encode(), self.root
        )
        return record

    @property
    def request_path(self) -> Path:
        """The last request applied to this sandbox (a shim request), for ``kata-mem reconcile``."""
        return self.dir / "request.json"

    def saved_request(self) -> Optional[SandboxRequest]:
        """The last request applied to this sandbox, checked as any input is (it is input
        from disk: a libvirt URI that is not local is refused before anything it names is
        opened), or None when there is none. Reads only.

        :raises ConfigError: it cannot be read, another user could have written it, or
            it is for another sandbox.
        :raises InputError: it is not a valid request (named by its path).
        """
        return self._saved(SandboxRequest.from_json)

    def saved_endpoint(self) -> Optional[Endpoint]:
        """The backend of the last request applied to this sandbox (None: no request, or
        one without a backend), read only as far as it (:func:`request_head`): the file
        checked as :meth:`saved_request` checks it, the workload not read. Reads only.

        :raises ConfigError: as :meth:`saved_request`.
        :raises InputError: its document, sandbox or backend is not valid (named by its path).
        """
        head = self._saved(request_head)
        return None if head is None else head.endpoint

    def _saved(self, read: Callable[[bytes], _Saved]) -> Optional[_Saved]:
        """What ``read`` makes of the saved request's bytes, refused when it is for
        another sandbox.

        :raises ConfigError: as :meth:`saved_request`.
        :raises InputError: as ``read``, named by its path.
        """
        raw = self._read_request()
        if raw is None:
            return None
        try:
            saved = read(raw)
        except InputError as exc:
            raise InputError(f"{self.request_path}: {exc.message}") from exc
        if saved.sandbox != self.sandbox:
            raise ConfigError(
                f"{self.request_path}: is for sandbox {saved.sandbox!r}, not {self.sandbox!r}; "
                f"remove {self.dir} once its VM is gone"
            )
        if saved.endpoint is None:
            return saved
        return replace(saved, endpoint=replace(saved.endpoint, saved=True))

    def _read_request(self) -> Optional[bytes]:
        """The last request's bytes, or None when there is none. Reads only.

        :raises ConfigError: it cannot be read, is not a regular file, is too large, or
            another user could have written it (it is not read).
        """
        try:
            fd = os.open(self.request_path, READ)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(
                f"{self.request_path}: cannot read the saved request: {os_error_text(exc)}"
            ) from exc
        try:
            info = os.fstat(fd)
            if others_could_write(info):
                raise refusal(self.root, self.request_path, info)
            return read_open(
                fd, info, self.request_path, cap=STATE_CAP, what="saved request", error=ConfigError
            )
        finally:
            os.close(fd)

    def save_request(self, doc: dict[str, Any]) -> None:
        """Write the last request atomically. Call it with the lock held.

        :raises ConfigError: when the state directory cannot be written.
        """
        atomic_write(self.dir, self.request_path, json.dumps(doc, indent=1).encode(), self.root)

    def remove(self, wait_s: float) -> Literal["removed", "absent", "not-ours", "busy"]:
        """Forget the sandbox (it is gone): delete its state under the lock.

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
            # After the journal is gone: the node's total falls only once it is.
            from kata_mem.edges.logs import get_logger

            # Logged, not one of this sandbox's notes: the ledger is the node's.
            for note in record_commitment(self.root, self.sandbox, None, None):
                get_logger(__name__).warning("%s", note.text)
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
        for name in sorted(removable - {"lock"}):
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
        away = self.root / f".removing.{self.sandbox}.{os.getpid()}.tmp"
        try:
            with node_lock(self.root):
                os.rename(self.dir, away)
        except OSError as exc:
            self._warn("state", f"{self.dir}: could not be removed ({exc.strerror or exc})")
            return
        for name in os.listdir(away):
            if (name in ("lock", SANDBOX_MARKER) or TEMP.fullmatch(name)) and _is_file(away / name):
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


# -- the node's commitments -----------------------------------------------------------------


class NodeLedger:
    """The node's commitments, read under the node lock: from the ledger file, or rebuilt
    from the journals when it is missing, damaged, or counts a size no VM of this host
    can have (``limit``); :attr:`notes` say so. Use it only while the lock is held.

    Without ``create`` a missing ledger stays missing (no budget needs it: it is built
    from the journals when one first does) and :meth:`record` does nothing; a ledger that
    exists is always kept up to date, so that it is right when a budget is set.
    """

    def __init__(self, root: Path, limit: Optional[int], create: bool = True) -> None:
        self.root = root
        self.limit = limit
        self.notes: list[Note] = []
        #: Whether the entries were just read from the journals (nothing to check them against).
        self.rebuilt = False
        entries, problem = read_ledger(root)
        if entries is not None and limit is not None and max(entries.values(), default=0) > limit:
            entries, problem = None, "counts a sandbox above the host's memory"
        if entries is None and (create or problem != "missing"):
            entries = self._rebuilt(problem)
        self._entries = entries

    def _rebuilt(self, problem: str) -> dict[str, int]:
        entries = journal_commitments(self.root, self.limit)
        self.rebuilt = True
        if problem != "missing":
            self.notes.append(
                Note("journal", f"the node ledger {problem}; rebuilt from the journals")
            )
        write_ledger(self.root, entries)
        return entries

    @property
    def entries(self) -> dict[str, int]:
        return dict(self._entries or {})

    def others(self, but: str) -> int:
        """Bytes held or being grown to by every sandbox but ``but``."""
        entries = self._entries or {}
        return sum(entries.values()) - entries.get(but, 0)

    def hold_to(self, sandbox: str, journal: int) -> None:
        """Hold ``sandbox``'s entry to its journal, read under its lock a moment ago. An
        entry below it is what no crash leaves (the ledger is written before a grow's
        journal and after a fall's): the ledger was restored, copied or edited, so none of
        its entries is trusted and it is rebuilt from the journals, with a note. An entry
        above it is what a crash leaves: brought down to the journal. Costs nothing more
        than the admission's own read unless the ledger is wrong."""
        if self._entries is None:
            return
        counted = self._entries.get(sandbox, 0)
        if counted < journal:
            self._entries = self._rebuilt(
                f"counts {fmt_bytes(counted)} for {sandbox}, whose journal holds "
                f"{fmt_bytes(journal)}"
            )
        elif counted > journal:
            self.record(sandbox, journal)

    def record(self, sandbox: str, commitment: Optional[int]) -> None:
        """``sandbox`` now holds ``commitment`` (``None``: it is gone); written when it changed."""
        if self._entries is None:
            return  # no ledger, and none needed yet
        if self._entries.get(sandbox) == commitment:
            return  # unchanged (or, for None, not there)
        entries = dict(self._entries)
        if commitment is None:
            del entries[sandbox]
        else:
            entries[sandbox] = commitment
        write_ledger(self.root, entries)
        self._entries = entries


def journal_commitments(root: Path, limit: Optional[int]) -> dict[str, int]:
    """Every sandbox's commitment, read from the journals (sizes above ``limit``, which no
    VM of this host can have, not counted). Call it with the node lock held."""
    entries = {}
    for name in sandboxes(root).sandboxes:
        record = SandboxState(root, name).load(read_only=True)
        if limit is not None:
            record, _ = record.bounded(limit)
        entries[name] = record.commitment
    return entries


@contextlib.contextmanager
def node_admission(
    state_dir: str | Path, limit: int, budget: bool = True
) -> Iterator[Optional[NodeLedger]]:
    """The node-wide lock around one admission decision: read the other sandboxes'
    commitments from the ledger, decide, record this one's, so that two grows at the same
    moment cannot both take the last free MiB. Held for a file read and a write; a state
    directory that is not kata-mem's yet has no ledger (``None``). Without a ``budget``
    (``node_overcommit`` unset) the ledger is not made, only kept when it exists.
    """
    root = Path(state_dir)
    if state_dir_state(root) != "ours":
        yield None
        return
    with node_lock(root):  # also keeps sandbox directories from coming and going
        yield NodeLedger(root, limit, create=budget)


def record_commitment(
    state_dir: str | Path, sandbox: str, commitment: Optional[int], limit: Optional[int]
) -> list[Note]:
    """Set ``sandbox``'s commitment in the ledger (``None``: forget it), under the node lock;
    ``limit`` (the host's memory, when known) bounds what a rebuild counts. Returns the
    notes of a rebuild."""
    root = Path(state_dir)
    if state_dir_state(root) != "ours":
        return []
    with node_lock(root):
        ledger = NodeLedger(root, limit, create=False)
        ledger.record(sandbox, commitment)
    return ledger.notes


def check_ledger(state_dir: str | Path, limit: int) -> list[Note]:
    """Compare the ledger with the journals, and mend it when they differ (``kata-mem
    reconcile`` and the service's loop): what differed, as notes."""
    root = Path(state_dir)
    if state_dir_state(root) != "ours":
        return []
    with node_lock(root):
        if read_ledger(root)[1] == "missing":
            return []  # made when an admission first needs it; nothing to mend, nothing made
        ledger = NodeLedger(root, limit)
        if ledger.rebuilt:
            # Just read from the journals: reading them again would only repeat each
            # journal's warnings in this one pass.
            return ledger.notes
        truth = journal_commitments(root, limit)
        recorded = ledger.entries
        # A sandbox whose directory is refused (another user could have written it) is not
        # read: what the ledger counts for it stays, the cautious side.
        for name, _why in sandboxes(root).refused:
            if name in recorded:
                truth[name] = recorded[name]
        if truth == recorded:
            return ledger.notes
        write_ledger(root, truth)
        differ = sorted(
            set(truth) ^ set(recorded) | {n for n in truth if truth[n] != recorded.get(n)}
        )
        return [
            *ledger.notes,
            Note(
                "journal",
                "the node ledger differed from the journals for "
                + ", ".join(differ[:5])
                + (" and more" if len(differ) > 5 else "")
                + "; mended from the journals",
            ),
        ]


def vm_owner(root: Path, sandbox: str, reached: Endpoint) -> Optional[str]:
    """Another sandbox of the state directory ``root`` whose saved request leads to the VM
    that ``reached`` (an endpoint as connecting reached it) leads to, or None. For QMP the
    same socket file (its filesystem device and inode, which the saved request keeps as
    ``backend.vmm``); for libvirt the same URI and domain.

    A VM is sized from one sandbox's requests: a second sandbox id sending its own would
    resize the first one's VM from another workload, and neither journal would tell what
    the VM holds (two owners of one VM's memory). Called for a sandbox's first request only
    (one without a saved request of its own), so an apply reads the other sandboxes' saved
    requests once in its sandbox's life; a request of another sandbox that cannot be read
    or trusted is passed over here (reconcile and status report it).
    """
    with node_lock(root, shared=True):  # no sandbox directory half made or half removed
        names = sandboxes(root).sandboxes
    for other in names:
        if other == sandbox:
            continue
        try:
            saved = SandboxState(root, other).saved_endpoint()
        except KataMemError:
            continue
        if saved is None or saved.kind != reached.kind:
            continue
        if reached.kind == "libvirt":
            if (saved.target, saved.domain) == (reached.target, reached.domain):
                return other
        elif (
            saved.vmm is not None
            and reached.vmm is not None
            and (saved.vmm.device, saved.vmm.inode) == (reached.vmm.device, reached.vmm.inode)
        ):
            return other
    return None
