"""`kata-mem apply` and `status` on a real QEMU with a real Linux guest (TCG).

Every number checked here is the guest's own (its MemTotal over the control
port) or QEMU's (query-memory-devices), never kata-mem's own record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.conftest import PODS, REPO, CliResult, write_config
from tests.support.guestvm import BootGuest, GuestSpec, GuestVM

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
KiB_PER_MiB = 1024
HOST = ("--host-memory", "16Gi", "--host-cpus", "4")


def guest_config(tmp_path: Path, *, virtio: bool, maxmem: int = 4096, slots: int = 8) -> Path:
    return write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": maxmem,
            "memory_slots": slots,
            "enable_virtio_mem": virtio,
        },
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": 20},
    )


def apply_json(run_cli: Run, cfg: Path, vm: GuestVM, *args: str) -> tuple[int, dict[str, Any]]:
    r = run_cli("apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket), *HOST, "--json", *args)
    assert r.out.strip(), r.err
    return r.code, json.loads(r.out)


def test_pc_dimm_growth_is_seen_by_the_guest(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    before = vm.status().total_kb
    code, doc = apply_json(run_cli, cfg, vm, "--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768), doc
    assert [(s["action"], s["size_mib"]) for s in doc["steps"]] == [("plug_dimm", 256)]
    after = vm.wait_mem(lambda m: m.total_kb >= before + 256 * KiB_PER_MiB, timeout=10)
    assert after.total_kb == before + 256 * KiB_PER_MiB  # exactly the planned amount

    code, again = apply_json(run_cli, cfg, vm, "--limit", "256Mi")
    assert (code, again["status"], again["steps"]) == (0, "NoChange", [])

    r = run_cli(
        "status", "--qmp", str(vm.qmp_socket), "--state-dir", str(tmp_path / "state"), "--json"
    )
    st = json.loads(r.out)
    assert (st["base_mib"], st["plugged_mib"], st["total_mib"], st["slots"], st["slots_used"]) == (
        512,
        256,
        768,
        8,
        1,
    )
    assert [(d["id"], d["kind"], d["size_mib"]) for d in st["devices"]] == [
        ("kmdimm0", "dimm", 256)
    ]
    # The balloon's MemTotal is the guest's own /proc/meminfo figure.
    assert st["guest"]["total_mib"] == vm.status().total_kb // KiB_PER_MiB


def test_virtio_mem_growth_is_seen_by_the_guest(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    cfg = guest_config(tmp_path, virtio=True)
    before = vm.status().total_kb
    code, doc = apply_json(run_cli, cfg, vm, "--pod", str(PODS / "two-containers.yaml"))
    # 1536Mi + 0.5Gi (the init container runs first and alone): 2048 MiB on top of 512.
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 2560), doc
    assert [(s["action"], s["device"], s["size_mib"]) for s in doc["steps"]] == [
        ("resize_virtio_mem", "vm0", 2048)
    ]
    after = vm.wait_mem(lambda m: m.total_kb >= before + 2048 * KiB_PER_MiB, timeout=10)
    assert after.total_kb == before + 2048 * KiB_PER_MiB
    code, again = apply_json(run_cli, cfg, vm, "--pod", str(PODS / "two-containers.yaml"))
    assert (code, again["status"]) == (0, "NoChange")


def test_memory_boom_is_clamped_and_the_guest_runs(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False, maxmem=1024)
    before = vm.status().total_kb
    code, doc = apply_json(run_cli, cfg, vm, "--pod", str(PODS / "memory-boom.yaml"))
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 1024), doc
    assert doc["plan"]["memory"]["clamped_by"] == ["default_maxmemory"]
    assert doc["plan"]["memory"]["requested_mib"] == 512 + 1000 * 1024
    assert vm.wait_mem(lambda m: m.total_kb >= before + 512 * KiB_PER_MiB, timeout=10)
    vm.alloc(300)  # the guest uses its new memory and stays alive
    assert vm.is_alive() and vm.status().held_mib == 300


def test_exhausted_slots_give_no_free_slots(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0, slots=2))
    cfg = guest_config(tmp_path, virtio=False, slots=2)
    for limit, total in (("128Mi", 640), ("256Mi", 768)):
        code, doc = apply_json(run_cli, cfg, vm, "--limit", limit)
        assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", total), doc
    before = vm.status().total_kb
    code, doc = apply_json(run_cli, cfg, vm, "--limit", "512Mi")
    assert (code, doc["status"], doc["reason"], doc["observed_mib"]) == (
        0,
        "Infeasible",
        "NoFreeSlots",
        768,
    ), doc
    assert "slots" in doc["plan"]["memory"]["clamped_by"]
    assert vm.is_alive() and vm.status().total_kb == before


def test_real_process_dry_run_changes_nothing(boot_guest: BootGuest, tmp_path: Path) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    before = vm.status().total_kb
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kata_mem",
            "apply",
            "--config",
            str(cfg),
            "--qmp",
            str(vm.qmp_socket),
            "--limit",
            "1Gi",
            "--dry-run",
            "--json",
            *HOST,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["status"], doc["observed_mib"]) == ("Resized", 1536)
    assert vm.status().total_kb == before
    assert not (tmp_path / "state").exists()
