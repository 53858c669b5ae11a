"""Per-sandbox state: a lock that serializes calls, and an intent record.

Layout under the state directory (mode 0700, files 0600)::

    <state_dir>/.kata-mem-state                 marker: kata-mem created or adopted this directory
    <state_dir>/<sandbox>/.kata-mem-sandbox     marker: kata-mem created this sandbox directory
    <state_dir>/<sandbox>/lock                  flock(2): one resize of a sandbox at a time
    <state_dir>/<sandbox>/journal.json          the intent record (schema kata-mem/journal/v1)
    <state_dir>/<sandbox>/request.json          the last request, for ``kata-mem reconcile``

kata-mem only reads, changes or removes what it provably created: a state
directory with its marker (it writes one when it creates the directory or finds
it empty), and inside it only sandbox directories with their own marker, and in
those only the files named above. Anything else is left alone and reported. A
state directory that is not a directory, or is not empty and has no marker, is a
configuration error: kata-mem cannot tell its own state from someone else's.

It runs as root, so it also trusts only what no other user could have written
(as sshd's ``StrictModes`` and sudo treat their files): the state directory, a
sandbox directory, a marker, journal, saved request or lock is used only when the
calling uid owns it and neither group nor others may write it, checked on the
opened descriptor (``O_NOFOLLOW``, ``fstat``) rather than by path; every directory
above the state directory, and every symlink on the way to it, belongs to root or
the caller and is not writable by others (unless sticky, as ``/tmp``), so that no
one else can swap the directory between a check and a use. Anything else is a
configuration error naming the path, its owner and its mode, and nothing is written.

The record is written atomically (temp file, fsync, rename, fsync of the
directory) *before* every hypervisor command and again with the observed result
after it. It is a hint for recovery, never the truth about what is plugged: the
hypervisor is. A missing, truncated, corrupt or wrongly typed record is
therefore replaced by what the hypervisor reports, with a warning, and nothing
is lost.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, get_args

from kata_mem.core.errors import ConfigError, InputError, KataMemError
from kata_mem.core.model import (
    SANDBOX_ID,
    Note,
    NoteCode,
    OwnedDevice,
    Reason,
    Status,
    Step,
    StepAction,
    check_sandbox_id,
)
from kata_mem.core.request import SandboxRequest
from kata_mem.core.units import MiB, to_mib_floor
from kata_mem.edges.files import STATE_CAP, read_open
from kata_mem.edges.ownership import check_way
from kata_mem.edges.ownership import others_could_write as _others_could_write
from kata_mem.edges.ownership import who as _who

JOURNAL_SCHEMA = "kata-mem/journal/v1"
STATE_DIR_SCHEMA = "kata-mem/state-dir/v1"
SANDBOX_DIR_SCHEMA = "kata-mem/sandbox-dir/v1"
STATE_MARKER = ".kata-mem-state"
SANDBOX_MARKER = ".kata-mem-sandbox"
#: How long a second call for the same sandbox waits for the first to finish.
LOCK_WAIT_S = 120.0

#: The files kata-mem writes in a sandbox directory: the only ones it ever removes.
_OWN_FILES = ("journal.json", "request.json", "lock")
#: Its temporary files (``.<name>.<pid>.tmp``, and a sandbox directory being removed as
#: ``.removing.<sandbox>.<pid>.tmp``), left behind only by a crash.
_TEMP = re.compile(
    r"\.(?:journal\.json|request\.json|kata-mem-state|kata-mem-sandbox|probe"
    r"|removing\.[A-Za-z0-9][A-Za-z0-9_.-]*)\.\d+\.tmp"
)
#: What ``kata-mem serve`` keeps at the root of the state directory when it listens
#: there, as it does by default (``/run/kata-mem/kata-mem.sock`` in ``/run/kata-mem``):
#: its socket (made by it or by systemd's kata-mem.socket) and the socket's lock.
#: kata-mem's own entries, neither sandboxes nor someone else's.
SERVICE_ENTRIES = ("kata-mem.sock", "kata-mem.sock.lock")
_WHAT_TO_DO = (
    "Set [kata_mem] state_dir or --state-dir to a directory kata-mem created, "
    "an empty directory, or a path that does not exist yet"
)

DirState = Literal["absent", "empty", "ours"]


#: Sizes in bytes are what QEMU takes: unsigned 64-bit.
_SIZE_LIMIT = 1 << 64
_MIB_LIMIT = to_mib_floor(_SIZE_LIMIT)


def _int_field(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size_field(value: Any, limit: int = _SIZE_LIMIT) -> bool:
    """A size (bytes, or MiB with ``limit`` in MiB): an integer that is not negative."""
    return _int_field(value) and 0 <= value < limit


def _mib_field(value: Any) -> bool:
    return value is None or _size_field(value, _MIB_LIMIT)


def _number_field(value: Any) -> bool:
    """A time stamp (seconds since the epoch): finite and not negative."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value)) and value >= 0
    except OverflowError:  # an integer too large for a float
        return False


