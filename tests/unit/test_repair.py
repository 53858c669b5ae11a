"""Crash repair (kata_mem.orchestration.repair) on the fake backend: an orphaned backend object is
deleted by a step that is journaled like any other, so a crash during the repair is
itself repaired by the next call."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kata_mem.backends.fake import FakeBackend, VirtualTime
from kata_mem.core.errors import BackendUnavailable
from kata_mem.core.model import (
    BackendObject,
    Container,
    HostFacts,
    MemoryDevice,
    OwnedDevice,
    SizingConfig,
    Step,
    VmState,
    Workload,
)
from kata_mem.core.record import Record
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, Result, run_locked

HOST = HostFacts(memory=16 * GiB, cpus=4, arch="amd64")
REQUEST = Workload((Container("c", 256 * MiB),))


class JournalingFake(FakeBackend):
    """Records the journal as it stood when each command was sent; can lose the
    connection on one action, as a VM that dies would."""

    journal: Path
    seen: list[dict[str, Any]]
    lose_on: str = ""

    def begin(self, step: Step) -> None:
        self.seen.append(json.loads(self.journal.read_text()))
        if step.action == self.lose_on:
            raise BackendUnavailable("QMP socket x: connection lost during object-del")
        super().begin(step)


@pytest.fixture
def cfg(make_config: Callable[..., SizingConfig]) -> SizingConfig:
    return make_config(default_memory=512, default_maxmemory=8192)


def record_owning(state_dir: Path, *owned: OwnedDevice) -> None:
    """A journal that records ``owned`` as devices kata-mem created (as an earlier call would)."""
    state = SandboxState(state_dir, "sb")
    with state.locked(0):
        state.save(Record("sb", owned=owned))


@pytest.fixture
def backend(tmp_path: Path) -> JournalingFake:
    # kata-mem plugged kmdimm3 on kmmem3; the DIMM is gone, its backend object is left.
    left = (BackendObject("kmmem3", 128 * MiB),)
    b = JournalingFake(VmState(512 * MiB, slots=8, device_space=15 * GiB, loose=left))
    record_owning(tmp_path / "state", OwnedDevice("kmdimm3", "kmmem3", 128 * MiB, confirmed=True))
    b.journal, b.seen = tmp_path / "state" / "sb" / "journal.json", []
    return b


@pytest.fixture
def run(tmp_path: Path, cfg: SizingConfig) -> Callable[[FakeBackend], Result]:
    def go(backend: FakeBackend) -> Result:
        t = VirtualTime()
        backend.clock, backend.sleep = t.clock, t.sleep
        state = SandboxState(tmp_path / "state", "sb")
        return run_locked(state, lambda: backend, cfg, HOST, REQUEST, Options(), t.clock, t.sleep)

    return go


def test_orphan_is_deleted_by_a_journaled_step(
    backend: JournalingFake, run: Callable[[FakeBackend], Any]
) -> None:
    r = run(backend)
    assert (r.outcome.status, backend.state.loose) == ("Resized", ())
    assert (
        "reconciled: deleting orphaned backend object kmmem3 (kata-mem created it for kmdimm3, "
        "which is gone)" in [n.text for n in r.notes]
    )
    journal = json.loads(backend.journal.read_text())
    assert [o["id"] for o in journal["owned"]] == ["kmdimm0"]  # kmdimm3 is forgotten
    first = backend.seen[0]
    assert (first["state"], first["phase"], first["step"]["action"], first["step"]["device"]) == (
        "running",
        "intent",
        "delete_memdev",
        "kmmem3",
    )
    assert [c.split()[0] for c in backend.calls if not c.startswith(("observe", "poll"))] == [
        "delete_memdev",
        "plug_dimm",
    ]


def test_a_repair_cut_short_is_repaired_by_the_next_call(
    backend: JournalingFake, run: Callable[[FakeBackend], Any], tmp_path: Path
) -> None:
    backend.lose_on = "delete_memdev"
    with pytest.raises(BackendUnavailable):
        run(backend)
    journal = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
    assert (journal["state"], journal["step"]["action"]) == ("running", "delete_memdev")
    backend.lose_on = ""
    r = run(backend)
    assert r.outcome.status == "Resized" and backend.state.loose == ()
    assert "reconciled: the previous call stopped during delete_memdev kmmem3 (intent)" in [
        n.text for n in r.notes
    ]


def test_what_only_looks_like_kata_mems_is_left_alone(
    run: Callable[[FakeBackend], Any], tmp_path: Path
) -> None:
    # Named like kata-mem's, recorded nowhere: another tool's DIMM and backend object.
    foreign = MemoryDevice(
        "kmdimm3", "dimm", 256 * MiB, 256 * MiB, 256 * MiB, slot=0, memdev="foreign0"
    )
    left = (BackendObject("kmmem7", 128 * MiB),)
    vm = VmState(512 * MiB, (foreign,), slots=8, device_space=15 * GiB, loose=left)
    backend = FakeBackend(vm)
    r = run(backend)
    assert r.outcome.status == "NoChange"  # 768 MiB already: the foreign DIMM counts as plugged
    assert not [c for c in backend.calls if c.startswith(("delete_memdev", "unplug_dimm"))]
    assert backend.state.loose == left and backend.state.device("kmdimm3") is not None
    assert any(
        w.startswith("left alone: kmdimm3, kmmem7 are named like kata-mem's")
        for w in [n.text for n in r.notes]
    )
