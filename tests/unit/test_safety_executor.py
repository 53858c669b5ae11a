"""The safety rule as the executor applies it, on the fake guest: readings that go stale,
major faults that rise and free memory that falls while a shrink runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kata_mem.backends.fake import FakeBackend, FakeGuest, VirtualTime
from kata_mem.core.errors import BackendError
from kata_mem.core.model import MemoryDevice, SizingConfig, Step, VmState, Workload
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from tests.support.configs import HOST

EMPTY = Workload(())


def virtio_vm(plugged_mib: int) -> VmState:
    dev = MemoryDevice(
        "vm0", "virtio-mem", plugged_mib * MiB, plugged_mib * MiB, 2048 * MiB, 2 * MiB
    )
    return VmState(512 * MiB, (dev,), slots=8, device_space=15 * GiB)


@pytest.fixture
def cfg(make_config: Callable[..., SizingConfig]) -> SizingConfig:
    return make_config(default_memory=512, default_maxmemory=8192, enable_virtio_mem=True)


@pytest.fixture
def shrink(tmp_path: Path, cfg: SizingConfig) -> Callable[[FakeBackend], Any]:
    def go(backend: FakeBackend) -> Any:
        t = VirtualTime()
        backend.clock, backend.sleep = t.clock, t.sleep
        return run_locked(
            SandboxState(tmp_path / "state", "sb"),
            lambda: backend,
            cfg,
            HOST,
            EMPTY,
            Options(allow_shrink=True),
            t.clock,
            t.sleep,
        )

    return go


def test_idle_guest_shrinks_to_boot(shrink: Callable[[FakeBackend], Any]) -> None:
    b = FakeBackend(virtio_vm(1024), FakeGuest(used=100 * MiB))
    r = shrink(b)
    assert (r.outcome.status, r.outcome.observed) == ("Resized", 512 * MiB)


def test_stale_statistics_defer(shrink: Callable[[FakeBackend], Any]) -> None:
    # The guest's balloon driver stopped updating: every reading is 30 s old.
    b = FakeBackend(virtio_vm(1024), FakeGuest(used=100 * MiB, stats_age_s=30.0))
    r = shrink(b)
    assert (r.outcome.status, r.outcome.reason) == ("Deferred", "UsageUnknown")
    assert b.state.total == 1536 * MiB


def test_tmpfs_reported_as_cache_is_not_reclaimable(shrink: Callable[[FakeBackend], Any]) -> None:
    # 900 MiB in tmpfs: the guest reports it as cache, but cannot drop it.
    b = FakeBackend(virtio_vm(1024), FakeGuest(used=1000 * MiB, unreclaimable_caches=900 * MiB))
    r = shrink(b)
    assert (r.outcome.status, r.outcome.reason) == ("Deferred", "UsageAboveTarget")
    assert b.state.total == 1536 * MiB


def test_major_faults_during_the_shrink_stop_it(shrink: Callable[[FakeBackend], Any]) -> None:
    b = FakeBackend(virtio_vm(1024), FakeGuest(used=100 * MiB))

    def refault(backend: FakeBackend, step: Step) -> None:
        backend.guest.major_faults += 2000

    b.on_poll = refault
    r = shrink(b)
    assert r.outcome.reason in ("GuestPressure", "PartialShrink"), r.outcome
    assert "major page faults" in r.outcome.message
    assert len(r.outcome.steps) == 1 and b.state.total > 512 * MiB


def test_guest_short_of_memory_during_a_step_is_given_it_back(
    shrink: Callable[[FakeBackend], Any],
) -> None:
    b = FakeBackend(virtio_vm(1024), FakeGuest(used=100 * MiB))

    def allocate(backend: FakeBackend, step: Step) -> None:
        # The workload grows while the first step runs: only ~60 MiB stay free after it.
        if step.delta < 0:
            backend.guest.used = 512 * MiB + step.size - 60 * MiB

    b.on_poll = allocate
    r = shrink(b)
    assert (r.outcome.status, r.outcome.reason) == ("Deferred", "GuestPressure"), r.outcome
    assert "reverted" in r.outcome.message
    assert b.state.total == 1536 * MiB  # the step was given back


def test_a_step_given_back_is_not_reported_as_done(shrink: Callable[[FakeBackend], Any]) -> None:
    """The guest takes almost all it has while the second step runs: that step is reverted
    and, the guest being short of memory after the first one too, the first is given back.
    Nothing is shrunk in the end, and the outcome says so (Deferred, no steps): it said
    InProgress/PartialShrink "stopped after 1 step(s)" and listed the step given back (as
    seen on the real guest, with a workload that kept allocating during a shrink)."""
    b = FakeBackend(virtio_vm(1024), FakeGuest(used=100 * MiB))

    def allocate(backend: FakeBackend, step: Step) -> None:
        if step.delta < 0 and step.size == 512 * MiB:  # the second step: 768 -> 512 MiB
            backend.guest.used = (512 + 768 - 60) * MiB

    b.on_poll = allocate
    r = shrink(b)
    assert any("the last step is given back" in n.text for n in r.notes), r.notes
    assert (r.outcome.status, r.outcome.reason, r.outcome.steps) == (
        "Deferred",
        "GuestPressure",
        (),
    ), r.outcome
    assert r.outcome.observed == b.state.total == 1536 * MiB


@pytest.mark.parametrize("how", ["refused", "never settles"])
def test_a_step_whose_give_back_failed_stays_in_the_outcome(
    shrink: Callable[[FakeBackend], Any], how: str
) -> None:
    """As above, but giving back the first step (768 -> 1024 MiB) is refused by the
    hypervisor, or never completes: the step stays in the outcome, which dropped it
    whether or not the give-back happened (QEMU may still show it done)."""
    b = FakeBackend(virtio_vm(1024), FakeGuest(used=100 * MiB))

    def give_back(step: Step) -> bool:
        return step.delta == 0 and step.size == 1024 * MiB

    def allocate(backend: FakeBackend, step: Step) -> None:
        if step.delta < 0 and step.size == 512 * MiB:
            backend.guest.used = (512 + 768 - 60) * MiB
        if how == "never settles" and give_back(step):
            backend.guest.confirm = False

    begin = b.begin

    def refusing(step: Step) -> None:
        if how == "refused" and give_back(step):
            raise BackendError("Device 'vm0' is busy", "GenericError")
        begin(step)

    b.on_poll = allocate
    b.begin = refusing  # type: ignore[method-assign]
    r = shrink(b)
    assert any("the last step is given back" in n.text for n in r.notes), r.notes
    assert any("not given back" in n.text for n in r.notes), r.notes
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "PartialShrink"), r.outcome
    assert [(s.device, s.size) for s in r.outcome.steps] == [("vm0", 768 * MiB)], r.outcome