def _id_field(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


RecordState = Literal["idle", "running"]
#: Of the step in flight: its intent was written, its commands were sent, it was done.
Phase = Literal["", "intent", "issued", "done"]
_ACTIONS: tuple[StepAction, ...] = get_args(StepAction)
_PHASES: tuple[Phase, ...] = get_args(Phase)
_STATUSES: tuple[Status, ...] = get_args(Status)
_REASONS: tuple[Reason, ...] = get_args(Reason)


@dataclass(frozen=True)
class Deferral:
    """A deferred shrink: its reason, how often it was deferred, and when to retry."""

    reason: str
    attempts: int
    retry_at: float
    target_mib: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "attempts": self.attempts,
            "retry_at": self.retry_at,
            "target_mib": self.target_mib,
        }

    @classmethod
    def from_json(cls, doc: Any) -> Deferral:
        _check(
            isinstance(doc, dict)
            and _number_field(doc.get("retry_at"))
            and _int_field(doc.get("attempts"))
            and isinstance(doc.get("reason"), str)
            and _mib_field(doc.get("target_mib")),
            "deferred is not a deferral (reason, attempts, retry_at)",
        )
        _check(doc["reason"] in _REASONS and doc["reason"] != "", "deferred.reason is not a reason")
        _check(doc["attempts"] >= 1, "deferred.attempts is not a positive count")
        return cls(doc["reason"], doc["attempts"], float(doc["retry_at"]), doc.get("target_mib"))


@dataclass(frozen=True)
class LastOutcome:
    """What the last call came to, and when (host clock)."""

    status: str
    reason: str
    message: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, doc: Any) -> LastOutcome:
        _check(
            isinstance(doc, dict)
            and all(isinstance(doc.get(k), str) for k in ("status", "reason", "message"))
            and _number_field(doc.get("at")),
            "last_outcome is not an outcome (status, reason, message, at)",
        )
        _check(
            doc["status"] in _STATUSES and doc["reason"] in _REASONS,
            "last_outcome has an unknown status or reason",
        )
        return cls(doc["status"], doc["reason"], doc["message"], float(doc["at"]))


def _step_json(step: Step) -> dict[str, Any]:
    return {
        "action": step.action,
        "device": step.device,
        "size": step.size,
        "delta": step.delta,
        "total_after": step.total_after,
        "memdev": step.memdev,
    }


def _step_from_json(doc: Any) -> Step:
    _check(
        isinstance(doc, dict)
        and doc.get("action") in _ACTIONS
        # Any string: a virtio-mem device is resized under whatever id QEMU reports.
        and isinstance(doc.get("device"), str)
        and isinstance(doc.get("memdev", ""), str)
        and _size_field(doc.get("size"))
        and _int_field(doc.get("delta"))
        and _size_field(doc.get("total_after", 0)),
        "step is not a step",
    )
    action, size, delta = doc["action"], doc["size"], doc["delta"]
    # What each action changes (the executor's own steps): a DIMM comes or goes whole,
    # deleting a backend object changes no memory.
    consistent = {
        "plug_dimm": size > 0 and delta == size,
        "unplug_dimm": size > 0 and delta == -size,
        "delete_memdev": delta == 0,
        "resize_virtio_mem": abs(delta) < _SIZE_LIMIT,
    }[action]
    _check(consistent, f"step {action} has an inconsistent size or delta")
    # Journals written before total_after and memdev were kept have neither; only the
    # action and device of a step in flight are used to repair it.
    return Step(
        action, doc["device"], size, delta, doc.get("total_after", 0), doc.get("memdev", "")
    )


def _owned_json(dev: OwnedDevice) -> dict[str, Any]:
    return {
        "id": dev.id,
        "kind": dev.kind,
        "memdev": dev.memdev,
        "size": dev.size,
        "confirmed": dev.confirmed,
    }


