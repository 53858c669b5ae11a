"""Readings told apart by QEMU's count of balloon reports, on a real guest:
a reading asked for (polling interval 0 and back) arrives at once and is counted, and a
safe shrink that asks for them leaves the configured polling interval in place."""

from __future__ import annotations

from pathlib import Path

import pytest

from kata_mem.backends.qmp import QmpBackend
from kata_mem.core.model import Workload
from kata_mem.edges.config import load_config
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from tests.support.configs import HOST, guest_config
from tests.support.guestvm import BootGuest, GuestSpec
from tests.support.qmp_min import QMPClient
from tests.support.waits import wait_until

pytestmark = pytest.mark.guest

BALLOON = "/machine/peripheral/balloon0"
GiB = 1 << 30
#: Long enough that no report comes by itself while the test looks.
SLOW_S = 600


def test_a_reading_asked_for_arrives_at_once_with_a_new_count(boot_guest: BootGuest) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    backend = QmpBackend.connect(str(vm.qmp_socket))
    try:
        backend.set_stats_interval(1)
        wait_until(
            lambda: (u := backend.guest_usage()) is not None and u.last_update is not None,
            "a first reading",
        )
        # From now on the guest reports only every SLOW_S seconds by itself.
        backend.set_stats_interval(SLOW_S)
        before = backend.guest_usage()
        assert before is not None and isinstance(before.sequence, int)
        backend.set_stats_interval(0)
        backend.set_stats_interval(SLOW_S)
        after = wait_until(
            lambda: (u := backend.guest_usage()) is not None and u.sequence != before.sequence,
            "a reading counted after the one before",
            timeout=5,
        )
        assert after
        assert backend.set_stats_interval(SLOW_S) == SLOW_S  # put back, not left at 0
    finally:
        backend.close()


def test_a_safe_shrink_leaves_the_configured_polling(boot_guest: BootGuest, tmp_path: Path) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    with QMPClient(vm.qmp_socket) as q:
        q.execute(
            "qom-set",
            {"path": "/machine/peripheral/vm0", "property": "requested-size", "value": GiB},
        )
    vm.wait_mem(lambda m: m.total_kb > 1024 * 1024, timeout=30)
    cfg = load_config(guest_config(tmp_path, virtio=True, stats_interval_s=2))
    r = run_locked(
        SandboxState(tmp_path / "state", "sb"),
        lambda: QmpBackend.connect(str(vm.qmp_socket)),
        cfg,
        HOST,
        Workload(()),
        Options(allow_shrink=True),
    )
    assert r.outcome.status == "Resized", r.outcome
    with QMPClient(vm.qmp_socket) as q:
        interval = q.execute(
            "qom-get", {"path": BALLOON, "property": "guest-stats-polling-interval"}
        )
    assert interval == 2
