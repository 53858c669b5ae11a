"""A shrink of two DIMMs kata-mem plugged on the real guest, without --allow-shrink:
reported as ShrinkNotAllowed (not as memory kata-mem does not own), nothing executed;
with the flag, the whole-DIMM limit is named with the DIMMs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import CliResult, apply_qmp
from tests.support.configs import guest_config
from tests.support.guestvm import BootGuest, GuestSpec

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
KiB_PER_MiB = 1024


def test_shrink_of_two_kata_mem_dimms_is_not_allowed_without_the_flag(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    for limit in ("512Mi", "1Gi"):  # two DIMMs of 512 MiB, both kata-mem's
        code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", limit)
        assert (code, doc["status"]) == (0, "Resized"), doc
    total = vm.wait_mem(lambda m: m.total_kb >= 1400 * KiB_PER_MiB, timeout=10).total_kb

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "768Mi")
    assert (code, doc["status"], doc["reason"]) == (0, "Infeasible", "ShrinkNotAllowed"), doc
    assert doc["plan"]["memory"]["steps"] == [] and doc["steps"] == []
    assert vm.status().total_kb == total

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "768Mi", "--allow-shrink")
    assert (code, doc["status"], doc["reason"]) == (0, "Infeasible", "BackendCannotShrink"), doc
    assert "kmdimm0 512 MiB, kmdimm1 512 MiB" in doc["message"]
    assert vm.status().total_kb == total
