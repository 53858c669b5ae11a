"""Safe shrink on the real guest: verified steps, deferral while the guest holds
memory, stop-and-revert when it allocates mid-shrink, the unsafe --force
baseline, DIMM unplug, crashes, and concurrent calls."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from kata_mem.backends import StepProgress
from kata_mem.backends.qmp import QmpBackend
from kata_mem.core.model import Step, Workload
from kata_mem.edges.config import load_config
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from tests.support.cli import CliResult, apply_qmp, kata_mem_process
from tests.support.configs import HOST, HOST_ARGS, guest_config
from tests.support.guestvm import BootGuest, GuestSpec, GuestVM
from tests.support.qmp_min import QMPClient
from tests.support.waits import wait_until

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
MiB, KiB_PER_MiB = 1 << 20, 1024
HEADROOM_KB = 128 * KiB_PER_MiB


def plugged_1g(run_cli: Run, cfg: Path, vm: GuestVM) -> int:
    """Plug 1 GiB through kata-mem; returns the guest's MemTotal (kB) afterwards."""
    base = vm.status().total_kb
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "1Gi")
    assert (code, doc["status"]) == (0, "Resized"), doc
    want = base + 1024 * KiB_PER_MiB
    total = vm.wait_mem(lambda m: m.total_kb >= want, timeout=10).total_kb
    assert total == want

    # The apply turned on balloon statistics; status shows the latest reading as it is,
    # and one that shows the plugged memory comes within an interval or two.
    def shown() -> bool:
        guest = json.loads(run_cli("status", "--qmp", str(vm.qmp_socket), "--json").out)["guest"]
        return guest is not None and bool(guest["total_mib"] == total // KiB_PER_MiB)

    wait_until(shown, "a balloon reading that shows the plugged memory", timeout=10, interval=0.2)
    return total


def test_shrink_without_allow_is_reported_not_executed(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    cfg = guest_config(tmp_path, virtio=True)
    total = plugged_1g(run_cli, cfg, vm)
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket)
    assert (code, doc["status"], doc["reason"]) == (0, "Infeasible", "ShrinkNotAllowed")
    assert doc["plan"]["memory"]["target_mib"] == 512
    assert vm.status().total_kb == total


class AllocatesAfterFirstStep(QmpBackend):
    """The real backend; the test makes the guest allocate as soon as the first
    shrink step has completed, between two steps of one shrink."""

    vm: GuestVM
    mib: int = 800

    def poll(self, step: Step, wait_s: float = 0.0) -> StepProgress:
        progress = super().poll(step, wait_s)
        if progress.state == "done" and step.delta < 0 and not getattr(self, "_allocated", False):
            self._allocated = True
            self.vm.alloc(self.mib)
        return progress


def test_guest_allocating_during_a_shrink_stops_it(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    cfg_path = guest_config(tmp_path, virtio=True)
    plugged_1g(run_cli, cfg_path, vm)
    cfg = load_config(cfg_path)

    def connect() -> QmpBackend:
        backend = AllocatesAfterFirstStep.connect(str(vm.qmp_socket))
        assert isinstance(backend, AllocatesAfterFirstStep)
        backend.vm = vm
        return backend

    result = run_locked(
        SandboxState(tmp_path / "state", "sb"),
        connect,
        cfg,
        HOST,
        Workload(),
        Options(allow_shrink=True),
    )
    out = result.outcome
    # Stopped before the target: the allocation was seen before the next step (or, read
    # late, right after it, and that step was given back).
    assert (out.status, out.reason) == ("InProgress", "PartialShrink"), out
    assert 1 <= len(out.steps) < 4 and out.observed > 512 * MiB
    mem = vm.status()
    assert vm.is_alive() and mem.held_mib == 800
    assert mem.avail_kb > HEADROOM_KB
    with QMPClient(vm.qmp_socket) as q:  # nothing left for the guest to keep unplugging by itself
        dev = next(
            d["data"] for d in q.execute("query-memory-devices") if d["type"] == "virtio-mem"
        )
        assert dev["requested-size"] == dev["size"] == 768 * MiB


def test_a_dimm_is_not_unplugged_while_the_guests_usage_rises(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    """Three 512 MiB DIMMs; the guest takes 600 MiB as soon as the first is out. A DIMM's
    unplug cannot be given back: while the guest offlines it, a workload that keeps growing
    runs it out of memory, its offlining never ends, and the guest is left with a few MiB
    (seen: MemAvailable 4 MiB, the DIMM half offline, UnplugTimeout). So a DIMM step must
    also leave room for what the usage rose by since the shrink began: the second DIMM
    stays. Before, it was unplugged (904 MiB left for 630 MiB in use and 128 MiB headroom)."""
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg_path = guest_config(tmp_path, virtio=False)
    for limit, total in (("512Mi", 1024), ("1Gi", 1536), ("1536Mi", 2048)):
        code, doc = apply_qmp(run_cli, cfg_path, vm.qmp_socket, "--limit", limit)
        assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", total), doc
    grown = vm.status().total_kb
    assert vm.wait_mem(lambda m: m.online_blocks == m.total_blocks).total_kb == grown

    def connect() -> QmpBackend:
        backend = AllocatesAfterFirstStep.connect(str(vm.qmp_socket))
        assert isinstance(backend, AllocatesAfterFirstStep)
        backend.vm, backend.mib = vm, 600
        return backend

    out = run_locked(
        SandboxState(tmp_path / "state", "sb"),
        connect,
        load_config(cfg_path),
        HOST,
        Workload(),
        Options(allow_shrink=True),
    ).outcome
    assert (out.status, out.reason, out.observed) == ("InProgress", "PartialShrink", 1536 * MiB)
    assert [(s.action, s.device) for s in out.steps] == [("unplug_dimm", "kmdimm2")], out
    assert "since the shrink began" in out.message, out.message
    with QMPClient(vm.qmp_socket) as q:
        dimms = {d["data"]["id"] for d in q.execute("query-memory-devices")}
    assert dimms == {"kmdimm0", "kmdimm1"}
    mem = vm.status()
    assert vm.is_alive() and mem.held_mib == 600 and mem.avail_kb > HEADROOM_KB


def test_force_shows_the_harm_the_checks_prevent(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    """The unsafe baseline: the same guest and request as the deferral test, with
    the checks skipped. The guest is left with almost no free memory, or dies."""
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    cfg = guest_config(tmp_path, virtio=True, timeout=5)
    plugged_1g(run_cli, cfg, vm)
    vm.alloc(700)
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--force")
    assert (code, doc["status"], doc["reason"]) == (8, "InProgress", "UnplugTimeout"), doc
    alive = vm.is_alive()
    avail = vm.status().avail_kb if alive else 0
    print(
        f"--force: status {doc['status']}/{doc['reason']}, guest alive={alive}, MemAvailable {avail} kB, observed {doc['observed_mib']} MiB"
    )
    assert not alive or avail < HEADROOM_KB


def test_a_dimm_shrink_of_a_guest_onlining_to_a_kernel_zone_is_refused_untouched(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    """A guest that onlines hot-added memory to a kernel zone, as Kata's does (here
    memhp_default_state=online, and nothing in kernel_params, as in Kata's own
    configuration), often cannot give a DIMM back: it answers the ACPI eject busy and keeps
    the memory, and the unplug stays pending for good (docs/guide/sizing.md, "pc-dimm shrink"). kata-mem
    refuses the shrink before any step, even with --force, and says what to do: the DIMM
    stays, unplugged by nothing, and the journal holds no step."""
    vm = boot_guest(GuestSpec(virtio_mem_mib=0, online_state="online"))
    cfg = guest_config(tmp_path, virtio=False, kernel_params="")
    base_kb = vm.status().total_kb
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768), doc
    grown = vm.wait_mem(lambda m: m.total_kb >= base_kb + 256 * KiB_PER_MiB).total_kb
    for flag in ("--allow-shrink", "--force"):
        code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, flag)
        assert (code, doc["status"], doc["reason"], doc["observed_mib"]) == (
            0,
            "Infeasible",
            "BackendCannotShrink",
            768,
        ), doc
        assert doc["steps"] == [] and doc["plan"]["memory"]["steps"] == [], doc
        assert "to a kernel zone (as Kata's guest onlines it" in doc["message"], doc
        assert "memhp_default_state=online_movable" in doc["message"], doc
    with QMPClient(vm.qmp_socket) as q:
        devices = q.execute("query-memory-devices")
    assert [d["data"]["id"] for d in devices] == ["kmdimm0"]
    journal = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
    assert journal["pending_unplug"] == [] and journal["step"] is None, journal
    assert vm.status().total_kb == grown


def test_dimm_unplug_that_times_out_stays_pending_and_is_settled(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    # A paused guest cannot answer the ACPI eject: the unplug stays pending until it runs again.
    # (A guest too full to offline the DIMM is no way to test this: it panics, see docs/design/safe-shrink.md.)
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False, timeout=3)
    base_kb = vm.status().total_kb
    apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")
    with QMPClient(vm.qmp_socket) as q:
        q.execute("stop")
    # --force: a paused guest reports no fresh usage, so the checks would (rightly) defer.
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--force")
    assert (code, doc["status"], doc["reason"], doc["observed_mib"]) == (
        8,
        "InProgress",
        "UnplugTimeout",
        768,
    ), doc
    journal = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
    assert journal["pending_unplug"] == ["kmdimm0"]
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    assert (doc["status"], doc["reason"], doc["observed_mib"]) == ("Deferred", "Busy", 768), doc
    with QMPClient(vm.qmp_socket) as q:
        q.execute("cont")
    assert vm.wait_mem(lambda m: m.total_kb <= base_kb, timeout=60).total_kb == base_kb
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "NoChange", 512), doc
    assert any("pending unplug of kmdimm0 completed" in w for w in doc["warnings"])
    assert any("orphaned backend object kmmem0" in w for w in doc["warnings"])
    with QMPClient(vm.qmp_socket) as q:
        assert q.execute("query-memory-devices") == []
        assert not [
            o for o in q.execute("qom-list", {"path": "/objects"}) if o["name"].startswith("kmmem")
        ]


def _crash_run(
    cfg: Path, vm: GuestVM, crash_at: str, *args: str
) -> subprocess.CompletedProcess[str]:
    return kata_mem_process(
        "apply",
        "--config",
        str(cfg),
        "--qmp",
        str(vm.qmp_socket),
        "--sandbox",
        "sb",
        *HOST_ARGS,
        "--json",
        *args,
        env={"KATA_MEM_CRASH_AT": crash_at},
    )


@pytest.mark.parametrize("crash_at", ["before-command", "after-command"])
def test_crash_during_a_virtio_mem_shrink_is_repaired(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path, crash_at: str
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    cfg = guest_config(tmp_path, virtio=True)
    plugged_1g(run_cli, cfg, vm)
    r = _crash_run(cfg, vm, crash_at, "--allow-shrink")
    assert r.returncode == 99, r.stderr
    journal = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
    assert (journal["state"], journal["step"]["action"]) == ("running", "resize_virtio_mem")
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 512), doc
    assert any("reconciled: the previous call stopped" in w for w in doc["warnings"])


@pytest.mark.parametrize("crash_at", ["before-command", "after-command"])
def test_crash_during_dimm_changes_is_repaired(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path, crash_at: str
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    base_kb = vm.status().total_kb
    # Grow with a crash, then converge.
    assert _crash_run(cfg, vm, crash_at, "--limit", "256Mi").returncode == 99
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")
    assert (code, doc["observed_mib"]) == (0, 768), doc
    # Shrink with a crash, then converge: nothing plugged twice, no orphan left.
    assert _crash_run(cfg, vm, crash_at, "--allow-shrink").returncode == 99
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    if crash_at == "after-command" and doc["status"] == "Deferred":
        # device_del was sent and the guest had not finished: pending, still counted as plugged.
        assert (doc["reason"], doc["observed_mib"]) == ("Busy", 768), doc
        assert vm.wait_mem(lambda m: m.total_kb <= base_kb, timeout=30).total_kb == base_kb
        code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    assert (code, doc["observed_mib"]) == (0, 512), doc
    with QMPClient(vm.qmp_socket) as q:
        assert q.execute("query-memory-devices") == []
        assert not [
            o for o in q.execute("qom-list", {"path": "/objects"}) if o["name"].startswith("kmmem")
        ]


def test_two_applies_at_once_are_serialized(boot_guest: BootGuest, tmp_path: Path) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    cfg = guest_config(tmp_path, virtio=True)
    results: list[subprocess.CompletedProcess[str]] = []

    def run() -> None:
        results.append(
            kata_mem_process(
                "apply",
                "--config",
                str(cfg),
                "--qmp",
                str(vm.qmp_socket),
                "--sandbox",
                "sb",
                "--limit",
                "1Gi",
                *HOST_ARGS,
                "--json",
            )
        )

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    docs = sorted((json.loads(r.stdout) for r in results), key=lambda d: d["status"])
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    assert [(d["status"], d["observed_mib"]) for d in docs] == [
        ("NoChange", 1536),
        ("Resized", 1536),
    ]
    with QMPClient(vm.qmp_socket) as q:
        dev = next(
            d["data"] for d in q.execute("query-memory-devices") if d["type"] == "virtio-mem"
        )
        assert dev["size"] == dev["requested-size"] == 1024 * MiB
