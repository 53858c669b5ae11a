"""The libvirt guest harness against a real libvirtd and a real TCG domain.

Two domain boots in total: one module-scoped domain with the default spec (512 MiB
base, 2 GiB virtio-mem, balloon) shared by the checks, one minimal domain through
the ``boot_libvirt_guest`` factory. The failure test's QEMU exits at once.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest

from tests.support.guestvm import READY_MARKER, GuestBootError, GuestSpec
from tests.support.libvirt_guest import NAME_PREFIX, LibvirtGuest, virsh
from tests.support.waits import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.libvirt_guest import BootLibvirtGuest, DomainMemoryDevice

pytestmark = pytest.mark.libvirt

MIB_KB = 1024


@pytest.fixture(scope="module")
def guest(
    libvirtd: str, guest_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LibvirtGuest]:
    with LibvirtGuest(
        guest_dir, tmp_path_factory.mktemp("libvirt"), GuestSpec(), uri=libvirtd
    ) as g:
        yield g


def _virtio_mem(guest: LibvirtGuest, inactive: bool = False) -> DomainMemoryDevice:
    (dev,) = [d for d in guest.memory_devices(inactive) if d.model == "virtio-mem"]
    return dev


def _wait_current(guest: LibvirtGuest, kib: int, timeout: float = 15.0) -> float:
    """Wait until the live XML's ``<current>`` is ``kib``; return the seconds it took."""
    t0 = time.monotonic()
    wait_until(
        lambda: _virtio_mem(guest).current_kib == kib,
        lambda: f"<current> is {kib} KiB, not {_virtio_mem(guest).current_kib}",
        timeout,
        0.1,
    )
    return time.monotonic() - t0


def test_boot_and_status(guest: LibvirtGuest) -> None:
    assert guest.name.startswith(NAME_PREFIX)
    assert guest.uri == "qemu:///system"
    assert guest.is_alive()
    assert guest.domstate() == "running"
    assert guest.boot_seconds is not None
    assert READY_MARKER in guest.console_log.read_text(errors="replace")
    assert guest.ctl_socket.is_socket()
    mem = guest.status()
    # 512 MiB base leaves ~393 MiB MemTotal, as under plain QEMU.
    assert 380 * MIB_KB <= mem.total_kb <= 420 * MIB_KB, mem
    assert mem.online_blocks == mem.total_blocks > 0
    assert guest.alloc(32) == "OK alloc 32 held=32"
    assert guest.free() == "OK free"


def test_live_domain_xml(guest: LibvirtGuest) -> None:
    root = ET.fromstring(guest.dumpxml())
    assert root.get("type") == "qemu"  # TCG, never KVM
    machine = root.find("os/type")
    assert machine is not None
    assert (machine.get("machine") or "").startswith("pc-q35-")
    max_mem = root.find("maxMemory")
    assert max_mem is not None
    assert (max_mem.get("slots"), max_mem.get("unit"), max_mem.text) == ("8", "KiB", "16777216")
    # libvirt put the virtio-mem device behind a pcie-root-port it added itself.
    ports = root.findall("devices/controller[@model='pcie-root-port']")
    assert ports
    dev = _virtio_mem(guest)
    assert dev.alias == guest.virtio_mem_alias == "virtiomem0"
    assert (dev.size_kib, dev.block_kib, dev.node) == (2048 * MIB_KB, 2048, 0)
    assert dev.requested_kib == dev.current_kib == 0
    # <current> exists in the live XML only.
    assert _virtio_mem(guest, inactive=True).current_kib is None


def test_dommemstat(guest: LibvirtGuest) -> None:

    def guest_stats() -> dict[str, int]:
        stats = {}
        for line in guest.virsh("dommemstat", guest.name).splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                stats[key] = int(value)
        return stats if "available" in stats else {}

    # Guest stats arrive with the 1 s stats period.
    stats = wait_until(guest_stats, "guest stats from dommemstat", 15, 0.25)
    mem = guest.status()
    assert stats["actual"] == 512 * MIB_KB  # balloon: the base memory, not the devices
    assert abs(stats["available"] - mem.total_kb) <= 4 * MIB_KB, (stats, mem)
    assert 0 < stats["usable"] <= stats["available"]
    assert stats["rss"] > 0


def test_virtio_mem_update_memory_device(guest: LibvirtGuest) -> None:
    alias = guest.virtio_mem_alias
    before = guest.status()
    guest.virsh(
        "update-memory-device", guest.name, "--alias", alias, "--requested-size", "256MiB", "--live"
    )
    grown = guest.wait_mem(lambda m: m.total_kb >= before.total_kb + 256 * MIB_KB, timeout=15)
    assert grown.total_kb - before.total_kb == 256 * MIB_KB, (before, grown)
    _wait_current(guest, 256 * MIB_KB)
    assert _virtio_mem(guest).requested_kib == 256 * MIB_KB
    assert _virtio_mem(guest, inactive=True).requested_kib == 0  # --live only

    guest.virsh(
        "update-memory-device", guest.name, "--alias", alias, "--requested-size", "0", "--live"
    )
    guest.wait_mem(lambda m: m.total_kb <= before.total_kb, timeout=20)
    _wait_current(guest, 0)


def test_factory_minimal_domain_and_stop(boot_libvirt_guest: BootLibvirtGuest) -> None:
    g = boot_libvirt_guest(GuestSpec(virtio_mem_mib=0, balloon=False))
    assert g.memory_devices() == []
    root = ET.fromstring(g.dumpxml())
    balloon = root.find("devices/memballoon")
    assert balloon is not None
    assert balloon.get("model") == "none"
    assert g.status().total_kb > 0
    g.stop()
    assert not g.is_alive()
    assert g.domstate() == ""
    assert virsh(g.uri, "dominfo", g.name, check=False).returncode != 0  # undefined
    assert not g.ctl_socket.exists()
    g.stop()  # idempotent


def test_boot_failure_is_reported(libvirtd: str, guest_dir: Path, tmp_path: Path) -> None:
    # A workdir too long for sun_path: the ctl socket goes to a short temp dir.
    workdir = tmp_path / ("w" * 120)
    spec = GuestSpec(virtio_mem_mib=0, extra_qemu_args=("-device", "no-such-device-kmtest"))
    g = LibvirtGuest(guest_dir, workdir, spec, uri=libvirtd)
    assert len(str(g.ctl_socket)) <= 100
    with pytest.raises(GuestBootError, match="no-such-device-kmtest"):
        g.start(timeout=60)
    assert not g.is_alive()
    assert virsh(libvirtd, "dominfo", g.name, check=False).returncode != 0
    assert not g.ctl_socket.parent.exists()
