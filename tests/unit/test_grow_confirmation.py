"""A grow is done when the guest says so: after each grow step the executor
waits for a reading whose MemTotal shows the memory, and before a staged step for one
whose MemAvailable describes it; a guest that does not show it is never Resized. On the
in-memory fake backend, whose guest reports what it has onlined (``FakeGuest.onlined``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kata_mem.backends import StepProgress
from kata_mem.backends.fake import FakeBackend, FakeGuest, VirtualTime
from kata_mem.core.guestmem import GROW_S_PER_GIB, grow_timeout_s
from kata_mem.core.model import (
    Container,
    HostFacts,
    MemoryDevice,
    Settings,
    SizingConfig,
    Step,
    VmState,
    Workload,
)
from kata_mem.core.record import Record
from kata_mem.core.units import GiB, MiB
from kata_mem.core.values import replace
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked

HOST = HostFacts(memory=64 * GiB, cpus=4, arch="amd64")


def vm_virtio(max_mib: int) -> VmState:
    dev = MemoryDevice("vm0", "virtio-mem", 0, 0, max_mib * MiB, 2 * MiB)
    return VmState(512 * MiB, (dev,), slots=8, device_space=64 * GiB)


def limit(mib: int) -> Workload:
    return Workload((Container("c", mib * MiB),))


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., Any]:
    def go(cfg: SizingConfig, backend: FakeBackend, req: Workload, sandbox: str = "sb") -> Any:
        t = VirtualTime()
        backend.clock, backend.sleep = t.clock, t.sleep
        state = SandboxState(tmp_path / "state", sandbox)
        result = run_locked(state, lambda: backend, cfg, HOST, req, Options(), t.clock, t.sleep)
        Record.from_json(sandbox, json.loads(state.path.read_text()))
        return result

    return go


def test_a_guest_that_never_shows_the_memory_is_not_resized(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    """The hypervisor has the memory plugged, the guest's MemTotal does not grow (it died
    adding it, or is stuck onlining): InProgress, never exit 0's Resized."""
    cfg = make_config(default_memory=512, enable_virtio_mem=True)
    b = FakeBackend(vm_virtio(8192), FakeGuest(used=128 * MiB, onlined=0))
    r = run(cfg, b, limit(2048))
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "PlugTimeout")
    assert "the guest did not show the memory of vm0 online" in r.outcome.message
    # The same grow of a guest that onlines what it is given.
    b = FakeBackend(vm_virtio(8192), FakeGuest(used=128 * MiB))
    r = run(cfg, b, limit(2048), "other")
    assert (r.outcome.status, r.outcome.observed) == ("Resized", 2560 * MiB)


