"""The executor on the in-memory fake backend: every outcome and reason of the documentation's "Outcomes",
the journal, the lock, and recovery."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kata_mem.backends.fake import FakeBackend, FakeGuest, VirtualTime
from kata_mem.core.errors import BackendError
from kata_mem.core.model import (
    BackendObject,
    Container,
    MemoryDevice,
    SizingConfig,
    Step,
    VmState,
    Workload,
)
from kata_mem.core.record import Record
from kata_mem.core.request import CallOptions, HostOverrides, SandboxRequest
from kata_mem.core.results import Applied
from kata_mem.core.units import GiB, MiB
from kata_mem.core.values import replace
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from kata_mem.orchestration.handle import handle
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST, write_config


def request(*limits_mib: int) -> Workload:
    return Workload(tuple(Container(f"c{i}", n * MiB) for i, n in enumerate(limits_mib)))


def vm_virtio(plugged_mib: int = 0, max_mib: int = 2048) -> VmState:
    dev = MemoryDevice(
        "vm0", "virtio-mem", plugged_mib * MiB, plugged_mib * MiB, max_mib * MiB, 2 * MiB
    )
    return VmState(512 * MiB, (dev,), slots=8, device_space=15 * GiB)


def vm_dimms(*sizes_mib: int, slots: int = 8) -> VmState:
    devs = tuple(
        MemoryDevice(f"kmdimm{i}", "dimm", n * MiB, n * MiB, n * MiB, slot=i, memdev=f"kmmem{i}")
        for i, n in enumerate(sizes_mib)
    )
    return VmState(512 * MiB, devs, slots=slots, device_space=15 * GiB)


@pytest.fixture
def cfgs(make_config: Callable[..., SizingConfig]) -> dict[str, SizingConfig]:
    common = {"default_memory": 512, "default_maxmemory": 8192}
    return {
        # The fake guest gives its DIMMs back, as one onlining movable does.
        "dimm": make_config(**common, kernel_params=GUEST_KERNEL_PARAMS),
        "virtio": make_config(**common, enable_virtio_mem=True),
    }


@pytest.fixture
def run(tmp_path: Path) -> Callable[..., Any]:
    def go(cfg: SizingConfig, backend: FakeBackend, req: Workload, **options: Any) -> Any:
        t = VirtualTime()
        backend.clock, backend.sleep = t.clock, t.sleep
        state = SandboxState(tmp_path / "state", "sb")
        result = run_locked(
            state, lambda: backend, cfg, HOST, req, Options(**options), t.clock, t.sleep
        )
        # Whatever the executor writes, it reads back: its own journal is never "corrupt".
        Record.from_json("sb", json.loads(state.path.read_text()))
        return result

    return go


def test_grow_dimm_then_no_change(cfgs: dict[str, SizingConfig], run: Callable[..., Any]) -> None:
    b = FakeBackend(vm_dimms())
    r = run(cfgs["dimm"], b, request(300))
    assert (r.outcome.status, r.outcome.observed) == ("Resized", (512 + 384) * MiB)
    assert [d.id for d in b.state.dimms] == ["kmdimm0"]
    r = run(cfgs["dimm"], b, request(300))
    assert (r.outcome.status, r.outcome.steps) == ("NoChange", ())


def test_an_apply_sets_the_configured_statistics_interval(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    # The executor's side effect, even when there is nothing to resize (connecting
    # and reading set nothing, so it is here that the shrink checks get their readings).
    cfg = make_config(default_memory=512, default_maxmemory=8192, kata_mem={"stats_interval_s": 3})
    b = FakeBackend(vm_dimms(), FakeGuest(stats_interval=7))
    assert run(cfg, b, request()).outcome.status == "NoChange"
    assert b.guest.stats_interval == 3


def test_no_free_slots(cfgs: dict[str, SizingConfig], run: Callable[..., Any]) -> None:
    b = FakeBackend(vm_dimms(128, 128, slots=2))
    r = run(cfgs["dimm"], b, request(1024))
    assert (r.outcome.status, r.outcome.reason) == ("Infeasible", "NoFreeSlots")


def test_shrink_not_allowed_is_reported_not_executed(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    b = FakeBackend(vm_virtio(1024), FakeGuest(used=100 * MiB))
    r = run(cfgs["virtio"], b, request())
    assert (r.outcome.status, r.outcome.reason) == ("Infeasible", "ShrinkNotAllowed")
    assert b.state.virtio_mem is not None and b.state.virtio_mem.size == 1024 * MiB
    assert not any(c.startswith("resize") for c in b.calls)


def test_idle_guest_shrinks_in_verified_steps(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    b = FakeBackend(vm_virtio(1024), FakeGuest(used=100 * MiB))
    r = run(cfgs["virtio"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.observed) == ("Resized", 512 * MiB)
    assert [s.size // MiB for s in r.outcome.steps] == [768, 512, 256, 0]


def test_usage_above_target_defers_before_any_step(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    b = FakeBackend(vm_virtio(1024), FakeGuest(used=800 * MiB))
    r = run(cfgs["virtio"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("Deferred", "UsageAboveTarget")
    assert "guest usage 800 MiB" in r.outcome.message and "headroom 128 MiB" in r.outcome.message
    assert r.outcome.retry_after_s == 30.0
    assert b.state.virtio_mem is not None and b.state.virtio_mem.requested == 1024 * MiB
    # Retried later with backoff: 30 s, then 60 s.
    r = run(cfgs["virtio"], b, request(), allow_shrink=True)
    assert r.outcome.retry_after_s == 60.0


@pytest.mark.parametrize(
    ("guest", "text"),
    [
        (FakeGuest(stats=False), "no guest memory statistics"),
        (FakeGuest(stats_age_s=60), "60.0 s old"),
    ],
)
def test_unknown_usage_is_deferred_never_infeasible(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any], guest: FakeGuest, text: str
) -> None:
    b = FakeBackend(vm_virtio(1024), guest)
    r = run(cfgs["virtio"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("Deferred", "UsageUnknown")
    assert text in r.outcome.message


def test_force_skips_the_checks(cfgs: dict[str, SizingConfig], run: Callable[..., Any]) -> None:
    b = FakeBackend(vm_virtio(1024), FakeGuest(stats=False))
    r = run(cfgs["virtio"], b, request(), force=True)
    assert r.outcome.status == "Resized"
    assert any("--force" in w for w in [n.text for n in r.notes])


def test_guest_allocating_mid_shrink_stops_it(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    b = FakeBackend(vm_virtio(1024), FakeGuest(used=100 * MiB))

    def allocate(backend: FakeBackend, step: Step) -> None:
        # While the first step (down to 768 MiB) completes, the guest allocates: that
        # step still fits, the next one no longer does.
        if step.size == 768 * MiB:
            backend.guest.used = 900 * MiB

    b.on_poll = allocate
    r = run(cfgs["virtio"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "PartialShrink")
    assert "UsageAboveTarget" not in r.outcome.message and "shrink deferred" in r.outcome.message
    assert [s.size // MiB for s in r.outcome.steps] == [768]
    dev = b.state.virtio_mem
    assert dev is not None and dev.requested == dev.size == 768 * MiB


def test_stuck_virtio_mem_is_reverted_to_observed(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    # Statistics say the guest is idle, but it never finishes unplugging (e.g. unmovable
    # memory); it still takes back what it is given.
    b = FakeBackend(vm_virtio(1024), FakeGuest(used=100 * MiB))

    def stuck(backend: FakeBackend, step: Step) -> None:
        backend.guest.confirm = step.delta >= 0

    b.on_poll = stuck
    r = run(cfgs["virtio"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "UnplugTimeout")
    dev = b.state.virtio_mem
    assert dev is not None and dev.requested == dev.size  # never left below what is plugged


def test_dimm_unplug_rejected(cfgs: dict[str, SizingConfig], run: Callable[..., Any]) -> None:
    b = FakeBackend(vm_dimms(), FakeGuest(used=100 * MiB, refuse_unplug={"kmdimm1"}))
    for limits in ((512,), (512, 256)):  # kata-mem plugs kmdimm0 (512 MiB), then kmdimm1
        assert run(cfgs["dimm"], b, request(*limits)).outcome.status == "Resized"
    r = run(cfgs["dimm"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "UnplugRejected")
    assert b.state.device("kmdimm1") is not None


def test_dimm_unplug_timeout_stays_pending_and_is_settled_later(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any], tmp_path: Path
) -> None:
    b = FakeBackend(vm_dimms(), FakeGuest(used=100 * MiB))
    assert run(cfgs["dimm"], b, request(256)).outcome.status == "Resized"
    b.guest.confirm = False
    r = run(cfgs["dimm"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "UnplugTimeout")
    assert r.outcome.observed == 768 * MiB  # still counted as plugged
    journal = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
    assert journal["pending_unplug"] == ["kmdimm0"]
    # A second shrink while the unplug is pending is Busy, not a second device_del.
    r = run(cfgs["dimm"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("Deferred", "Busy")
    # The guest finishes later; the next call settles it and deletes the backend object.
    left = (BackendObject("kmmem0", 256 * MiB),)
    b.state = replace(b.state, devices=(), loose=left)
    r = run(cfgs["dimm"], b, request(), allow_shrink=True)
    assert r.outcome.status == "NoChange"
    assert any(c.startswith("delete_memdev kmmem0") for c in b.calls)
    journal = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
    assert (journal["pending_unplug"], journal["owned"]) == ([], [])


def test_reconcile_raises_requested_left_below_size(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    dev = MemoryDevice("vm0", "virtio-mem", 1024 * MiB, 256 * MiB, 2048 * MiB, 2 * MiB)
    b = FakeBackend(VmState(512 * MiB, (dev,), 8, 15 * GiB), FakeGuest(used=100 * MiB))
    r = run(cfgs["virtio"], b, request(1024))
    assert any("requested-size raised" in w for w in [n.text for n in r.notes])
    assert r.outcome.status == "NoChange"
    d = b.state.virtio_mem
    assert d is not None and d.requested == d.size == 1024 * MiB


def test_corrupt_journal_is_rebuilt(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any], tmp_path: Path
) -> None:
    with SandboxState(tmp_path / "state", "sb").locked(0):  # kata-mem's own sandbox directory
        (tmp_path / "state" / "sb" / "journal.json").write_text('{"schema": "kata-mem/jour')
    b = FakeBackend(vm_dimms())
    r = run(cfgs["dimm"], b, request(256))
    assert r.outcome.status == "Resized"
    assert any("corrupt or truncated" in w for w in [n.text for n in r.notes])
    assert (
        json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())["observed_mib"] == 768
    )


def test_state_files_are_private(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any], tmp_path: Path
) -> None:
    run(cfgs["dimm"], FakeBackend(vm_dimms()), request(256))
    assert (tmp_path / "state" / "sb").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "state" / "sb" / "journal.json").stat().st_mode & 0o777 == 0o600


def test_busy_when_the_lock_is_held(
    cfgs: dict[str, SizingConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kata_mem.orchestration.executor.LOCK_WAIT_S", 0.2)
    state = SandboxState(tmp_path / "state", "sb")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with SandboxState(tmp_path / "state", "sb").locked(1.0):
            held.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(5)
    try:
        r = run_locked(
            state, lambda: FakeBackend(vm_dimms()), cfgs["dimm"], HOST, request(256), Options()
        )
    finally:
        release.set()
        t.join()
    assert (r.outcome.status, r.outcome.reason) == ("Deferred", "Busy")


def test_unwritable_state_dir_changes_nothing(
    cfgs: dict[str, SizingConfig], tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    b = FakeBackend(vm_dimms())
    from kata_mem.core.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot write the sandbox state"):
        run_locked(
            SandboxState(blocker, "sb"), lambda: b, cfgs["dimm"], HOST, request(256), Options()
        )
    assert b.state.dimms == ()


def test_bad_sandbox_ids_are_refused() -> None:
    from kata_mem.core.errors import InputError

    for bad in ("../x", "", "a/b", ".", "x" * 200):
        with pytest.raises(InputError):
            SandboxState("/tmp", bad)


# -- ownership: only what the journal records kata-mem created is kata-mem's -----------------


def test_plugged_dimms_are_recorded_before_the_command_and_confirmed_after(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any], tmp_path: Path
) -> None:
    journal = tmp_path / "state" / "sb" / "journal.json"
    seen: list[dict[str, Any]] = []

    class Watched(FakeBackend):
        def begin(self, step: Step) -> None:
            seen.append(json.loads(journal.read_text()))
            super().begin(step)

    b = Watched(vm_dimms())
    assert run(cfgs["dimm"], b, request(256)).outcome.status == "Resized"
    entry = {"id": "kmdimm0", "kind": "dimm", "memdev": "kmmem0", "size": 256 * MiB}
    assert seen[0]["owned"] == [{**entry, "confirmed": False}]
    assert json.loads(journal.read_text())["owned"] == [{**entry, "confirmed": True}]
    # Unplugged (its backend deleted with it): forgotten.
    b.guest.used = 100 * MiB
    assert run(cfgs["dimm"], b, request(), allow_shrink=True).outcome.status == "Resized"
    assert json.loads(journal.read_text())["owned"] == []


def test_a_dimm_named_like_kata_mems_is_never_unplugged(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    b = FakeBackend(vm_dimms(256), FakeGuest(used=100 * MiB))  # kmdimm0 on kmmem0, unrecorded
    r = run(cfgs["dimm"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("Infeasible", "BackendCannotShrink")
    assert "(kmdimm0 only look like kata-mem's)" in r.outcome.message
    assert not any(c.startswith("unplug_dimm") for c in b.calls)
    assert any(
        w.startswith("left alone: kmdimm0 is named like kata-mem's")
        for w in [n.text for n in r.notes]
    )


class _RefusingPlug(FakeBackend):
    """A fake VM whose hypervisor refuses every step with ``error``."""

    def __init__(self, error: BackendError) -> None:
        super().__init__(vm_dimms())
        self.error = error

    def begin(self, step: Step) -> None:
        raise self.error


def _named() -> BackendError:
    """A refusal worded as the QMP backend words it: where, the class, QEMU's description."""
    return BackendError.naming(
        "QMP socket vm.sock: device_add failed", "GenericError", "no free slots"
    )


