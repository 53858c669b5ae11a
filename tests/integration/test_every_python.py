"""Grow, deferred shrink and repair on the real guest, over QMP with virtio-mem and with
pc-dimm, a grow and shrink through ``kata-mem serve`` and through both shim commands, and a
deeply nested manifest: the module that ``scripts/test`` runs again on every other Python
that ``requires-python`` admits (the whole suite runs on one), so it is kept short: one
guest serves the module, and each guest test starts from the boot size, which the one
before leaves.

What differs between Pythons is asyncio, and the releases of the C extensions pip
installs for each. The QMP backend runs qemu.qmp on a private event loop (in
a worker thread, in the service): on 3.9 a client or event listener made outside that
loop crashed every apply that waits for a QMP event. PyYAML 6.0.3, the newest for 3.9,
bundles a libyaml without a nesting limit: a deep manifest was a segmentation fault."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliResult, apply_qmp, kata_mem_process
from tests.support.configs import HOST_ARGS, guest_config
from tests.support.guestvm import GuestSpec, GuestVM
from tests.support.paths import REPO
from tests.support.qmp_min import QMPClient
from tests.support.service import Service, start
from tests.support.shim import apply_request
from tests.support.waits import wait_until

Run = Callable[..., CliResult]
MiB, KiB_PER_MiB = 1 << 20, 1024


@pytest.fixture(scope="module")
def booted(guest_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuestVM]:
    """One guest with a virtio-mem device and free DIMM slots."""
    guest = GuestVM(guest_dir, tmp_path_factory.mktemp("guest"), GuestSpec(virtio_mem_mib=2048))
    try:
        yield guest.start()
    finally:
        guest.stop()


@pytest.fixture
def vm(booted: GuestVM) -> GuestVM:
    """The module's guest, at its boot size (else the test before failed, and says why)."""
    plugged = [d for d in _memory_devices(booted) if d["data"]["size"]]
    assert not plugged, f"an earlier test of this module left memory plugged: {plugged}"
    return booted


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without what would change kata-mem's behaviour."""
    drop = ("KATA_CONF_FILE", "KATA_MEM_DEBUG", "KATA_MEM_CRASH_AT")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def _crash(cfg: Path, vm: GuestVM, at: str, *args: str) -> None:
    """``kata-mem apply`` as a real process that dies at crash point ``at``."""
    r = kata_mem_process(
        *("apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket), "--sandbox", "sb"),
        *(*HOST_ARGS, "--json", *args),
        env=_env(KATA_MEM_CRASH_AT=at),
    )
    assert (r.returncode, r.stdout) == (99, ""), r.stderr


def _journal(state: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((state / "sb" / "journal.json").read_text())
    return doc


def _memory_devices(vm: GuestVM) -> list[dict[str, Any]]:
    with QMPClient(vm.qmp_socket) as q:
        devices: list[dict[str, Any]] = q.execute("query-memory-devices")
    return devices


def _virtio_mem(vm: GuestVM) -> tuple[int, int]:
    """QEMU's own size and requested size of the virtio-mem device, in MiB."""
    dev = next(d["data"] for d in _memory_devices(vm) if d["type"] == "virtio-mem")
    return int(dev["size"]) // MiB, int(dev["requested-size"]) // MiB


def _hold(vm: GuestVM, mib: int) -> None:
    """Have the guest hold ``mib`` MiB, and wait for a balloon reading taken after that
    (kata-mem may decide on a reading up to ``usage_max_age_s`` old: one from just
    before the allocation would call the shrink safe)."""
    vm.alloc(mib)
    held_at = time.time()
    with QMPClient(vm.qmp_socket) as q:

        def read_after() -> bool:
            stats = q.execute(
                "qom-get", {"path": "/machine/peripheral/balloon0", "property": "guest-stats"}
            )
            # QEMU stamps a reading in whole seconds (time of its arrival, truncated).
            return bool(stats["last-update"] > held_at)

        wait_until(read_after, "a balloon reading after the allocation", interval=0.1)


def _grow_then_defer(run_cli: Run, cfg: Path, vm: GuestVM, grow_mib: int, hold_mib: int) -> int:
    """Grow by ``grow_mib``, then ask for the shrink while the guest holds ``hold_mib``:
    deferred, nothing changed. The guest's boot MemTotal (kB) is returned."""
    base_kb = vm.status().total_kb
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", f"{grow_mib}Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 512 + grow_mib), doc
    grown_kb = base_kb + grow_mib * KiB_PER_MiB
    assert vm.wait_mem(lambda m: m.total_kb >= grown_kb, timeout=15).total_kb == grown_kb
    _hold(vm, hold_mib)
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    assert (code, doc["status"], doc["reason"]) == (0, "Deferred", "UsageAboveTarget"), doc
    assert vm.is_alive() and vm.status().total_kb == grown_kb
    vm.free()
    return base_kb


@pytest.mark.guest
def test_virtio_mem_grow_deferred_shrink_and_repair(
    vm: GuestVM, run_cli: Run, tmp_path: Path
) -> None:
    cfg = guest_config(tmp_path, virtio=True)
    base_kb = _grow_then_defer(run_cli, cfg, vm, 512, 400)
    # The shrink dies right after its first resize command: the journal says running and
    # QEMU has been asked for less than is plugged.
    _crash(cfg, vm, "after-command", "--allow-shrink")
    journal = _journal(tmp_path / "state")
    assert (journal["state"], journal["step"]["action"]) == ("running", "resize_virtio_mem")
    assert _virtio_mem(vm)[1] < 512
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 512), doc
    assert _journal(tmp_path / "state")["state"] == "idle"
    assert _virtio_mem(vm) == (0, 0)
    assert vm.wait_mem(lambda m: m.total_kb <= base_kb, timeout=15).total_kb == base_kb


