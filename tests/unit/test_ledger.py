"""The node's ledger: admission reads one file whatever the number of
sandboxes; the ledger is rebuilt from the journals when missing, damaged or not
kata-mem's, never counts less than they do, and is mended by reconcile."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kata_mem.backends.fake import FakeBackend, VirtualTime
from kata_mem.core.frozen import replace
from kata_mem.core.model import Container, SizingConfig, VmState, Workload
from kata_mem.core.record import Record
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.journal import SandboxState
from kata_mem.edges.ledger import (
    check_ledger,
    journal_commitments,
    node_admission,
    record_commitment,
)
from kata_mem.edges.statefiles import LEDGER
from kata_mem.orchestration.executor import Options, run_locked
from kata_mem.orchestration.guards import HostSide
from tests.support.configs import HOST


def _sandboxes(state: Path, count: int, size: int = GiB) -> None:
    for n in range(count):
        sb = SandboxState(state, f"sb{n}")
        with sb.locked(5):
            sb.save(Record(sb.sandbox, observed=size))


def _ledger(state: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((state / LEDGER).read_text())
    return doc


def test_admission_reads_the_ledger_not_every_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    _sandboxes(state, 30)
    with node_admission(state, HOST.memory) as ledger:  # no ledger yet: built once
        assert ledger is not None and ledger.others("new") == 30 * GiB
    assert len(_ledger(state)["commitments"]) == 30
    loads = []
    real = SandboxState.load

    def counted(self: SandboxState, **kwargs: Any) -> Record:
        loads.append(self.sandbox)
        return real(self, **kwargs)

    monkeypatch.setattr(SandboxState, "load", counted)
    with node_admission(state, HOST.memory) as ledger:
        assert ledger is not None and ledger.others("sb0") == 29 * GiB
    assert loads == []  # one file read, whatever the number of sandboxes


@pytest.mark.parametrize(
    "damage",
    [
        "missing",
        "not json",
        "wrong schema",
        "negative",
        "above the host",
        "a bool",
        "a float",
        "not a sandbox id",
        "group-writable",
    ],
)
def test_a_ledger_that_cannot_be_used_is_rebuilt_from_the_journals(
    tmp_path: Path, damage: str
) -> None:
    state = tmp_path / "state"
    _sandboxes(state, 3)
    with node_admission(state, HOST.memory):
        pass
    path = state / LEDGER
    good = _ledger(state)
    if damage == "missing":
        path.unlink()
    elif damage == "not json":
        path.write_text("{")
    elif damage == "wrong schema":
        path.write_text(json.dumps({**good, "schema": "something/else"}))
    elif damage == "negative":
        path.write_text(json.dumps({**good, "commitments": {"sb0": -1}}))
    elif damage == "above the host":
        path.write_text(json.dumps({**good, "commitments": {"sb0": HOST.memory + 1}}))
    elif damage in ("a bool", "a float", "not a sandbox id"):
        # Each one entry among good ones: every entry is checked, not only the first.
        entries = dict(good["commitments"])
        if damage == "not a sandbox id":
            entries["../sb0"] = entries.pop("sb0")
        else:
            entries["sb0"] = True if damage == "a bool" else float(entries["sb0"])
        path.write_text(json.dumps({**good, "commitments": entries}))
    else:
        os.chmod(path, 0o660)
    with node_admission(state, HOST.memory) as ledger:
        assert ledger is not None and ledger.others("new") == 3 * GiB
        assert bool(ledger.notes) == (damage != "missing")
    assert _ledger(state) == good
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_a_grow_is_in_the_ledger_before_its_journal_and_settles_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = SandboxState(tmp_path / "state", "sb")
    fake = FakeBackend(VmState(base=512 * MiB, slots=4, device_space=8 * GiB))
    time = VirtualTime()
    fake.clock, fake.sleep = time.clock, time.sleep
    seen: list[tuple[str, Any, Any]] = []
    real_save = SandboxState.save

    def save(self: SandboxState, record: Record) -> Record:
        path = self.root / LEDGER
        ledger = json.loads(path.read_text())["commitments"] if path.exists() else {}
        seen.append((record.state, record.target, ledger.get("sb")))
        return real_save(self, record)

    monkeypatch.setattr(SandboxState, "save", save)
    workload = Workload((Container("c", memory_limit=GiB),))
    result = run_locked(
        state, lambda: fake, _mk(tmp_path), HOST, workload, Options(), time.clock, time.sleep
    )
    assert result.outcome.status == "Resized"
    # Each journal write that records the grow's target found the ledger counting it already.
    admitted = [ledger for _, target, ledger in seen if target is not None]
    assert admitted and all(ledger == 1536 * MiB for ledger in admitted)
    assert _ledger(state.root)["commitments"] == {"sb": 1536 * MiB}


def _mk(tmp_path: Path) -> SizingConfig:
    from kata_mem.edges.config import load_config
    from tests.support.configs import write_config

    return load_config(
        write_config(
            tmp_path / "c.toml",
            {"default_memory": 512, "memory_slots": 4},
            kata_mem={"node_overcommit": 1.0},
        )
    )


def test_forgetting_a_sandbox_takes_it_out_of_the_ledger(tmp_path: Path) -> None:
    # The shim's delete forgets the sandbox, and releases its entry once its journal is gone.
    from kata_mem.orchestration.handle import forget

    state = tmp_path / "state"
    _sandboxes(state, 2)
    assert check_ledger(state, HOST.memory) == []  # none yet: nothing to mend, none made
    assert not (state / LEDGER).exists()
    with node_admission(state, HOST.memory):  # made from the journals
        pass
    assert forget("sb0", str(state)) == ()
    assert not (state / "sb0").exists()
    assert _ledger(state)["commitments"] == {"sb1": GiB}
    # Removing the directory alone leaves the entry: its release is the forgetter's.
    assert SandboxState(state, "sb1").remove(5) == "removed"
    assert _ledger(state)["commitments"] == {"sb1": GiB}


def test_reconcile_forgetting_a_sandbox_takes_it_out_of_the_ledger(tmp_path: Path) -> None:
    # Its journal gone (by hand) and no request saved: reconcile forgets it, and its entry.
    from kata_mem.orchestration.reconcile import visit

    state = tmp_path / "state"
    _sandboxes(state, 2)
    with node_admission(state, HOST.memory):
        pass
    (state / "sb0" / "journal.json").unlink()
    done = visit(str(state), "sb0", {})
    assert done.action == "cleaned", done
    assert _ledger(state)["commitments"] == {"sb1": GiB}


def test_reconcile_mends_a_ledger_that_counts_too_much(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _sandboxes(state, 2)
    with node_admission(state, HOST.memory):
        pass
    # What a crash between the ledger's write and the journal's leaves: more, never less.
    doc = _ledger(state)
    doc["commitments"]["sb0"] = 4 * GiB
    doc["commitments"]["gone"] = GiB
    (state / LEDGER).write_text(json.dumps(doc))
    notes = check_ledger(state, HOST.memory)
    assert [n.code for n in notes] == ["journal"]
    assert "gone, sb0" in notes[0].text
    assert _ledger(state)["commitments"] == {"sb0": GiB, "sb1": GiB}
    assert journal_commitments(state, HOST.memory) == {"sb0": GiB, "sb1": GiB}


def test_without_a_budget_no_ledger_is_made_but_one_that_exists_is_kept(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _sandboxes(state, 2)
    with node_admission(state, HOST.memory, budget=False) as ledger:
        assert ledger is not None
        ledger.record("sb0", 2 * GiB)
    assert not (state / LEDGER).exists()  # no budget needs it: nothing is written
    with node_admission(state, HOST.memory, budget=True):
        pass  # a budget: made from the journals
    record_commitment(state, "sb0", 3 * GiB, HOST.memory)
    assert _ledger(state)["commitments"] == {"sb0": 3 * GiB, "sb1": GiB}


def _two_sandboxes(tmp_path: Path) -> tuple[SandboxState, FakeBackend, VirtualTime, SizingConfig]:
    """``other`` holds 1536 MiB, recorded in the ledger by its journal; ``sb`` a VM at its
    boot size, under a budget of the host's memory (``node_overcommit = 1.0``)."""
    state = SandboxState(tmp_path / "state", "sb")
    other = SandboxState(state.root, "other")
    with other.locked(5):
        other.save(Record("other", observed=1536 * MiB))
    fake = FakeBackend(VmState(base=512 * MiB, slots=4, device_space=8 * GiB))
    time = VirtualTime()
    fake.clock, fake.sleep = time.clock, time.sleep
    from kata_mem.edges.config import load_config
    from tests.support.configs import write_config

    cfg = load_config(
        write_config(
            tmp_path / "c.toml",
            {"default_memory": 512, "memory_slots": 4},
            kata_mem={"node_overcommit": 1.0, "node_reserved_mib": 0},
        )
    )
    return state, fake, time, cfg