def _owned_from_json(doc: Any) -> list[OwnedDevice]:
    _check(isinstance(doc, list), "owned is not a list of devices")
    owned = []
    for entry in doc:
        _check(
            isinstance(entry, dict)
            and _id_field(entry.get("id"))
            and entry.get("kind") == "dimm"
            and isinstance(entry.get("memdev"), str)
            and _size_field(entry.get("size"))
            and entry["size"] > 0
            and isinstance(entry.get("confirmed"), bool),
            "owned is not a list of devices (id, kind dimm, memdev, size, confirmed)",
        )
        owned.append(
            OwnedDevice(entry["id"], entry["memdev"], entry["size"], "dimm", entry["confirmed"])
        )
    ids = [o.id for o in owned]
    memdevs = [o.memdev for o in owned if o.memdev]
    _check(
        len(set(ids)) == len(ids) and len(set(memdevs)) == len(memdevs),
        "owned names a device or backend object twice",
    )
    return owned


@dataclass
class Record:
    """The intent record: the step in flight and its ``phase``, the devices kata-mem
    created, unplugs the guest has not finished, the last observed size, a deferred
    shrink, the last outcome."""

    sandbox: str
    state: RecordState = "idle"
    step: Optional[Step] = None
    phase: Phase = ""
    #: The devices kata-mem created and has not removed yet: the proof that they are its own.
    owned: list[OwnedDevice] = field(default_factory=list)
    pending_unplug: list[str] = field(default_factory=list)
    observed_mib: Optional[int] = None
    #: The target of a grow admitted against the node's budget and not finished yet.
    target_mib: Optional[int] = None
    deferred: Optional[Deferral] = None
    last_outcome: Optional[LastOutcome] = None
    updated_at: float = 0.0
    #: Read from a journal of a kata-mem that did not record the devices it created (no
    #: ``owned``): none of the VM's devices can be proven kata-mem's. Not written back.
    legacy: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": JOURNAL_SCHEMA,
            "sandbox": self.sandbox,
            "state": self.state,
            "step": None if self.step is None else _step_json(self.step),
            "phase": self.phase,
            "owned": [_owned_json(o) for o in self.owned],
            "pending_unplug": sorted(set(self.pending_unplug)),
            "observed_mib": self.observed_mib,
            "target_mib": self.target_mib,
            "deferred": None if self.deferred is None else self.deferred.to_json(),
            "last_outcome": None if self.last_outcome is None else self.last_outcome.to_json(),
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, sandbox: str, doc: Any) -> Record:
        """:raises ValueError: on any shape, type or value the writer would not produce."""
        _check(
            isinstance(doc, dict) and doc.get("schema") == JOURNAL_SCHEMA, "not a kata-mem journal"
        )
        _check(
            doc.get("sandbox") == sandbox,
            f"sandbox is {doc.get('sandbox')!r}, not this sandbox {sandbox!r}",
        )
        state = doc.get("state", "idle")
        _check(state in ("idle", "running"), "state is not idle or running")
        phase = doc.get("phase", "")
        _check(phase in _PHASES, f"phase is not one of {', '.join(map(repr, _PHASES))}")
        pending = doc.get("pending_unplug") or []
        _check(
            isinstance(pending, list) and all(_id_field(p) for p in pending),
            "pending_unplug is not a list of ids",
        )
        step = doc.get("step")
        step = None if step is None else _step_from_json(step)
        # The executor writes a step with its phase and state "running", and clears all three.
        _check(
            (step is None) == (phase == "") and (step is None or state == "running"),
            "state, step and phase do not agree (a step in flight has a phase, and the state "
            "is then running)",
        )
        legacy = "owned" not in doc
        owned = [] if legacy else _owned_from_json(doc["owned"])
        observed = doc.get("observed_mib")
        _check(_mib_field(observed), "observed_mib is not a size in MiB")
        target = doc.get("target_mib")
        _check(_mib_field(target), "target_mib is not a size in MiB")
        deferred = doc.get("deferred")
        deferred = None if deferred is None else Deferral.from_json(deferred)
        last = doc.get("last_outcome")
        last = None if last is None else LastOutcome.from_json(last)
        updated = doc.get("updated_at", 0.0)
        _check(_number_field(updated), "updated_at is not a time")
        return cls(
            sandbox=sandbox,
            state=state,
            step=step,
            phase=phase,
            owned=owned,
            pending_unplug=list(pending),
            observed_mib=observed,
            target_mib=target,
            deferred=deferred,
            last_outcome=last,
            updated_at=float(updated),
            legacy=legacy,
        )


