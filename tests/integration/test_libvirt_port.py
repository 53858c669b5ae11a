"""The libvirt backend behind the six-method port, on libvirt's ``test:///default``
driver (no daemon): connecting and reading change nothing, the statistics period is set
through the port (by the executor); device space follows the same rule as QEMU's."""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is part of the test extra")
from kata_mem.backends.libvirt import LibvirtBackend  # noqa: E402

URI = "test:///default"
MiB = 1 << 20


@pytest.fixture
def conn() -> Iterator[Any]:
    c = libvirt.open(URI)
    yield c
    c.close()


@pytest.fixture
def domain(conn: Any) -> Callable[[str, int], tuple[str, Any]]:
    def define(devices: str, memory_mib: int) -> tuple[str, Any]:
        name = f"kata-mem-port-{uuid.uuid4().hex[:8]}"
        dom = conn.defineXML(
            f"""<domain type='test'><name>{name}</name><uuid>{uuid.uuid4()}</uuid>
  <maxMemory slots='4' unit='MiB'>8192</maxMemory><memory unit='MiB'>{memory_mib}</memory>
  <vcpu>1</vcpu><cpu><numa><cell id='0' cpus='0' memory='512' unit='MiB'/></numa></cpu>
  <os><type>hvm</type></os><devices>{devices}</devices></domain>"""
        )
        dom.create()
        return name, dom

    return define


def _period(dom: Any) -> Optional[str]:
    stats = ET.fromstring(dom.XMLDesc(0)).find("./devices/memballoon/stats")
    return None if stats is None else stats.get("period")


def test_connecting_and_reading_change_nothing_and_the_port_sets_the_period(
    domain: Callable[[str, int], tuple[str, Any]],
) -> None:
    name, dom = domain("<memballoon model='virtio'/>", 512)
    dom.setMemoryStatsPeriod(5, libvirt.VIR_DOMAIN_AFFECT_LIVE)  # the domain's own
    backend = LibvirtBackend.connect(URI, name, {})
    try:
        backend.observe()
        assert backend.guest_usage() is not None
        assert _period(dom) == "5"
        # Setting it is the executor's, through the port: it says what the domain had.
        assert backend.set_stats_interval(2) == 5 and _period(dom) == "2"
        assert backend.set_stats_interval(2) == 2
    finally:
        backend.close()


def test_status_and_the_presence_check_change_nothing(
    domain: Callable[[str, int], tuple[str, Any]], tmp_path: Path
) -> None:
    from kata_mem.core.endpoint import Endpoint
    from kata_mem.orchestration.connect import vm_gone
    from kata_mem.orchestration.status import read_status

    name, dom = domain("<memballoon model='virtio'/>", 512)
    dom.setMemoryStatsPeriod(5, libvirt.VIR_DOMAIN_AFFECT_LIVE)  # the domain's own
    endpoint = Endpoint("libvirt", URI, name)
    assert vm_gone(endpoint) is None  # reconcile's question: a read-only connection
    assert _period(dom) == "5"
    seen = read_status(endpoint, "sb", str(tmp_path / "state"), {})
    assert seen.vm.base == 512 * MiB and seen.usage is not None
    assert _period(dom) == "5"


def test_a_domain_without_a_balloon_has_no_period_to_set(
    domain: Callable[[str, int], tuple[str, Any]],
) -> None:
    name, dom = domain("<memballoon model='none'/>", 512)
    backend = LibvirtBackend.connect(URI, name, {})
    try:
        assert backend.set_stats_interval(2) is None
    finally:
        backend.close()
    assert _period(dom) is None


def test_other_memory_devices_take_device_space_as_in_qemu(
    domain: Callable[[str, int], tuple[str, Any]],
) -> None:
    dimm = (
        "<memory model='dimm'><target><size unit='MiB'>256</size><node>0</node></target>"
        "<alias name='ua-kmdimm0'/><address type='dimm' slot='0'/></memory>"
    )
    nvdimm = (
        "<memory model='nvdimm'><source><path>/tmp/kata-mem-nvdimm</path></source>"
        "<target><size unit='MiB'>128</size><node>0</node></target></memory>"
    )
    name, _ = domain(dimm + nvdimm, 512 + 256 + 128)
    backend = LibvirtBackend.connect(URI, name, {})
    try:
        vm = backend.observe()
    finally:
        backend.close()
    assert [(d.id, d.kind) for d in vm.devices] == [("kmdimm0", "dimm")]
    # maxmem - boot memory - the nvdimm's space, as QEMU's maxmem - size counts it.
    assert (vm.base, vm.device_space) == (512 * MiB, (8192 - 512 - 128) * MiB)
