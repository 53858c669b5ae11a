"""`kata-mem apply` as a real process against a real QEMU guest (TCG), for what the
backend-independent scenarios (test_scenarios.py) do not cover."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.conftest import REPO, CliResult, write_config
from tests.support.guestvm import BootGuest, GuestSpec

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