# -- who could have written it: the trust rule (kata_mem.edges.ownership) ---------------------

#: How a state file is opened to be read: never through a symlink, never blocking on a FIFO.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
#: How a temporary file is made: a new file, never one that was there (a link to another file).
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _refusal(root: Path, path: Path, info: os.stat_result) -> ConfigError:
    return ConfigError(
        f"state_dir {root}: {path} is owned by {_who(info.st_uid)}, mode "
        f"{stat.S_IMODE(info.st_mode):04o}; kata-mem, running as {_who(os.geteuid())}, uses "
        "only state that it owns and that no group or other user can write, so nothing was "
        "read or changed. Remove it, or chown it and chmod go-w if it is kata-mem's"
    )


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "is a symlink, expected a regular file"
    if exc.errno == errno.ENXIO:
        return "is a socket, expected a regular file"
    return exc.strerror or str(exc)


# -- what kata-mem created: the markers ------------------------------------------------------


def _marker(
    dir_fd: int,
    where: Path,
    name: str,
    schema: str,
    root: Path,
    sandbox: Optional[str] = None,
) -> Literal["ok", "missing", "bad"]:
    """Whether ``name`` in the directory open as ``dir_fd`` (``where``) is a marker
    kata-mem wrote: a regular file, the caller's and writable by no one else, with ``schema``.

    :raises ConfigError: the marker could have been written by another user.
    """
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except FileNotFoundError:
        return "missing"  # removed since the directory was listed
    except OSError:
        return "bad"  # a symlink, or unreadable
    try:
        info = os.fstat(fd)
        if _others_could_write(info):
            raise _refusal(root, where / name, info)
        try:
            doc = json.loads(
                read_open(fd, where / name, cap=4096, what="marker", error=ConfigError)
            )
        except (KataMemError, ValueError, RecursionError):
            return "bad"
    finally:
        os.close(fd)
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        return "bad"
    return "ok" if sandbox is None or doc.get("sandbox") == sandbox else "bad"


def _listdir(path: Path, root: Path) -> list[str]:
    try:
        return os.listdir(path)
    except OSError as exc:
        raise ConfigError(
            f"state_dir {root}: cannot read {path} ({exc.strerror or exc}); nothing was changed"
        ) from exc


def _atomic_write(
    directory: Path, path: Path, data: bytes, root: Path, *, replace: bool = True
) -> None:
    """Write ``path`` (in ``directory``) atomically and durably; with ``replace=False``
    an existing ``path`` is kept as it is (its inode too: the root marker is a lock).

    :raises ConfigError: when the directory cannot be written.
    """
    tmp = directory / f".{path.name.lstrip('.')}.{os.getpid()}.tmp"
    try:
        try:
            fd = os.open(tmp, _CREATE, 0o600)
        except FileExistsError:
            tmp.unlink()  # left by a crashed call that had this pid: kata-mem's own name
            fd = os.open(tmp, _CREATE, 0o600)
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
        raise ConfigError(
            f"state_dir {root}: cannot write {path} ({exc.strerror or exc}); "
            f"kata-mem cannot write the sandbox state there. {_WHAT_TO_DO}"
        ) from exc


def state_dir_state(state_dir: str | Path) -> DirState:
    """Whether the state directory is absent, empty, or kata-mem's. Reads only.

    :raises ConfigError: it is not a directory, it has content and no marker, or it
        (its marker, a directory above it) could have been written by another user.
    """
    root = Path(state_dir)
    for _ in range(3):
        check_way(root, f"state_dir {root}", "the state directory")
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            if os.path.lexists(root):
                raise ConfigError(
                    f"state_dir {root}: is a symlink to nothing; nothing was changed. {_WHAT_TO_DO}"
                ) from exc
            return "absent"
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and os.path.exists(root):
                raise ConfigError(
                    f"state_dir {root}: is not a directory; kata-mem cannot write the sandbox "
                    f"state there, and nothing was changed. {_WHAT_TO_DO}"
                ) from exc
            raise ConfigError(
                f"state_dir {root}: cannot use it ({exc.strerror or exc}); nothing was changed. "
                f"{_WHAT_TO_DO}"
            ) from exc
        try:
            found = _root_state(root, fd)
        finally:
            os.close(fd)
        if found is not None:
            return found
    raise ConfigError(f"state_dir {root}: changed while kata-mem looked at it; try again")


