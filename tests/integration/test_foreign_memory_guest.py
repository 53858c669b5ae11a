"""Memory kata-mem did not plug, on the real guest behind QEMU's QMP: another tool's
DIMM of an odd size, memory left plugged in a virtio-mem device. kata-mem plugs only
DIMMs of whole guest memory blocks that land on a block, or says why it cannot; the
guest's own MemTotal shows what it got."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliResult
from tests.support.configs import HOST_ARGS, guest_config
from tests.support.guestvm import BootGuest, GuestSpec, GuestVM
from tests.support.qmp_min import QMPClient
from tests.support.waits import wait_until

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
MiB, KiB_PER_MiB = 1 << 20, 1024


def _plug(vm: GuestVM, dimm: str, memdev: str, mib: int) -> None:
    """Another tool's DIMM, as it would plug one."""
    with QMPClient(vm.qmp_socket) as q:
        q.execute("object-add", {"qom-type": "memory-backend-ram", "id": memdev, "size": mib * MiB})
        q.execute("device_add", {"driver": "pc-dimm", "id": dimm, "memdev": memdev})
        q.wait_event("ACPI_DEVICE_OST", timeout=20)


def _dimms(vm: GuestVM) -> dict[str, int]:
    with QMPClient(vm.qmp_socket) as q:
        return {
            d["data"]["id"]: d["data"]["size"]
            for d in q.execute("query-memory-devices")
            if d["type"] == "dimm"
        }


def _apply(run_cli: Run, cfg: Path, vm: GuestVM, *args: str) -> tuple[int, dict[str, Any]]:
    r = run_cli(
        "apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket), "--sandbox", "sb",
        *HOST_ARGS, "--json", *args,
    )  # fmt: skip
    assert r.out.strip(), r.err
    return r.code, json.loads(r.out)


def test_after_another_tools_odd_dimm_no_dimm_is_plugged_off_a_block(
    boot_guest: BootGuest, tmp_path: Path, run_cli: Run
) -> None:
    # Before: `plug_dimm kmdimm0 184 MiB`, "Resized: guest memory 896 MiB (verified)", and
    # the guest never got it ("unaligned hotplug range"; ACPI _OST said success).
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    _plug(vm, "otherdimm", "othermem", 200)  # at the start of the area: ends off a block
    total = vm.status().total_kb
    code, out = _apply(run_cli, guest_config(tmp_path, virtio=False), vm, "--limit", "300Mi")
    assert (code, out["status"], out["reason"]) == (0, "Infeasible", "BackendCannotGrow"), out
    assert (
        "dimm otherdimm at 0x100000000 (200 MiB) does not start and end on a 128 MiB block"
        in (out["message"])
    )
    assert _dimms(vm) == {"otherdimm": 200 * MiB}
    assert vm.status().total_kb == total


def test_a_dimm_is_whole_blocks_on_top_of_memory_that_is_not(
    boot_guest: BootGuest, tmp_path: Path, run_cli: Run
) -> None:
    # A pc-dimm VM with 2 MiB left plugged in its virtio-mem device and another tool's
    # 256 MiB DIMM: 770 MiB. Before: `plug_dimm 254 MiB` (1024 - 770), which the guest
    # refused; now 256 MiB, and the guest's MemTotal grows by all of it.
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    booted = vm.status().total_kb
    with QMPClient(vm.qmp_socket) as q:
        q.execute(
            "qom-set",
            {"path": "/machine/peripheral/vm0", "property": "requested-size", "value": 2 * MiB},
        )
    plugged = vm.wait_mem(lambda m: m.total_kb > booted, timeout=15).total_kb
    _plug(vm, "otherdimm", "othermem", 256)  # after vm0's region (4-6 GiB): on a block
    before = plugged + 256 * KiB_PER_MiB
    assert vm.wait_mem(lambda m: m.total_kb >= before, timeout=15).total_kb == before
    code, out = _apply(run_cli, guest_config(tmp_path, virtio=False), vm, "--limit", "512Mi")
    assert (code, out["status"]) == (0, "Resized"), out
    assert [s["size_mib"] for s in out["steps"]] == [256], out["steps"]
    assert _dimms(vm)["kmdimm0"] == 256 * MiB
    grown = before + 256 * KiB_PER_MiB
    assert vm.wait_mem(lambda m: m.total_kb >= grown, timeout=15).total_kb == grown


def _virtio_mems(vm: GuestVM) -> dict[str, tuple[int, int]]:
    """QEMU's virtio-mem devices: id -> (size, requested-size) in MiB."""
    with QMPClient(vm.qmp_socket) as q:
        return {
            d["data"]["id"]: (d["data"]["size"] // MiB, d["data"]["requested-size"] // MiB)
            for d in q.execute("query-memory-devices")
            if d["type"] == "virtio-mem"
        }


def test_of_two_virtio_mem_devices_only_katas_is_resized(
    boot_guest: BootGuest, tmp_path: Path, run_cli: Run
) -> None:
    # Another tool's device first (QEMU lists it first), then Kata's virtiomem0. Before:
    # kata-mem grew othervmem, then shrank it to 2 MiB under its owner, and left vm0 alone.
    other = (
        "-object", "memory-backend-ram,id=othermem,size=1024M",
        "-device", "pcie-root-port,id=rp0,bus=pcie.0,chassis=1,slot=1",
        "-device", "virtio-mem-pci,id=othervmem,memdev=othermem,requested-size=256M,"
        "block-size=2M,bus=rp0",
        "-object", "memory-backend-ram,id=katamem,size=2048M",
        "-device", "pcie-root-port,id=rp1,bus=pcie.0,chassis=2,slot=2",
        "-device", "virtio-mem-pci,id=virtiomem0,memdev=katamem,requested-size=0,"
        "block-size=2M,bus=rp1",
    )  # fmt: skip
    vm = boot_guest(GuestSpec(virtio_mem_mib=0, extra_qemu_args=other))
    wait_until(  # its driver plugs it as the guest boots
        lambda: _virtio_mems(vm)["othervmem"] == (256, 256),
        lambda: f"the other virtio-mem device is plugged: {_virtio_mems(vm)}",
        timeout=30,
        interval=0.2,
    )
    cfg = guest_config(tmp_path, virtio=True)
    before = vm.status().total_kb
    code, out = _apply(run_cli, cfg, vm, "--limit", "512Mi")
    assert (code, out["status"]) == (0, "Resized"), out
    assert {s["device"] for s in out["steps"]} == {"virtiomem0"}
    # 512 + 512 MiB asked; othervmem's 256 MiB count as what the guest has.
    assert _virtio_mems(vm) == {"othervmem": (256, 256), "virtiomem0": (256, 256)}
    grown = before + 256 * KiB_PER_MiB
    assert vm.wait_mem(lambda m: m.total_kb >= grown, timeout=15).total_kb == grown
    code, out = _apply(run_cli, cfg, vm, "--allow-shrink")
    assert (code, out["status"]) == (0, "Resized"), out
    assert _virtio_mems(vm) == {"othervmem": (256, 256), "virtiomem0": (0, 0)}