def test_a_failed_plug_is_forgotten(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any], tmp_path: Path
) -> None:
    r = run(cfgs["dimm"], _RefusingPlug(_named()), request(256))
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "BackendError"), r.outcome
    assert json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())["owned"] == []


def test_a_backend_error_names_its_class_once_whatever_its_words(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    """The outcome says the hypervisor's error class once. Whether the message already
    names it is the raiser's to say: a description that merely quotes the class's name
    (here a QEMU property named like it) does not name it."""
    quoting = BackendError("Property 'pc-dimm.GenericError' not found", "GenericError")
    r = run(cfgs["dimm"], _RefusingPlug(quoting), request(256))
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "BackendError"), r.outcome
    assert "plug_dimm kmdimm0: GenericError: Property 'pc-dimm.GenericError' not found" in (
        r.outcome.message
    )


def test_a_backend_error_that_names_its_class_is_said_as_it_is(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    r = run(cfgs["dimm"], _RefusingPlug(_named()), request(256))
    assert (
        "plug_dimm kmdimm0: QMP socket vm.sock: device_add failed: GenericError: no free slots"
        in r.outcome.message
    )


def test_new_ids_avoid_every_id_in_the_vm(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    foreign = MemoryDevice(
        "kmdimm3", "dimm", 128 * MiB, 128 * MiB, 128 * MiB, slot=0, memdev="foreign0"
    )
    vm = VmState(
        512 * MiB,
        (foreign,),
        slots=8,
        device_space=15 * GiB,
        loose=(BackendObject("kmmem7", 128 * MiB),),
        other_ids=("kmdimm8", "rng0"),  # another device took the next id
    )
    b = FakeBackend(vm)
    r = run(cfgs["dimm"], b, request(256))
    assert [(s.device, s.memdev) for s in r.outcome.steps] == [("kmdimm9", "kmmem9")]
    assert b.state.loose == vm.loose  # kmmem7 is not kata-mem's: left alone


def test_memory_changed_under_it_between_steps_stops_the_run(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any]
) -> None:
    """Another agent (Kata's runtime, hotplugging on a container event) plugs a DIMM while
    kata-mem's first shrink step runs: the next step, planned from the VM before it, is not
    issued; the outcome says so, and the next call plans from what the hypervisor shows."""
    b = FakeBackend(vm_virtio(1024), FakeGuest(used=100 * MiB))

    def kata_plugs(backend: FakeBackend, step: Step) -> None:
        if step.size == 768 * MiB and backend.state.device("dimm1") is None:
            dimm = MemoryDevice("dimm1", "dimm", 128 * MiB, 128 * MiB, 128 * MiB, slot=0)
            backend.state = replace(backend.state, devices=(*backend.state.devices, dimm))

    b.on_poll = kata_plugs
    r = run(cfgs["virtio"], b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "PartialShrink")
    assert "the VM's memory changed under kata-mem" in r.outcome.message
    assert "planned from 1280 MiB and the hypervisor shows 1408 MiB" in r.outcome.message
    assert [s.size // MiB for s in r.outcome.steps] == [768]
    assert not any(c.startswith("resize_virtio_mem vm0 512") for c in b.calls)
    b.on_poll = None
    again = run(cfgs["virtio"], b, request(), allow_shrink=True)
    # Planned from 512 + 768 + Kata's 128 MiB: kata-mem shrinks its own device, and leaves
    # the DIMM it did not create alone.
    assert again.outcome.status == "Resized" and b.state.device("dimm1") is not None


class _Died(Exception):
    """What ``os._exit`` raises in these tests, with its status."""


def _dying(monkeypatch: pytest.MonkeyPatch) -> None:
    def exit_now(status: int) -> None:
        raise _Died(status)

    monkeypatch.setattr("os._exit", exit_now)


def test_the_crash_hook_dies_where_its_option_says(
    cfgs: dict[str, SizingConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Options.crash_at`` ends the process at that point of the step loop: the intent is
    journalled and the command never sent."""
    _dying(monkeypatch)
    b = FakeBackend(vm_dimms())
    t = VirtualTime()
    state = SandboxState(tmp_path / "state", "sb")
    crash = Options(crash_at="before-command")
    with pytest.raises(_Died):
        run_locked(state, lambda: b, cfgs["dimm"], HOST, request(300), crash, t.clock, t.sleep)
    assert b.state.dimms == ()
    assert json.loads(state.path.read_text())["phase"] == "intent"


def test_the_crash_hook_is_not_read_from_the_process_environment(
    cfgs: dict[str, SizingConfig], run: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the caller's options crash a call: ``KATA_MEM_CRASH_AT`` in the process's own
    environment, past the ``env`` that ``handle()`` passes down, is not read."""
    _dying(monkeypatch)
    monkeypatch.setenv("KATA_MEM_CRASH_AT", "before-command")
    r = run(cfgs["dimm"], FakeBackend(vm_dimms()), request(300))
    assert r.outcome.status == "Resized"


def test_handle_passes_the_crash_hook_down_from_its_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The crash hook arrives in the ``env`` that ``handle()`` is given (a dry run on the
    fake backend dies before its first command)."""
    _dying(monkeypatch)
    config = write_config(tmp_path / "configuration.toml", {"default_memory": 512})
    req = SandboxRequest(
        "sb",
        config=str(config),
        workload=request(300),
        mode="dry-run",
        host=HostOverrides(memory=HOST.memory, cpus=HOST.cpus, arch=HOST.arch),
    )
    options = CallOptions(state_dir=str(tmp_path / "state"))
    done = handle(req, {}, options)
    assert isinstance(done, Applied) and done.outcome.status == "Resized"
    with pytest.raises(_Died):
        handle(req, {"KATA_MEM_CRASH_AT": "before-command"}, options)


def test_a_vm_kata_sized_at_boot_is_resized_never_below_its_boot_memory(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    """runtime-rs with static_sandbox_resource_mgmt booted the VM at 2080 MiB (overhead 32
    + 2 GiB, InitialSizeManager::setup_config). kata-mem resizes it to what Kata would boot
    the workload with: 3104 for 3 GiB (a DIMM), 2080 again for 2 GiB; for 1 GiB (1056) the
    boot memory stays, Infeasible/BelowBaseMemory, and nothing is sent."""
    cfg = make_config(
        static_sandbox_resource_mgmt=True,
        overhead_memory=32,
        kernel_params=GUEST_KERNEL_PARAMS,
        kata_mem={"runtime": "runtime-rs"},
    )
    b = FakeBackend(
        VmState(2080 * MiB, slots=10, device_space=14304 * MiB), FakeGuest(used=100 * MiB)
    )
    assert run(cfg, b, request(2048)).outcome.status == "NoChange"
    r = run(cfg, b, request(3072))
    assert (r.outcome.status, r.outcome.observed) == ("Resized", 3104 * MiB)
    r = run(cfg, b, request(2048), allow_shrink=True)
    assert (r.outcome.status, r.outcome.observed) == ("Resized", 2080 * MiB)
    sent = len(b.calls)
    r = run(cfg, b, request(1024), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason, r.outcome.observed) == (
        "Infeasible",
        "BelowBaseMemory",
        2080 * MiB,
    )
    assert "Kata sized the VM at boot" in r.outcome.message
    assert [c for c in b.calls[sent:] if c != "observe"] == []


def test_a_dimm_shrink_of_kata_s_guest_is_refused_before_any_step(
    make_config: Callable[..., SizingConfig], run: Callable[..., Any]
) -> None:
    """Nothing in kernel_params: the guest onlines as Kata's does, to a kernel zone, and a
    DIMM kata-mem plugged is not unplugged (the eject would be answered busy and stay
    pending): Infeasible/BackendCannotShrink, the DIMM left where it is."""
    cfg = make_config(default_memory=512, default_maxmemory=8192)
    b = FakeBackend(vm_dimms(), FakeGuest(used=100 * MiB))
    assert run(cfg, b, request(512)).outcome.status == "Resized"
    sent = len(b.calls)
    r = run(cfg, b, request(), allow_shrink=True)
    assert (r.outcome.status, r.outcome.reason) == ("Infeasible", "BackendCannotShrink")
    assert "to a kernel zone (as Kata's guest onlines it" in r.outcome.message
    assert [d.id for d in b.state.dimms] == ["kmdimm0"]
    assert not any(c.startswith("unplug_dimm") for c in b.calls[sent:]), b.calls