def test_an_apply_trusts_no_ledger_that_counts_less_than_its_own_journal(tmp_path: Path) -> None:
    """A ledger restored from a backup or edited: the apply's own entry is below the
    journal it has just read, which no crash leaves, so no entry is trusted and the ledger
    is rebuilt from the journals, with a note, before the budget is decided."""
    state, fake, time, cfg = _two_sandboxes(tmp_path)
    host = replace(HOST, memory=3 * GiB)
    workload = Workload((Container("c", memory_limit=GiB),))
    first = run_locked(state, lambda: fake, cfg, host, workload, Options(), time.clock, time.sleep)
    assert first.outcome.status == "Resized"
    held = _ledger(state.root)["commitments"]
    assert held == {"other": 1536 * MiB, "sb": 1536 * MiB}
    (state.root / LEDGER).write_text(
        json.dumps({"schema": "kata-mem/ledger/v1", "commitments": {"other": 1, "sb": 1}})
    )
    # The grow nb asks for now fits only if the other sandbox's 1536 MiB are forgotten.
    bigger = Workload((Container("c", memory_limit=3 * GiB),))
    guards = HostSide(cfg, host)
    again = run_locked(
        state, lambda: fake, cfg, host, bigger, Options(), time.clock, time.sleep, None, guards
    )
    assert again.outcome.status == "NoChange", again.outcome
    assert fake.state.total == 1536 * MiB
    texts = [n.text for n in again.notes]
    assert any(
        "the node ledger counts 0.01 MiB for sb, whose journal holds 1536 MiB" in t
        and "rebuilt from the journals" in t
        for t in texts
    ), texts
    assert _ledger(state.root)["commitments"] == held


