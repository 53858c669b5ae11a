"""The libvirt backend against libvirt's ``test:///default`` driver: the paths it
supports (domain XML, balloon statistics) and the clear Infeasible outcome for the
device changes it does not support (``VIR_ERR_NO_SUPPORT``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.model import OwnedDevice
from kata_mem.core.record import Record
from kata_mem.edges.journal import SandboxState
from tests.support.cli import CliResult
from tests.support.configs import GUEST_KERNEL_PARAMS, write_config

libvirt = pytest.importorskip("libvirt", reason="libvirt-python is part of the test extra")
Run = Callable[..., CliResult]
URI = "test:///default"


def domain_xml(name: str, virtio_mem_mib: int = 0, dimm_mib: int = 0) -> str:
    # The test driver echoes device XML but never plugs anything: a virtio-mem device
    # always shows <current> 0, a DIMM is listed as defined.
    devices = ""
    if virtio_mem_mib:
        devices += (
            f"<memory model='virtio-mem'><target><size unit='MiB'>{virtio_mem_mib}</size><node>0</node>"
            "<block unit='MiB'>2</block><requested unit='MiB'>0</requested></target></memory>"
        )
    if dimm_mib:
        devices += (
            f"<memory model='dimm'><target><size unit='MiB'>{dimm_mib}</size><node>0</node></target>"
            "<alias name='ua-kmdimm0'/><address type='dimm' slot='0'/></memory>"
        )
    return f"""<domain type='test'>
  <name>{name}</name><uuid>{uuid.uuid4()}</uuid>
  <maxMemory slots='4' unit='MiB'>8192</maxMemory>
  <memory unit='MiB'>{512 + virtio_mem_mib + dimm_mib}</memory>
  <vcpu>1</vcpu>
  <cpu><numa><cell id='0' cpus='0' memory='512' unit='MiB'/></numa></cpu>
  <os><type>hvm</type></os>
  <devices>{devices}<memballoon model='virtio'><stats period='1'/></memballoon></devices>
</domain>"""


@pytest.fixture
def conn() -> Iterator[Any]:
    c = libvirt.open(URI)
    yield c
    c.close()


@pytest.fixture
def domain(conn: Any) -> Callable[..., str]:
    def define(**kwargs: int) -> str:
        name = f"kata-mem-test-{uuid.uuid4().hex[:8]}"
        conn.defineXML(domain_xml(name, **kwargs)).create()
        return name

    return define


def record_dimm(tmp_path: Path) -> None:
    """The journal an earlier apply leaves after plugging the domain's ``ua-kmdimm0``: what
    makes it kata-mem's (libvirt shows no backend object, so none is recorded)."""
    state = SandboxState(tmp_path / "state", "sb")
    with state.locked(0):
        state.save(
            Record("sb", owned=tuple([OwnedDevice("kmdimm0", "", 256 << 20, confirmed=True)]))
        )


def apply(
    run_cli: Run, tmp_path: Path, domain: str, virtio: bool, *args: str
) -> tuple[int, dict[str, Any]]:
    """``kata-mem apply --json`` on a test-driver domain: exit code and outcome."""
    r = run_cli(
        "apply",
        "--config",
        str(_cfg(tmp_path, virtio)),
        "--libvirt",
        URI,
        "--domain",
        domain,
        "--sandbox",
        "sb",
        "--host-memory",
        "16Gi",
        "--json",
        *args,
    )
    doc: dict[str, Any] = json.loads(r.out)
    return r.code, doc


def _cfg(tmp_path: Path, virtio: bool) -> Path:
    return write_config(
        tmp_path / "c.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "enable_virtio_mem": virtio,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": 2},
    )


