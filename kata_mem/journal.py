"""Per-sandbox state: a lock that serializes calls, and an intent record.

Layout under the state directory (mode 0700, files 0600)::

    <state_dir>/<sandbox>/lock           flock(2): one resize of a sandbox at a time
    <state_dir>/<sandbox>/journal.json   the intent record (schema kata-mem/journal/v1)

The record is written atomically (temp file, fsync, rename, fsync of the
directory) *before* every hypervisor command and again with the observed result
after it. It is a hint for recovery, never the truth about what is plugged: the
hypervisor is. A missing, truncated or corrupt record is therefore replaced by
what the hypervisor reports, with a warning, and nothing is lost.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kata_mem.errors import ConfigError
from kata_mem.model import SANDBOX_ID, check_sandbox_id

JOURNAL_SCHEMA = "kata-mem/journal/v1"
#: How long a second call for the same sandbox waits for the first to finish.
LOCK_WAIT_S = 120.0


@dataclass
class Record:
    """The intent record. ``phase`` of the step in flight: intent | issued | done."""

    sandbox: str
    state: str = "idle"
    step: Optional[dict[str, Any]] = None
    phase: str = ""
    pending_unplug: list[str] = field(default_factory=list)
    observed_mib: Optional[int] = None
    deferred: Optional[dict[str, Any]] = None
    last_outcome: Optional[dict[str, Any]] = None
    backend: Optional[dict[str, Any]] = None
    updated_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": JOURNAL_SCHEMA,
            "sandbox": self.sandbox,
            "state": self.state,
            "step": self.step,
            "phase": self.phase,
            "pending_unplug": sorted(set(self.pending_unplug)),
            "observed_mib": self.observed_mib,
            "deferred": self.deferred,
            "last_outcome": self.last_outcome,
            "backend": self.backend,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_json(cls, sandbox: str, doc: Any) -> Record:
        """:raises ValueError: on any shape the writer would not produce."""
        if not isinstance(doc, dict) or doc.get("schema") != JOURNAL_SCHEMA:
            raise ValueError("not a kata-mem journal")
        pending = doc.get("pending_unplug") or []
        if not isinstance(pending, list) or not all(isinstance(p, str) for p in pending):
            raise ValueError("pending_unplug is not a list of ids")
        step = doc.get("step")
        if step is not None and not isinstance(step, dict):
            raise ValueError("step is not an object")
        return cls(
            sandbox=sandbox,
            state=str(doc.get("state", "idle")),
            step=step,
            phase=str(doc.get("phase", "")),
            pending_unplug=list(pending),
            observed_mib=doc.get("observed_mib")
            if isinstance(doc.get("observed_mib"), int)
            else None,
            deferred=doc.get("deferred") if isinstance(doc.get("deferred"), dict) else None,
            last_outcome=doc.get("last_outcome")
            if isinstance(doc.get("last_outcome"), dict)
            else None,
            backend=doc.get("backend") if isinstance(doc.get("backend"), dict) else None,
            updated_at=float(doc.get("updated_at", 0.0)),
        )


class SandboxState:
    """The lock and record of one sandbox."""

    def __init__(self, state_dir: str | Path, sandbox: str) -> None:
        self.root = Path(state_dir)
        self.sandbox = check_sandbox_id(sandbox)
        self.dir = self.root / sandbox
        self.path = self.dir / "journal.json"
        self.warnings: list[str] = []

    def _ensure_dir(self) -> None:
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.dir.mkdir(mode=0o700, exist_ok=True)
            os.chmod(self.dir, 0o700)
            probe = self.dir / f".probe.{os.getpid()}"
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.close(fd)
            probe.unlink()
        except OSError as exc:
            raise ConfigError(
                f"state_dir {self.root}: cannot write the sandbox state ({exc.strerror or exc}); "
                "nothing was changed. Set [kata_mem] state_dir or --state-dir to a writable directory"
            ) from None

    @contextlib.contextmanager
    def locked(self, wait_s: float) -> Iterator[bool]:
        """Hold the sandbox lock; yields False if it could not be had within ``wait_s``."""
        self._ensure_dir()
        fd = os.open(self.dir / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.05)
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def load(self) -> Record:
        """The record, or a fresh one (with a warning) when it is missing or unreadable."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return Record(self.sandbox)
        except OSError as exc:
            self._warn(
                f"journal {self.path} unreadable ({exc.strerror}); rebuilt from the hypervisor"
            )
            return Record(self.sandbox)
        try:
            return Record.from_json(self.sandbox, json.loads(text))
        except (ValueError, TypeError) as exc:
            self._warn(
                f"journal {self.path} is corrupt or truncated ({exc}); rebuilt from the hypervisor"
            )
            return Record(self.sandbox)

    def save(self, record: Record) -> None:
        """Write ``record`` atomically and durably.

        :raises ConfigError: when the state directory cannot be written.
        """
        record.updated_at = time.time()
        self._atomic_write(self.path, json.dumps(record.to_json(), indent=1).encode())

    def _atomic_write(self, path: Path, data: bytes) -> None:
        tmp = self.dir / f".{path.name}.{os.getpid()}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            dfd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise ConfigError(
                f"state_dir {self.root}: cannot write {path} ({exc.strerror or exc})"
            ) from None

    @property
    def request_path(self) -> Path:
        """The last request applied to this sandbox (a shim request), for ``kata-mem reconcile``."""
        return self.dir / "request.json"

    def save_request(self, doc: dict[str, Any]) -> None:
        """Write the last request atomically.

        :raises ConfigError: when the state directory cannot be written.
        """
        self._atomic_write(self.request_path, json.dumps(doc, indent=1).encode())

    def remove(self) -> bool:
        """Forget the sandbox (it is gone): delete its state under the lock. False if it had none."""
        if not self.dir.is_dir():
            return False
        with self.locked(LOCK_WAIT_S):
            for name in ("journal.json", "request.json", "lock"):
                (self.dir / name).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.dir.rmdir()
        return True

    def _warn(self, text: str) -> None:
        from kata_mem.logs import get_logger

        get_logger(__name__).warning("%s", text)
        self.warnings.append(text)


def sandboxes(state_dir: str | Path) -> list[str]:
    """The sandbox ids that have state under ``state_dir``."""
    root = Path(state_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and SANDBOX_ID.fullmatch(p.name))
