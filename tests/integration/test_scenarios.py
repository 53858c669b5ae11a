"""The backend-independent scenarios, run on both backends: a real guest behind QEMU's
QMP, and the same guest as a libvirt domain. One parametrized suite, so that the two
backends cannot drift apart."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import pytest

from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST_ARGS, write_config
from tests.support.guestvm import GuestSpec, GuestVM
from tests.support.libvirt_guest import LibvirtGuest
from tests.support.paths import PODS
from tests.support.waits import wait_until

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
KiB_PER_MiB = 1024
HEADROOM_KB = 128 * KiB_PER_MiB
Guest = Union[GuestVM, LibvirtGuest]


@dataclass
class Sandbox:
    """A booted guest, the kata-mem options that reach it, and its configuration."""

    guest: Guest
    endpoint: tuple[str, ...]
    tmp: Path
    run_cli: Run

    def configure(self, *, virtio: bool, maxmem: int = 4096, slots: int = 8) -> None:
        self.cfg = write_config(
            self.tmp / "configuration.toml",
            {
                "default_memory": 512,
                "default_maxmemory": maxmem,
                "memory_slots": slots,
                "enable_virtio_mem": virtio,
                "kernel_params": GUEST_KERNEL_PARAMS,
            },
            kata_mem={"state_dir": str(self.tmp / "state"), "step_timeout_s": 20},
        )

    def apply(self, *args: str) -> tuple[int, dict[str, Any]]:
        r = self.run_cli(
            "apply",
            "--config",
            str(self.cfg),
            *self.endpoint,
            "--sandbox",
            "sb",
            *HOST_ARGS,
            "--json",
            *args,
        )
        assert r.out.strip(), r.err
        return r.code, json.loads(r.out)

    def status(self) -> dict[str, Any]:
        r = self.run_cli(
            "status",
            *self.endpoint,
            "--sandbox",
            "sb",
            "--state-dir",
            str(self.tmp / "state"),
            "--json",
        )
        assert r.code == 0, r.err
        doc: dict[str, Any] = json.loads(r.out)
        return doc


@pytest.fixture(params=["qmp", "libvirt"])
def sandbox(
    request: pytest.FixtureRequest, tmp_path: Path, run_cli: Run
) -> Callable[[GuestSpec], Sandbox]:
    def boot(spec: GuestSpec) -> Sandbox:
        if request.param == "qmp":
            vm: Guest = request.getfixturevalue("boot_guest")(spec)
            assert isinstance(vm, GuestVM)
            endpoint: tuple[str, ...] = ("--qmp", str(vm.qmp_socket))
        else:
            vm = request.getfixturevalue("boot_libvirt_guest")(spec)
            assert isinstance(vm, LibvirtGuest)
            endpoint = ("--libvirt", vm.uri, "--domain", vm.name)
        return Sandbox(vm, endpoint, tmp_path, run_cli)

    return boot


def test_dimm_growth_is_seen_by_the_guest(sandbox: Callable[[GuestSpec], Sandbox]) -> None:
    sb = sandbox(GuestSpec(virtio_mem_mib=0))
    sb.configure(virtio=False)
    before = sb.guest.status().total_kb
    code, doc = sb.apply("--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768), doc
    assert [(s["action"], s["device"], s["size_mib"]) for s in doc["steps"]] == [
        ("plug_dimm", "kmdimm0", 256)
    ]
    after = sb.guest.wait_mem(lambda m: m.total_kb >= before + 256 * KiB_PER_MiB, timeout=15)
    assert after.total_kb == before + 256 * KiB_PER_MiB
    code, again = sb.apply("--limit", "256Mi")
    assert (code, again["status"], again["steps"]) == (0, "NoChange", [])
    st = sb.status()
    assert (st["base_mib"], st["plugged_mib"], st["total_mib"], st["slots_used"]) == (
        512,
        256,
        768,
        1,
    )

    # The guest's latest reading, as it is: one that shows the DIMM comes within an interval.
    def shown() -> bool:
        nonlocal st
        st = sb.status()
        return st["guest"] is not None and bool(
            st["guest"]["total_mib"] == after.total_kb // KiB_PER_MiB
        )

    wait_until(shown, "a balloon reading that shows the DIMM", timeout=10, interval=0.2)


def test_dimm_shrink_when_the_guest_cooperates(sandbox: Callable[[GuestSpec], Sandbox]) -> None:
    sb = sandbox(GuestSpec(virtio_mem_mib=0))
    sb.configure(virtio=False)
    base_kb = sb.guest.status().total_kb
    assert sb.apply("--limit", "256Mi")[1]["status"] == "Resized"
    want = base_kb + 256 * KiB_PER_MiB
    assert sb.guest.wait_mem(lambda m: m.total_kb >= want, timeout=15).total_kb == want
    sb.status()  # reads only: the apply turned on balloon statistics
    code, doc = sb.apply("--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 512), doc
    assert [(s["action"], s["device"]) for s in doc["steps"]] == [("unplug_dimm", "kmdimm0")]
    assert sb.guest.wait_mem(lambda m: m.total_kb <= base_kb, timeout=15).total_kb == base_kb
    assert sb.status()["devices"] == []


def test_virtio_mem_growth_and_safe_shrink(sandbox: Callable[[GuestSpec], Sandbox]) -> None:
    sb = sandbox(GuestSpec(virtio_mem_mib=2048))
    sb.configure(virtio=True)
    base_kb = sb.guest.status().total_kb
    code, doc = sb.apply("--pod", str(PODS / "two-containers.yaml"))
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 2560), doc
    assert [(s["action"], s["size_mib"]) for s in doc["steps"]] == [("resize_virtio_mem", 2048)]
    want = base_kb + 2048 * KiB_PER_MiB
    assert sb.guest.wait_mem(lambda m: m.total_kb >= want, timeout=15).total_kb == want
    sb.status()
    code, doc = sb.apply("--limit", "512Mi", "--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 1024), doc
    assert [s["size_mib"] for s in doc["steps"]] == [1792, 1536, 1280, 1024, 768, 512]
    want = base_kb + 512 * KiB_PER_MiB
    assert sb.guest.wait_mem(lambda m: m.total_kb <= want, timeout=15).total_kb == want


def test_shrink_deferred_while_the_guest_holds_memory(
    sandbox: Callable[[GuestSpec], Sandbox],
) -> None:
    sb = sandbox(GuestSpec(virtio_mem_mib=2048))
    sb.configure(virtio=True)
    base_kb = sb.guest.status().total_kb
    assert sb.apply("--limit", "1Gi")[1]["status"] == "Resized"
    total = base_kb + 1024 * KiB_PER_MiB
    assert sb.guest.wait_mem(lambda m: m.total_kb >= total, timeout=15).total_kb == total
    sb.status()
    sb.guest.alloc(700)
    code, doc = sb.apply("--allow-shrink")
    assert (code, doc["status"], doc["reason"]) == (0, "Deferred", "UsageAboveTarget"), doc
    assert "guest usage" in doc["message"]
    mem = sb.guest.status()
    assert sb.guest.is_alive() and mem.total_kb == total and mem.avail_kb > HEADROOM_KB
    sb.guest.free()
    code, doc = sb.apply("--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 512), doc


def test_memory_boom_is_clamped_and_the_guest_runs(sandbox: Callable[[GuestSpec], Sandbox]) -> None:
    sb = sandbox(GuestSpec(virtio_mem_mib=0))
    sb.configure(virtio=False, maxmem=1024)
    before = sb.guest.status().total_kb
    code, doc = sb.apply("--pod", str(PODS / "memory-boom.yaml"))
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 1024), doc
    assert doc["plan"]["memory"]["clamped_by"] == ["default_maxmemory"]
    want = before + 512 * KiB_PER_MiB
    assert sb.guest.wait_mem(lambda m: m.total_kb >= want, timeout=15).total_kb == want
    sb.guest.alloc(300)
    assert sb.guest.is_alive() and sb.guest.status().held_mib == 300


def test_exhausted_slots_give_no_free_slots(sandbox: Callable[[GuestSpec], Sandbox]) -> None:
    sb = sandbox(GuestSpec(virtio_mem_mib=0, slots=2))
    sb.configure(virtio=False, slots=2)
    for limit, total in (("128Mi", 640), ("256Mi", 768)):
        code, doc = sb.apply("--limit", limit)
        assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", total), doc
    code, doc = sb.apply("--limit", "512Mi")
    assert (code, doc["status"], doc["reason"], doc["observed_mib"]) == (
        0,
        "Infeasible",
        "NoFreeSlots",
        768,
    ), doc
    assert sb.guest.is_alive()


def test_a_grow_still_plugging_after_a_crash_is_waited_for(
    sandbox: Callable[[GuestSpec], Sandbox],
) -> None:
    """kill -9 right after a virtio-mem grow's ``requested-size`` was set, and the next call
    at once: it may find the device still plugging. Under libvirt it does, whatever the
    guest has done: the live XML's ``<current>`` follows QEMU's MEMORY_DEVICE_SIZE_CHANGE
    events, which QEMU sends at most one a second. The call waits for the plug, then plans
    from it: NoChange, as the guest has it all. Before, it planned the rest as a grow of its
    own, measured from a guest reading that already showed it, and waited for the guest to
    show that much more: PlugTimeout (exit 8, "it may be down") for a healthy guest."""
    sb = sandbox(GuestSpec(virtio_mem_mib=2048))
    sb.configure(virtio=True)
    base_kb = sb.guest.status().total_kb
    r = kata_mem_process(
        "apply", "--config", str(sb.cfg), *sb.endpoint, "--sandbox", "sb", *HOST_ARGS,
        "--json", "--limit", "1Gi", env={"KATA_MEM_CRASH_AT": "after-command"},
    )  # fmt: skip
    assert r.returncode == 99, r.stderr
    code, doc = sb.apply("--limit", "1Gi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "NoChange", 1536), doc
    want = base_kb + 1024 * KiB_PER_MiB
    assert sb.guest.wait_mem(lambda m: m.total_kb >= want, timeout=15).total_kb == want