def test_status_reads_the_domain_xml_and_balloon_stats(
    run_cli: Run, conn: Any, domain: Callable[..., str], tmp_path: Path
) -> None:
    name = domain(virtio_mem_mib=1024, dimm_mib=256)

    def status() -> dict[str, Any]:
        r = run_cli(
            "status", "--libvirt", URI, "--domain", name, "--sandbox", "sb", "--state-dir",
            str(tmp_path / "state"), "--json",
        )  # fmt: skip
        assert r.code == 0, r.err
        doc: dict[str, Any] = json.loads(r.out)
        return doc

    # Named like kata-mem's, recorded nowhere: not its own, and said so.
    doc = status()
    assert (doc["devices"][1]["ours"], doc["unproven"]) == (False, ["kmdimm0"])
    record_dimm(tmp_path)
    doc = status()
    assert doc["unproven"] == []
    assert (doc["base_mib"], doc["slots"], doc["device_space_mib"]) == (512, 4, 8192 - 512)
    virtio, dimm = doc["devices"]
    assert (virtio["kind"], virtio["size_mib"], virtio["max_mib"], virtio["block_mib"]) == (
        "virtio-mem",
        0,
        1024,
        2,
    )
    assert (dimm["id"], dimm["kind"], dimm["size_mib"], dimm["slot"], dimm["ours"]) == (
        "kmdimm0",
        "dimm",
        256,
        0,
        True,
    )
    # libvirt's "available" is the guest's MemTotal, "usable" its MemAvailable, "unused" MemFree.
    stats = conn.lookupByName(name).memoryStats()
    g = doc["guest"]
    assert (g["total_mib"], g["available_mib"], g["free_mib"]) == (
        stats["available"] // 1024,
        stats["usable"] // 1024,
        stats["unused"] // 1024,
    )


def test_dimm_attach_is_reported_infeasible_with_the_libvirt_code(
    run_cli: Run, domain: Callable[..., str], tmp_path: Path
) -> None:
    name = domain()
    code, doc = apply(run_cli, tmp_path, name, False, "--limit", "256Mi")
    assert (code, doc["status"], doc["reason"]) == (0, "Infeasible", "BackendCannotGrow"), doc
    assert "VIR_ERR_NO_SUPPORT" in doc["message"] and "virDomainAttachDeviceFlags" in doc["message"]
    assert doc["observed_mib"] == 512


def test_virtio_mem_resize_is_reported_infeasible(
    run_cli: Run, domain: Callable[..., str], tmp_path: Path
) -> None:
    name = domain(virtio_mem_mib=1024)
    _code, doc = apply(run_cli, tmp_path, name, True, "--limit", "512Mi")
    assert (doc["status"], doc["reason"]) == ("Infeasible", "BackendCannotGrow"), doc
    assert "VIR_ERR_NO_SUPPORT" in doc["message"] and "virDomainUpdateDeviceFlags" in doc["message"]


def test_dimm_detach_is_reported_infeasible(
    run_cli: Run, domain: Callable[..., str], tmp_path: Path
) -> None:
    name = domain(dimm_mib=256)
    record_dimm(tmp_path)
    # --force: the test driver's canned statistics are decades old, so the checks would defer.
    _code, doc = apply(run_cli, tmp_path, name, False, "--force")
    assert (doc["status"], doc["reason"]) == ("Infeasible", "BackendCannotShrink"), doc
    assert "VIR_ERR_NO_SUPPORT" in doc["message"] and "virDomainDetachDeviceAlias" in doc["message"]


def test_stale_test_driver_stats_defer_a_shrink(
    run_cli: Run, domain: Callable[..., str], tmp_path: Path
) -> None:
    name = domain(dimm_mib=256)
    record_dimm(tmp_path)
    _code, doc = apply(run_cli, tmp_path, name, False, "--allow-shrink")
    assert (doc["status"], doc["reason"]) == ("Deferred", "UsageUnknown"), doc
    assert "old" in doc["message"]


def test_unavailable(run_cli: Run, tmp_path: Path) -> None:
    # (A URI naming a socket of its own, ``?socket=``, is refused before libvirt is asked:
    # tests/cli/test_ownership.py.)
    args = ("--libvirt", URI, "--domain", "no-such-domain")
    r = run_cli("status", *args, "--state-dir", str(tmp_path))
    assert r.code == 6 and "domain 'no-such-domain'" in r.err and "Traceback" not in r.err


def test_usage_errors(run_cli: Run) -> None:
    assert run_cli("status", "--libvirt", URI).code == 2
    assert run_cli("status", "--qmp", "/x", "--libvirt", URI, "--domain", "d").code == 2