def test_a_staged_step_waits_for_room_in_the_guest(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    """Kernel onlining, 512 MiB -> 40 GiB in two steps (16384, then the rest). The guest
    uses all the first step gave it (MemAvailable ~0 after it): the second step's struct
    pages would not fit, so the run stops after the first, InProgress."""
    cfg = make_config(
        default_memory=512,
        enable_virtio_mem=True,
        kernel_params="memhp_default_state=online_kernel",
    )
    guest = FakeGuest(used=128 * MiB)
    b = FakeBackend(vm_virtio(48 * 1024), guest)

    def hog(backend: FakeBackend, step: object) -> None:
        guest.used = (512 + 16384) * MiB  # every page the first step gives it, in use

    b.on_poll = hog
    r = run(cfg, b, limit(40 * 1024))
    assert [s.size // MiB for s in r.plan.memory.steps] == [16384, 40960]
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "PlugTimeout")
    assert [s.size // MiB for s in r.outcome.steps] == [16384]
    assert "room for the next step above the headroom" in r.outcome.message
    # Once the guest has room again, the next call goes on from where this one stopped.
    b.on_poll = None
    guest.used = 128 * MiB
    r = run(cfg, b, limit(40 * 1024))
    assert (r.outcome.status, r.outcome.observed) == ("Resized", (512 + 40960) * MiB)
    assert [s.size // MiB for s in r.outcome.steps] == [40960]


def test_a_staged_grow_reaches_its_target(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    cfg = make_config(
        default_memory=512,
        enable_virtio_mem=True,
        kernel_params="memhp_default_state=online_kernel",
    )
    b = FakeBackend(vm_virtio(48 * 1024), FakeGuest(used=128 * MiB))
    r = run(cfg, b, limit(40 * 1024))
    assert (r.outcome.status, r.outcome.observed) == ("Resized", (512 + 40960) * MiB)
    assert len(r.outcome.steps) == 2


def test_grow_timeouts_scale_with_the_size() -> None:
    """A 77 GiB grow under TCG was still onlining after the 20 s default."""
    s = Settings()
    assert grow_timeout_s(s, 0) == s.step_timeout_s
    assert grow_timeout_s(s, -GiB) == s.step_timeout_s
    assert grow_timeout_s(s, 150 * GiB) == s.step_timeout_s + 150 * GROW_S_PER_GIB


def test_after_an_unconfirmed_grow_a_silent_guest_is_never_no_change(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    """The VM has the memory, the guest never showed it: the next call has nothing to
    change, but a guest that no longer reports may have died adding it: not exit 0."""
    cfg = make_config(default_memory=512, enable_virtio_mem=True)
    guest = FakeGuest(used=128 * MiB, onlined=0)
    b = FakeBackend(vm_virtio(8192), guest)
    assert run(cfg, b, limit(2048)).outcome.reason == "PlugTimeout"
    guest.stats_age_s = 1e6  # no reading since
    r = run(cfg, b, limit(2048))
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "PlugTimeout")
    assert "the guest has sent no memory statistics since" in r.outcome.message
    # It answers again, with the memory online: nothing to change.
    guest.stats_age_s, guest.onlined = 0.0, None
    assert run(cfg, b, limit(2048)).outcome.status == "NoChange"


def test_after_a_grow_killed_midway_a_silent_guest_is_never_no_change(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any], tmp_path: Path
) -> None:
    """A call killed (kill -9) after a grow step's command and before the guest showed it
    leaves the step running in the journal; the VM has the memory, so the next call has
    nothing to change, and a guest that no longer reports is as unconfirmed as after a
    ``PlugTimeout`` (the real-guest case: tests/integration/test_faults.py)."""
    cfg = make_config(default_memory=512, enable_virtio_mem=True)
    dev = MemoryDevice("vm0", "virtio-mem", 2048 * MiB, 2048 * MiB, 8192 * MiB, 2 * MiB)
    vm = VmState(512 * MiB, (dev,), slots=8, device_space=64 * GiB)
    guest = FakeGuest(used=128 * MiB, stats_age_s=1e6)
    b = FakeBackend(vm, guest)
    step = Step("resize_virtio_mem", "vm0", 2048 * MiB, 2048 * MiB, 2560 * MiB)
    state = SandboxState(tmp_path / "state", "sb")
    with state.locked(0):
        state.save(Record("sb").begin(step, "intent"))
    r = run(cfg, b, limit(2048))
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "PlugTimeout")
    assert "the guest has sent no memory statistics since" in r.outcome.message
    guest.stats_age_s = 0.0
    assert run(cfg, b, limit(2048)).outcome.status == "NoChange"


def test_a_grow_still_plugging_is_waited_for_before_it_is_planned(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    """The guest has plugged all of a 2 GiB ``requested-size`` a killed call set, and the
    hypervisor's report is behind it (libvirt's ``<current>`` follows QEMU's size events,
    one a second at most): the call waits for the report, and has nothing to do. Planned
    from the stale size, the rest was a grow measured from a reading that already showed
    it: PlugTimeout for a healthy guest (the real-guest case: tests/integration/
    test_scenarios.py)."""

    class Behind(FakeBackend):
        """Reports the virtio-mem device 128 MiB plugged until it has been polled."""

        behind = True

        def observe(self) -> VmState:
            vm = super().observe()
            dev = vm.device("vm0")
            if not self.behind or dev is None:
                return vm
            return replace(vm, devices=(replace(dev, size=128 * MiB),))

        def poll(self, step: Step, wait_s: float = 0.0) -> StepProgress:
            self.behind = False
            return super().poll(step, wait_s)

    cfg = make_config(default_memory=512, enable_virtio_mem=True)
    dev = MemoryDevice("vm0", "virtio-mem", 2048 * MiB, 2048 * MiB, 8192 * MiB, 2 * MiB)
    b = Behind(
        VmState(512 * MiB, (dev,), slots=8, device_space=64 * GiB), FakeGuest(used=128 * MiB)
    )
    r = run(cfg, b, limit(2048))
    assert (r.outcome.status, r.outcome.observed) == ("NoChange", 2560 * MiB), r.outcome
    assert [n.text for n in r.notes if "vm0 was still plugging" in n.text] == [
        "reconciled: vm0 was still plugging (plugged 128 MiB, requested-size 2048 MiB): "
        "waited for it"
    ]


def test_a_grow_is_measured_from_a_reading_taken_after_the_vm_was_observed(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    """A reading a second old may still count memory a call just before took away (a DIMM
    the guest let go of, still in its last report's MemTotal): measured from it, no grow
    would ever seem to reach its target, and a healthy guest ended InProgress/PlugTimeout
    (seen on a real guest: a service grow right after a DIMM shrink). The grow is measured
    from a reading taken after the VM was observed."""

    class Lagging(FakeBackend):
        """The guest reports 0.2 s after kata-mem looks at the VM: until then its last
        report is the one from before this call, which still counts a 128 MiB DIMM that a
        call just before took away."""

        looked = 0.0

        def observe(self) -> VmState:
            self.looked = self.clock()
            return super().observe()

        def guest_usage(self) -> Any:
            usage = super().guest_usage()
            now = self.clock()
            if now >= self.looked + 0.2 or usage is None or usage.total is None:
                return usage
            before = (512 + 128) * MiB
            return replace(usage, total=before, last_update=self.looked - 0.5)

    cfg = make_config(default_memory=512, enable_virtio_mem=True)
    b = Lagging(vm_virtio(8192), FakeGuest(used=128 * MiB))
    r = run(cfg, b, limit(512))
    assert (r.outcome.status, r.outcome.observed) == ("Resized", 1024 * MiB), r.outcome


def test_a_grow_still_plugging_after_the_wait_is_said_so(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    """The repair waits for a grow a killed call left plugging; a guest that does not
    answer leaves it plugging after the wait. The note said "waited for it" whatever the
    wait found; it says the plug was still in progress after it."""
    cfg = make_config(default_memory=512, enable_virtio_mem=True)
    dev = MemoryDevice("vm0", "virtio-mem", 1024 * MiB, 2048 * MiB, 8192 * MiB, 2 * MiB)
    b = FakeBackend(
        VmState(512 * MiB, (dev,), slots=8, device_space=64 * GiB),
        FakeGuest(used=128 * MiB, confirm=False),
    )
    r = run(cfg, b, limit(2048))
    (said,) = [n.text for n in r.notes if "vm0 was still plugging" in n.text]
    assert said == (
        "reconciled: vm0 was still plugging (plugged 1024 MiB, requested-size 2048 MiB): "
        "waited for it, and it was still plugging after the wait (the guest has not answered)"
    )