def test_an_apply_mends_its_own_entry_that_counts_more_than_its_journal(tmp_path: Path) -> None:
    """What a crash between the ledger's write and the journal's leaves: the sandbox's next
    apply brings its own entry back to its journal, without a note (it is the cautious side)."""
    state, fake, time, cfg = _two_sandboxes(tmp_path)
    workload = Workload((Container("c", memory_limit=GiB),))
    run_locked(state, lambda: fake, cfg, HOST, workload, Options(), time.clock, time.sleep)
    doc = _ledger(state.root)
    doc["commitments"]["sb"] = 3 * GiB
    (state.root / LEDGER).write_text(json.dumps(doc))
    again = run_locked(state, lambda: fake, cfg, HOST, workload, Options(), time.clock, time.sleep)
    assert again.outcome.status == "NoChange"
    assert not [n for n in again.notes if "ledger" in n.text]
    assert _ledger(state.root)["commitments"] == {"other": 1536 * MiB, "sb": 1536 * MiB}


def test_an_apply_says_so_when_it_rebuilds_a_damaged_ledger(tmp_path: Path) -> None:
    """The documented note ("rebuilt from the journals") reaches the apply's answer, not
    only reconcile's log (a negative entry was once rebuilt silently)."""
    state, fake, time, cfg = _two_sandboxes(tmp_path)
    workload = Workload((Container("c", memory_limit=GiB),))
    run_locked(state, lambda: fake, cfg, HOST, workload, Options(), time.clock, time.sleep)
    (state.root / LEDGER).write_text(
        json.dumps({"schema": "kata-mem/ledger/v1", "commitments": {"other": -5}})
    )
    again = run_locked(state, lambda: fake, cfg, HOST, workload, Options(), time.clock, time.sleep)
    assert [n.text for n in again.notes if "ledger" in n.text] == [
        'the node ledger is damaged (entry "other": -5 is a negative size); rebuilt from the '
        "journals"
    ]


