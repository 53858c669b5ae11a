"""The node's ledger: each managed sandbox's commitment (bytes it holds or is growing
to), in one file at the root of the state directory, ``.kata-mem-ledger`` (schema
``kata-mem/ledger/v1``). Admitting a grow against the node's budget reads this one file,
so it costs the same at a thousand sandboxes as at one, where reading every journal cost
~0.2 ms a sandbox (docs/benchmarks.md, "Node ledger": ``scripts/bench_ledger.py``).

The journals stay the truth; the ledger is kept from them under the node lock
(:func:`kata_mem.edges.statedir.node_lock`) and is never lower than they are: a
commitment that grows is written here before the journal, one that falls after it, so a
crash leaves it counting too much, never too little. A ledger that is missing, damaged or
could have been written by another user is rebuilt from the journals (:class:`NodeLedger`),
and ``kata-mem reconcile`` checks it against them (:func:`check_ledger`). Whoever forgets a
sandbox releases its entry once its journal is gone (:func:`release`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

from kata_mem.core.errors import ConfigError, KataMemError
from kata_mem.core.model import SANDBOX_ID, Note
from kata_mem.core.units import fmt_bytes
from kata_mem.edges.files import STATE_CAP, read_open
from kata_mem.edges.journal import SandboxState
from kata_mem.edges.logs import get_logger
from kata_mem.edges.ownership import others_could_write
from kata_mem.edges.statedir import node_lock, sandboxes, state_dir_state
from kata_mem.edges.statefiles import LEDGER, READ, atomic_write, refusal

LEDGER_SCHEMA = "kata-mem/ledger/v1"
#: Sizes in bytes are what QEMU takes: unsigned 64-bit.
_SIZE_LIMIT = 1 << 64


def read_ledger(root: Path) -> tuple[Optional[dict[str, int]], str]:
    """The ledger's commitments by sandbox, or ``None`` with why it cannot be used (it is
    missing, damaged, or another user could have written it): the caller rebuilds it.
    Call it with the node lock held."""
    path = root / LEDGER
    try:
        fd = os.open(path, READ)
    except FileNotFoundError:
        return None, "missing"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"
    try:
        info = os.fstat(fd)
        if others_could_write(info):
            return (
                None,
                f"could have been written by another user ({refusal(root, path, info).message})",
            )
        try:
            doc = json.loads(
                read_open(fd, info, path, cap=STATE_CAP, what="ledger", error=ConfigError)
            )
        except RecursionError:
            return None, "is damaged (nested too deeply)"
        except (KataMemError, ValueError) as exc:
            return None, f"is damaged ({exc})"
    finally:
        os.close(fd)
    entries = doc.get("commitments") if isinstance(doc, dict) else None
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != LEDGER_SCHEMA
        or not isinstance(entries, dict)
    ):
        return None, "is damaged (not a kata-mem ledger)"
    if not _valid(entries):
        return None, f"is damaged ({_invalid_entry(entries)})"
    return entries, ""


def _invalid_entry(entries: dict[Any, Any]) -> str:
    """What is wrong with the first entry :func:`_valid` refuses, in words."""
    for sandbox, size in entries.items():
        shown = json.dumps(sandbox)[:80]
        if not SANDBOX_ID.fullmatch(sandbox):
            return f"entry {shown}: not a sandbox id"
        if type(size) is not int:
            return f"entry {shown}: {json.dumps(size)[:40]} is not a size in bytes"
        if size < 0:
            return f"entry {shown}: {size} is a negative size"
        if size >= _SIZE_LIMIT:
            return f"entry {shown}: {size} is above 2^64-1 bytes"
    return "an entry is not a sandbox and its size"  # pragma: no cover - _valid refused one


def _valid(entries: dict[Any, Any]) -> bool:
    """Whether every entry is a sandbox id and a size. JSON keys are strings; the checks
    run in C (``map``, ``min``, ``max``), since the ledger is read by every admission and
    a node may hold a thousand sandboxes."""
    sizes = entries.values()
    return (
        all(map(SANDBOX_ID.fullmatch, entries))
        and set(map(type, sizes)) <= {int}  # not a bool, nor a float
        and (not entries or (min(sizes) >= 0 and max(sizes) < _SIZE_LIMIT))
    )


def write_ledger(root: Path, commitments: dict[str, int]) -> None:
    """Write the ledger atomically and durably. Call it with the node lock held.

    :raises ConfigError: the state directory cannot be written.
    """
    doc = {"schema": LEDGER_SCHEMA, "commitments": dict(sorted(commitments.items()))}
    atomic_write(root, root / LEDGER, json.dumps(doc, separators=(",", ":")).encode(), root)


# -- the node's commitments, kept from the journals -----------------------------------------


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


def release(state_dir: str | Path, sandbox: str) -> None:
    """Forget ``sandbox``'s commitment: called by whoever forgot the sandbox
    (:meth:`~kata_mem.edges.statedir.SandboxDirectory.remove`), after its journal is gone,
    so that the node's total falls only once it is. A rebuild's notes are logged, not
    added to the sandbox's: the ledger is the node's."""
    for note in record_commitment(state_dir, sandbox, None, None):
        get_logger(__name__).warning("%s", note.text)


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
