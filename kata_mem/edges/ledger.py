"""The node's ledger: each managed sandbox's commitment (bytes it holds or is growing
to), in one file at the root of the state directory, ``.kata-mem-ledger`` (schema
``kata-mem/ledger/v1``). Admitting a grow against the node's budget reads this one file,
so it costs the same at a thousand sandboxes as at one, where reading every journal cost
~0.2 ms a sandbox (docs/benchmarks.md, "Node ledger": ``scripts/bench_ledger.py``).

The journals stay the truth; the ledger is kept from them under the node lock
(:func:`kata_mem.edges.statedir.node_lock`) and is never lower than they are: a
commitment that grows is written here before the journal, one that falls after it, so a
crash leaves it counting too much, never too little. A ledger that is missing, damaged or
could have been written by another user is rebuilt from the journals
(:class:`kata_mem.edges.journal.NodeLedger`), and ``kata-mem reconcile`` checks it against
them. This module reads and writes the file; it decides nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from kata_mem.core.errors import ConfigError, KataMemError
from kata_mem.core.model import SANDBOX_ID
from kata_mem.edges.files import STATE_CAP, read_open
from kata_mem.edges.ownership import others_could_write
from kata_mem.edges.statedir import LEDGER, READ, atomic_write, refusal

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