def test_an_apply_that_agrees_with_the_ledger_reads_only_its_own_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holding the entry to the journal costs no read of the other sandboxes' journals:
    admission stays one file read whatever the number of sandboxes."""
    state, fake, time, cfg = _two_sandboxes(tmp_path)
    _sandboxes(state.root, 30)
    workload = Workload((Container("c", memory_limit=GiB),))
    guards = HostSide(cfg, HOST)
    run_locked(
        state, lambda: fake, cfg, HOST, workload, Options(), time.clock, time.sleep, None, guards
    )
    loads = []
    real = SandboxState.load

    def counted(self: SandboxState, **kwargs: Any) -> Record:
        loads.append(self.sandbox)
        return real(self, **kwargs)

    monkeypatch.setattr(SandboxState, "load", counted)
    again = run_locked(
        state, lambda: fake, cfg, HOST, workload, Options(), time.clock, time.sleep, None, guards
    )
    assert again.outcome.status == "NoChange"
    assert set(loads) == {"sb"}


def test_an_admitted_grow_is_told_the_hosts_memavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor reads MemAvailable at the edge and hands it to the guards: a grow larger
    than what the host has free now is admitted with a warning that says so."""
    from kata_mem.orchestration import executor

    monkeypatch.setattr(executor, "mem_available", lambda: 700 * MiB)
    state, fake, time, cfg = _two_sandboxes(tmp_path)
    workload = Workload((Container("c", memory_limit=GiB),))
    done = run_locked(
        state,
        lambda: fake,
        cfg,
        HOST,
        workload,
        Options(),
        time.clock,
        time.sleep,
        None,
        HostSide(cfg, HOST),
    )
    node = done.plan.memory.node
    assert node is not None and node.available == 700 * MiB
    assert any("700 MiB now" in n.text for n in done.plan.notes), done.plan.notes


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ({"schema": "other"}, "is damaged (not a kata-mem ledger)"),
        ({"schema": "kata-mem/ledger/v1", "commitments": [1]}, "is damaged (not a kata-mem"),
        ({"commitments": {"a": -5}}, 'is damaged (entry "a": -5 is a negative size)'),
        ({"commitments": {"a": 1.5}}, 'is damaged (entry "a": 1.5 is not a size in bytes)'),
        ({"commitments": {"a": True}}, 'is damaged (entry "a": true is not a size in bytes)'),
        ({"commitments": {"a": 1 << 64}}, f'is damaged (entry "a": {1 << 64} is above 2^64-1'),
        ({"commitments": {"../x": 1}}, 'is damaged (entry "../x": not a sandbox id)'),
    ],
)
def test_a_damaged_ledger_says_what_is_wrong(tmp_path: Path, doc: dict[str, Any], why: str) -> None:
    # A ledger of kata-mem's schema with a negative entry was called
    # "not a kata-mem ledger".
    from kata_mem.edges.ledger import LEDGER_SCHEMA, read_ledger

    if "schema" not in doc:
        doc = {"schema": LEDGER_SCHEMA, **doc}
    (tmp_path / LEDGER).write_text(json.dumps(doc))
    entries, reason = read_ledger(tmp_path)
    assert entries is None and reason.startswith(why), reason


def test_a_corrupt_journal_is_reported_once_in_a_reconcile_pass(tmp_path: Path) -> None:
    # With the ledger damaged too, the pass read every journal twice
    # (the ledger's rebuild, then its check against the journals), each read warning.
    from kata_mem.core.record import Record
    from kata_mem.edges.ledger import LEDGER_SCHEMA
    from kata_mem.edges.statedir import ensure_state_dir
    from tests.support.cli import kata_mem_process

    root = tmp_path / "state"
    ensure_state_dir(root)
    state = SandboxState(root, "sb")
    with state.locked(5):
        state.save(Record("sb", observed=768 * MiB))
    state.path.write_text("{broken")
    (root / LEDGER).write_text(json.dumps({"schema": LEDGER_SCHEMA, "commitments": {"sb": -1}}))
    done = kata_mem_process("reconcile", "--state-dir", str(root))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(f"journal {state.path} is corrupt or truncated") == 1, done.stderr
    assert "the node ledger is damaged" in done.stderr
