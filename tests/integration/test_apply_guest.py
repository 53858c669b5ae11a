"""`kata-mem apply` as a real process against a real QEMU guest (TCG), for what the
backend-independent scenarios (test_scenarios.py) do not cover."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import HOST_ARGS, guest_config
from tests.support.guestvm import BootGuest, GuestSpec

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
KiB_PER_MiB = 1024


def test_real_process_dry_run_changes_nothing(boot_guest: BootGuest, tmp_path: Path) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    before = vm.status().total_kb
    r = kata_mem_process(
        "apply",
        "--config",
        str(cfg),
        "--qmp",
        str(vm.qmp_socket),
        "--limit",
        "1Gi",
        "--dry-run",
        "--json",
        *HOST_ARGS,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["status"], doc["observed_mib"]) == ("Resized", 1536)
    assert vm.status().total_kb == before
    assert not (tmp_path / "state").exists()