@pytest.mark.guest
def test_dimm_grow_deferred_shrink_and_repair(vm: GuestVM, run_cli: Run, tmp_path: Path) -> None:
    cfg = guest_config(tmp_path, virtio=False)
    base_kb = _grow_then_defer(run_cli, cfg, vm, 256, 400)
    # The shrink dies right after device_del; the guest ejects the DIMM by itself.
    _crash(cfg, vm, "after-command", "--allow-shrink")
    journal = _journal(tmp_path / "state")
    assert (journal["state"], journal["step"]["action"]) == ("running", "unplug_dimm")
    assert vm.wait_mem(lambda m: m.total_kb <= base_kb, timeout=30).total_kb == base_kb
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    assert (code, doc["observed_mib"]) == (0, 512), doc
    assert _journal(tmp_path / "state")["state"] == "idle"
    assert [d["type"] for d in _memory_devices(vm)] == ["virtio-mem"]
    with QMPClient(vm.qmp_socket) as q:
        objects = [o["name"] for o in q.execute("qom-list", {"path": "/objects"})]
    assert "kmmem0" not in objects


def _shim(svc: Service, cfg: Path, vm: GuestVM, limit_mib: int) -> dict[str, Any]:
    got = svc.post(apply_request(cfg, "sb", vm.qmp_socket, limit_mib), timeout=120)
    assert got.status == 200, got.body
    doc: dict[str, Any] = got.json()["outcome"]
    return doc


@pytest.mark.guest
def test_the_shim_commands_grow_and_shrink_a_guest(vm: GuestVM, tmp_path: Path) -> None:
    # The shim's own interface on this Python: `kata-mem shim` answers in-process (the
    # path that imports no click), `kata-mem-shim` hands the request to the service.
    cfg = guest_config(tmp_path, virtio=True)
    base_kb = vm.status().total_kb
    raw = json.dumps(apply_request(cfg, "sb", vm.qmp_socket, 512))
    r = kata_mem_process("shim", input=raw, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)["outcome"]
    assert (out["status"], out["observed_mib"]) == ("Resized", 1024), out
    grown_kb = base_kb + 512 * KiB_PER_MiB
    assert vm.wait_mem(lambda m: m.total_kb >= grown_kb, timeout=15).total_kb == grown_kb
    svc = start(tmp_path, env=_env())
    try:
        client = subprocess.run(
            [sys.executable, "-m", "kata_mem.interfaces.shim_client"],
            input=json.dumps(apply_request(cfg, "sb", vm.qmp_socket, 0)),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env=_env(KATA_MEM_SOCKET=str(svc.socket)),
            check=False,
        )
        assert client.returncode == 0, client.stderr
        out = json.loads(client.stdout)["outcome"]
        assert (out["status"], out["observed_mib"]) == ("Resized", 512), out
        assert _virtio_mem(vm) == (0, 0)
        # Answered by the service, not in-process: the service logs each answer.
        assert "sandbox sb: update (apply) from uid 0" in svc.stderr()
    finally:
        assert svc.stop() == 0, svc.stderr()


@pytest.mark.guest
def test_the_service_grows_and_shrinks_a_guest(vm: GuestVM, tmp_path: Path) -> None:
    # The service runs each backend call in a worker thread, which has no event loop of
    # its own: on 3.9 the QMP client could not even be made there.
    cfg = guest_config(tmp_path, virtio=True)
    base_kb = vm.status().total_kb
    svc = start(tmp_path, env=_env())
    try:
        out = _shim(svc, cfg, vm, 512)
        assert (out["status"], out["observed_mib"]) == ("Resized", 1024), out
        grown_kb = base_kb + 512 * KiB_PER_MiB
        assert vm.wait_mem(lambda m: m.total_kb >= grown_kb, timeout=15).total_kb == grown_kb
        out = _shim(svc, cfg, vm, 0)
        assert (out["status"], out["observed_mib"]) == ("Resized", 512), out
        assert _virtio_mem(vm) == (0, 0)
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_the_service_cuts_a_connection_that_sends_nothing(tmp_path: Path) -> None:
    # aiohttp before 3.14 (the newest that installs on Python 3.9 is 3.13) never closed a
    # connection that sent no request; the service's own timer does, on every version.
    svc = start(tmp_path, "--idle-timeout", "0.5")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle:
            idle.settimeout(10)
            idle.connect(str(svc.socket))
            assert idle.recv(100) == b""
    finally:
        assert svc.stop() == 0, svc.stderr()


@pytest.mark.parametrize(
    "text",
    ["kind: Pod\nspec:\n  containers: " + "[" * 100_000 + "\n", "- " * 100_000 + "x\n"],
    ids=["flow", "block"],
)
def test_a_deeply_nested_manifest_is_refused(tmp_path: Path, text: str) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(text)
    cfg = REPO / "configs" / "configuration-qemu.toml"
    r = kata_mem_process("preview", "--config", str(cfg), "--pod", str(pod), *HOST_ARGS)
    assert (r.returncode, r.stdout) == (4, ""), r.stderr
    assert f"{pod}: nested too deeply to read" in r.stderr
