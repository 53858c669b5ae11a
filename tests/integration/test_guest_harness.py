"""The guest harness against the real tiny guest (QEMU TCG).

Two guest boots in total: one module-scoped guest with the default spec shared by
the memory checks, one minimal guest for the power-off path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.support.guestvm import GuestBootError, GuestMem, GuestSpec, GuestVM
from tests.support.qmp_min import QMPClient
from tests.support.waits import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.guestvm import BootGuest

pytestmark = pytest.mark.guest

MIB_KB = 1024
U64_MINUS_1 = 2**64 - 1


@pytest.fixture(scope="module")
def guest(guest_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuestVM]:
    vm = GuestVM(guest_dir, tmp_path_factory.mktemp("guest"), GuestSpec())
    try:
        vm.start()
        yield vm
    finally:
        vm.stop()


def test_boot_and_status(guest: GuestVM) -> None:
    assert guest.is_alive()
    assert guest.pid > 0
    assert "KATA-MEM-GUEST-READY" in guest.console_log.read_text(errors="replace")
    assert guest.qmp_socket.is_socket()
    mem = guest.status()
    # -m 512M leaves ~393 MiB MemTotal (kernel + initramfs take the rest).
    assert 380 * MIB_KB <= mem.total_kb <= 420 * MIB_KB, mem
    assert 0 < mem.avail_kb <= mem.total_kb
    assert 0 < mem.free_kb <= mem.total_kb
    assert mem.total_blocks > 0
    assert mem.online_blocks == mem.total_blocks
    assert mem.held_mib == 0


def test_alloc_and_free(guest: GuestVM) -> None:
    before = guest.status()
    assert guest.alloc(64) == "OK alloc 64 held=64"
    held = guest.status()
    assert held.held_mib == 64
    assert held.avail_kb <= before.avail_kb - 60 * MIB_KB, (before, held)
    assert guest.free() == "OK free"
    after = guest.wait_mem(lambda m: m.avail_kb >= before.avail_kb - 8 * MIB_KB, timeout=10)
    assert after.held_mib == 0
    # More than the guest has: refused instead of an OOM panic.
    reply = guest.alloc(100_000, check=False)
    assert reply.startswith("ERR alloc 100000"), reply
    assert guest.is_alive()


def test_pc_dimm_hotplug_and_unplug(guest: GuestVM) -> None:
    before = guest.status()
    with QMPClient(guest.qmp_socket) as qmp:
        assert qmp.cmd(
            "object-add", {"qom-type": "memory-backend-ram", "id": "m1", "size": 128 << 20}
        ) == {"return": {}}
        assert qmp.cmd("device_add", {"driver": "pc-dimm", "id": "d1", "memdev": "m1"}) == {
            "return": {}
        }
        grown = guest.wait_mem(lambda m: m.total_kb >= before.total_kb + 127 * MIB_KB, timeout=15)
        assert abs(grown.total_kb - before.total_kb - 128 * MIB_KB) <= MIB_KB, (before, grown)
        assert grown.online_blocks == grown.total_blocks == before.total_blocks + 1
        ost = qmp.wait_event("ACPI_DEVICE_OST", timeout=5)
        assert ost["data"]["info"]["device"] == "d1"

        # Unplug works because the guest onlines hotplugged memory as movable.
        assert qmp.cmd("device_del", {"id": "d1"}) == {"return": {}}
        deleted = qmp.wait_event("DEVICE_DELETED", timeout=15)
        assert deleted["data"].get("device") == "d1"
        shrunk = guest.wait_mem(lambda m: m.total_kb <= before.total_kb, timeout=10)
        assert shrunk.total_blocks == before.total_blocks
        assert qmp.cmd("object-del", {"id": "m1"}) == {"return": {}}


def test_virtio_mem_resize(guest: GuestVM) -> None:
    vm0 = "/machine/peripheral/vm0"
    before = guest.status()
    with QMPClient(guest.qmp_socket) as qmp:
        r = qmp.cmd("qom-set", {"path": vm0, "property": "requested-size", "value": 256 << 20})
        assert r == {"return": {}}
        grown = guest.wait_mem(lambda m: m.total_kb >= before.total_kb + 256 * MIB_KB, timeout=15)
        assert grown.total_kb - before.total_kb == 256 * MIB_KB, (before, grown)
        assert qmp.execute("qom-get", {"path": vm0, "property": "size"}) == 256 << 20
        devices = qmp.execute("query-memory-devices")
        (vmem,) = [d for d in devices if d["type"] == "virtio-mem"]
        assert vmem["data"]["size"] == 256 << 20
        assert vmem["data"]["requested-size"] == 256 << 20

        qmp.execute("qom-set", {"path": vm0, "property": "requested-size", "value": 0})
        guest.wait_mem(lambda m: m.total_kb <= before.total_kb, timeout=20)
        wait_until(
            lambda: qmp.execute("qom-get", {"path": vm0, "property": "size"}) == 0,
            "the virtio-mem size returns to 0",
            interval=0.1,
        )


def test_balloon_guest_stats(guest: GuestVM) -> None:
    balloon = "/machine/peripheral/balloon0"
    with QMPClient(guest.qmp_socket) as qmp:
        qmp.execute(
            "qom-set",
            {"path": balloon, "property": "guest-stats-polling-interval", "value": 1},
        )

        def reported() -> dict[str, Any]:
            stats: dict[str, Any] = qmp.execute(
                "qom-get", {"path": balloon, "property": "guest-stats"}
            )
            return stats if stats["stats"]["stat-total-memory"] not in (-1, U64_MINUS_1) else {}

        stats = wait_until(reported, "the balloon reports the guest's statistics", 15, 0.25)
        total = stats["stats"]["stat-total-memory"]
        assert stats["last-update"] > 0
        mem = guest.status()
        assert abs(total // 1024 - mem.total_kb) <= 4 * MIB_KB, (total, mem)
        assert qmp.execute("query-balloon")["actual"] > 0


def test_minimal_guest_poweroff(boot_guest: BootGuest) -> None:
    # Also covers the bzImage fallback (used when build-guest.sh made no PVH vmlinux).
    vm = boot_guest(GuestSpec(virtio_mem_mib=0, balloon=False, kernel="vmlinuz"))
    assert vm.kernel.name == "vmlinuz"
    assert vm.boot_seconds is not None
    assert vm.boot_seconds < 90
    mem = vm.status()
    assert isinstance(mem, GuestMem)
    with QMPClient(vm.qmp_socket) as qmp:
        assert qmp.execute("query-memory-devices") == []
        assert qmp.cmd("qom-get", {"path": "/machine/peripheral/vm0", "property": "size"})["error"][
            "class"
        ] in ("DeviceNotFound", "GenericError")
    assert vm.poweroff(timeout=30) == 0
    assert not vm.is_alive()
    assert not vm.qmp_socket.exists()
    assert not vm.ctl_socket.exists()
    vm.stop()  # idempotent


def test_qemu_failure_is_reported(guest_dir: Path, tmp_path: Path) -> None:
    spec = GuestSpec(extra_qemu_args=("-device", "no-such-device-kmtest"))
    vm = GuestVM(guest_dir, tmp_path, spec)
    with pytest.raises(GuestBootError, match="QEMU exited") as info:
        vm.start(timeout=30)
    assert "no-such-device-kmtest" in str(info.value)
    assert not vm.is_alive()
