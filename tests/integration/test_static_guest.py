"""A VM Kata sized at boot (``static_sandbox_resource_mgmt``, runtime-rs's default), resized
after boot on the real guest: Kata never resizes it, kata-mem does, through the hotplug
region QEMU still has (``-m SIZE,slots=N,maxmem=M``), to the size Kata would boot the
workload with now, and never below the memory it booted with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import CliResult, apply_qmp
from tests.support.configs import GUEST_KERNEL_PARAMS, write_config
from tests.support.guestvm import BootGuest, GuestSpec

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
KiB_PER_MiB = 1024


def test_a_vm_kata_sized_at_boot_is_resized_through_its_hotplug_region(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    """runtime-rs boots a pod of 256 MiB at overhead_memory 256 + 256 = 512 MiB, the test
    guest's boot memory (InitialSizeManager::setup_config). Its limit raised to 768 MiB,
    Kata would boot it at 1024: kata-mem plugs one 512 MiB DIMM, and the guest sees it.
    Back to 256 MiB, the DIMM goes (the guest onlines movable). Down to 64 MiB, Kata would
    boot 320 MiB, below the 512 the VM booted with: Infeasible, the VM untouched."""
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 2048,
            "default_maxmemory": 0,
            "memory_slots": 8,
            "overhead_memory": 256,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
        runtime={"static_sandbox_resource_mgmt": True},
        kata_mem={"runtime": "runtime-rs", "state_dir": str(tmp_path / "state")},
    )
    base_kb = vm.status().total_kb

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "NoChange", 512), doc
    assert doc["plan"]["memory"]["base_mib"] == 512
    assert doc["plan"]["config"]["static_sandbox_resource_mgmt"] is True

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "768Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 1024), doc
    assert [(s["action"], s["size_mib"]) for s in doc["steps"]] == [("plug_dimm", 512)]
    grown = vm.wait_mem(lambda m: m.total_kb >= base_kb + 512 * KiB_PER_MiB, timeout=15)
    assert grown.total_kb == base_kb + 512 * KiB_PER_MiB

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi", "--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 512), doc
    assert [(s["action"], s["size_mib"]) for s in doc["steps"]] == [("unplug_dimm", 512)]
    assert vm.wait_mem(lambda m: m.total_kb <= base_kb, timeout=15).total_kb == base_kb

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "64Mi", "--allow-shrink")
    assert (code, doc["status"], doc["reason"], doc["observed_mib"]) == (
        0,
        "Infeasible",
        "BelowBaseMemory",
        512,
    ), doc
    assert "Kata sized the VM at boot" in doc["message"], doc
    assert doc["steps"] == [] and vm.status().total_kb == base_kb