def _root_state(root: Path, fd: int) -> Optional[DirState]:
    """:func:`state_dir_state` of the directory open as ``fd``; None: look again."""
    info = os.fstat(fd)
    if _others_could_write(info):
        raise _refusal(root, root, info)
    try:
        names = os.listdir(fd)
    except OSError as exc:
        raise ConfigError(
            f"state_dir {root}: cannot read it ({exc.strerror or exc}); nothing was changed"
        ) from exc
    if STATE_MARKER in names:
        # The marker appears by an atomic link and is never removed: once listed, it is whole.
        mark = _marker(fd, root, STATE_MARKER, STATE_DIR_SCHEMA, root)
        if mark == "ok":
            return "ours"
        if mark == "missing":
            return None  # removed while we looked (by hand): look again
    elif not [n for n in names if not (_TEMP.fullmatch(n) or n in SERVICE_ENTRIES)]:
        return "empty"
    raise ConfigError(
        f"state_dir {root}: is a directory that kata-mem did not create (it has no valid "
        f"{STATE_MARKER} marker) and it is not empty; nothing in it was read or changed. "
        f"{_WHAT_TO_DO}"
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

    :raises ConfigError: as :func:`state_dir_state`, or it cannot be written.
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
                raise ConfigError(
                    f"state_dir {root}: cannot create it ({exc.strerror or exc}); nothing was "
                    f"changed. {_WHAT_TO_DO}"
                ) from exc
            continue  # and check what was made before writing in it
        doc = {
            "schema": STATE_DIR_SCHEMA,
            "note": "kata-mem state; only subdirectories with a .kata-mem-sandbox marker are kata-mem's",
        }
        data = json.dumps(doc).encode() + b"\n"
        _atomic_write(root, root / STATE_MARKER, data, root, replace=False)
        return
    raise ConfigError(f"state_dir {root}: changed while kata-mem set it up; try again")


@contextlib.contextmanager
def _root_lock(root: Path, shared: bool = False) -> Iterator[None]:
    """Serialize making and removing sandbox directories (a flock on the root marker).

    Held only for those few file operations, never while waiting for a sandbox lock.
    """
    try:
        fd = os.open(root / STATE_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(
            f"state_dir {root}: cannot open {STATE_MARKER} ({exc.strerror or exc}); "
            f"nothing was changed. {_WHAT_TO_DO}"
        ) from exc
    try:
        info = os.fstat(fd)
        if _others_could_write(info):  # replaced since state_dir_state read it
            raise _refusal(root, root / STATE_MARKER, info)
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def node_admission(state_dir: str | Path) -> Iterator[Callable[[str], int]]:
    """The node-wide lock around one admission decision: read the other sandboxes'
    commitments (the function it yields: bytes held by all but the named one), decide,
    record this one's, so that two grows at the same moment cannot both take the last
    free MiB. Held for a few file reads and one write; a state directory that is not
    kata-mem's yet has no commitments, nor has a sandbox directory it refuses to read.
    """
    root = Path(state_dir)
    if state_dir_state(root) != "ours":
        yield lambda _but: 0
        return
    with _root_lock(root):  # also keeps sandbox directories from coming and going
        yield lambda but: sum(
            commitment(SandboxState(root, name).load(read_only=True))
            for name in _sandboxes(root).sandboxes
            if name != but
        )


def commitment(record: Record) -> int:
    """Bytes a sandbox holds or is growing to: the larger of its observed size and
    the target of a grow in flight."""
    return max(record.observed_mib or 0, record.target_mib or 0) * MiB


@dataclass(frozen=True)
class Listing:
    """The entries of a state directory: sandboxes kata-mem created, those that carry
    its marker but that another user could have written (name, why), and everything else."""

    sandboxes: list[str]
    refused: list[tuple[str, str]]
    foreign: list[str]


def list_state_dir(state_dir: str | Path) -> Listing:
    """What is in the state directory (nothing when it is absent or empty). Reads only.

    :raises ConfigError: as :func:`state_dir_state`.
    """
    root = Path(state_dir)
    if state_dir_state(root) != "ours":
        return Listing([], [], [])
    with _root_lock(root, shared=True):  # no sandbox directory half made or half removed
        return _sandboxes(root)


def _sandboxes(root: Path) -> Listing:
    ours, refused, foreign = [], [], []
    for name in sorted(_listdir(root, root)):
        if name == STATE_MARKER or name in SERVICE_ENTRIES or _TEMP.fullmatch(name):
            continue
        if SANDBOX_ID.fullmatch(name):
            try:
                if SandboxState(root, name).owned():
                    ours.append(name)
                    continue
            except ConfigError as exc:
                refused.append((name, exc.message))
                continue
        foreign.append(name)
    return Listing(ours, refused, foreign)


# -- one sandbox ------------------------------------------------------------------------------

SandboxDir = Literal["absent", "empty", "ours", "foreign", "changed", "refused"]


class SandboxState:
    """The lock and record of one sandbox."""

    def __init__(self, state_dir: str | Path, sandbox: str) -> None:
        self.root = Path(state_dir)
        self.sandbox = check_sandbox_id(sandbox)
        self.dir = self.root / sandbox
        self.path = self.dir / "journal.json"
        self.notes: list[Note] = []
        #: Why the sandbox directory may not be used (another user could have written it).
        self.refusal = ""

    def _dir_state(self) -> SandboxDir:
        """What the sandbox directory is. ``refused``: it carries kata-mem's marker, but
        it, the marker or one of kata-mem's files in it could have been written by
        another user; an empty directory others can write is ``foreign``. Either way
        :attr:`refusal` says why."""
        self.refusal = ""
        try:
            # A symlink is not followed: kata-mem makes real directories.
            fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return "absent"
        except OSError:
            return "foreign"
        try:
            found = self._look(fd)
            # Moved away while we looked (a concurrent removal): look again.
            return found if _same_file(fd, self.dir) else "changed"
        finally:
            os.close(fd)

    def _look(self, fd: int) -> SandboxDir:
        info = os.fstat(fd)
        try:
            names = os.listdir(fd)
        except OSError:
            return "foreign"
        if SANDBOX_MARKER not in names:
            if [n for n in names if not _TEMP.fullmatch(n)]:
                return "foreign"
            if _others_could_write(info):
                self.refusal = _refusal(self.root, self.dir, info).message
                return "foreign"
            return "empty"
        if _others_could_write(info):
            self.refusal = _refusal(self.root, self.dir, info).message
            return "refused"
        try:
            mark = _marker(
                fd, self.dir, SANDBOX_MARKER, SANDBOX_DIR_SCHEMA, self.root, self.sandbox
            )
        except ConfigError as exc:
            self.refusal = exc.message
            return "refused"
        if mark != "ok":
            return "changed" if mark == "missing" else "foreign"
        for name in sorted(set(names).intersection(_OWN_FILES)):
            try:
                entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if _others_could_write(entry):
                self.refusal = _refusal(self.root, self.dir / name, entry).message
                return "refused"
        return "ours"

    def owned(self) -> bool:
        """Whether the sandbox directory exists and kata-mem created it. Reads only.

        :raises ConfigError: it carries kata-mem's marker, but another user could have
            written it, its marker or one of its files.
        """
        found = self._dir_state()
        if found == "refused":
            raise ConfigError(self.refusal)
        return found == "ours"

    def _ensure_dir(self) -> None:
        """Make the sandbox directory (or adopt an empty one, left by a crash), marked as
        kata-mem's. Call it with the root lock held.

        :raises ConfigError: it is someone else's or cannot be written; nothing was changed.
        """
        found = self._dir_state()
        if found == "ours":
            return
        if self.refusal:
            raise ConfigError(self.refusal)
        if found not in {"absent", "empty"}:
            raise ConfigError(
                f"state_dir {self.root}: {self.dir} exists but kata-mem did not create it "
                f"(no valid {SANDBOX_MARKER} marker); nothing in it was read or changed. "
                "Move it away, or use another sandbox id or state_dir"
            )
        if found == "absent":
            try:
                self.dir.mkdir(mode=0o700)
            except OSError as exc:
                raise ConfigError(
                    f"state_dir {self.root}: cannot write the sandbox state ({exc.strerror or exc}); "
                    f"nothing was changed. {_WHAT_TO_DO}"
                ) from exc
            with contextlib.suppress(OSError):
                os.chmod(self.dir, 0o700)
        doc = {"schema": SANDBOX_DIR_SCHEMA, "sandbox": self.sandbox}
        _atomic_write(self.dir, self.dir / SANDBOX_MARKER, json.dumps(doc).encode(), self.root)

    def _probe(self) -> None:
        """Fail before anything is changed when the sandbox directory is not writable."""
        probe = self.dir / f".probe.{os.getpid()}.tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                probe.unlink()  # left by a crashed call that had this pid
            os.close(os.open(probe, _CREATE, 0o600))
            probe.unlink()
        except OSError as exc:
            raise ConfigError(
                f"state_dir {self.root}: cannot write the sandbox state ({exc.strerror or exc}); "
                f"nothing was changed. {_WHAT_TO_DO}"
            ) from exc

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
            raise ConfigError(
                f"state_dir {self.root}: cannot write the sandbox state "
                f"({exc.strerror or exc}); nothing was changed. {_WHAT_TO_DO}"
            ) from exc
        info = os.fstat(fd)
        if _others_could_write(info) or not stat.S_ISREG(info.st_mode):
            os.close(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ConfigError(
                    f"state_dir {self.root}: {lock} is not a regular file, so kata-mem did not "
                    "make it; nothing was changed. Move it away"
                )
            raise _refusal(self.root, lock, info)
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
            with _root_lock(self.root):
                self._ensure_dir()
                fd = self._open_lock()
            try:
                got = _flock(fd, deadline)
                # Removed (and maybe made anew) while we waited: the lock is the file at the path.
                if got and _same_file(fd, self.dir / "lock"):
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
            fd = os.open(self.path, _READ)
        except FileNotFoundError:
            return Record(self.sandbox)
        except OSError as exc:
            self._warn("journal", f"journal {self.path} cannot be read ({_why(exc)}); {then}")
            return Record(self.sandbox)
        try:
            info = os.fstat(fd)
            if _others_could_write(info):
                raise _refusal(self.root, self.path, info)
            try:
                raw = read_open(fd, self.path, cap=STATE_CAP, what="journal", error=ConfigError)
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

    def save(self, record: Record) -> None:
        """Write ``record`` atomically and durably. Call it with the lock held.

        :raises ConfigError: when the state directory cannot be written.
        """
        record.updated_at = time.time()
        _atomic_write(
            self.dir, self.path, json.dumps(record.to_json(), indent=1).encode(), self.root
        )

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
        raw = self._read_request()
        if raw is None:
            return None
        try:
            saved = SandboxRequest.from_json(raw)
        except InputError as exc:
            raise InputError(f"{self.request_path}: {exc.message}") from exc
        if saved.sandbox != self.sandbox:
            raise ConfigError(
                f"{self.request_path}: is for sandbox {saved.sandbox!r}, not {self.sandbox!r}; "
                f"remove {self.dir} once its VM is gone"
            )
        return saved

    def _read_request(self) -> Optional[bytes]:
        """The last request's bytes, or None when there is none. Reads only.

        :raises ConfigError: it cannot be read, is not a regular file, is too large, or
            another user could have written it (it is not read).
        """
        try:
            fd = os.open(self.request_path, _READ)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(
                f"{self.request_path}: cannot read the saved request: {_why(exc)}"
            ) from exc
        try:
            info = os.fstat(fd)
            if _others_could_write(info):
                raise _refusal(self.root, self.request_path, info)
            return read_open(
                fd, self.request_path, cap=STATE_CAP, what="saved request", error=ConfigError
            )
        finally:
            os.close(fd)

    def save_request(self, doc: dict[str, Any]) -> None:
        """Write the last request atomically. Call it with the lock held.

        :raises ConfigError: when the state directory cannot be written.
        """
        _atomic_write(self.dir, self.request_path, json.dumps(doc, indent=1).encode(), self.root)

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
        if found == "refused":
            raise ConfigError(self.refusal)
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
        names = set(_listdir(self.dir, self.root))
        removable = {n for n in names if (n in _OWN_FILES or _TEMP.fullmatch(n))}
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
            with _root_lock(self.root):
                os.rename(self.dir, away)
        except OSError as exc:
            self._warn("state", f"{self.dir}: could not be removed ({exc.strerror or exc})")
            return
        for name in os.listdir(away):
            if (name in ("lock", SANDBOX_MARKER) or _TEMP.fullmatch(name)) and _is_file(
                away / name
            ):
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


def _flock(fd: int, deadline: float) -> bool:
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


def _same_file(fd: int, path: Path) -> bool:
    held = os.fstat(fd)
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    return (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino)
