"""Read-only is read-only, on a real guest: no command that only reads
changes the balloon's statistics polling interval (``guest-stats-polling-interval``),
which someone else set to another value than the configuration's, and a real apply sets
the configured one. The interval is read with the tests' own QMP client."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliResult, apply_qmp
from tests.support.configs import HOST_ARGS, guest_config
from tests.support.guestvm import GuestSpec, GuestVM
from tests.support.qmp_min import QMPClient
from tests.support.service import Service, start
from tests.support.waits import wait_until

Run = Callable[..., CliResult]
pytestmark = pytest.mark.guest

BALLOON = "/machine/peripheral/balloon0"
#: The configuration's ``stats_interval_s``, and what someone else set on the guest since.
CONFIGURED, OTHER = 2, 7


@pytest.fixture(scope="module")
def guest(guest_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GuestVM]:
    vm = GuestVM(guest_dir, tmp_path_factory.mktemp("guest"), GuestSpec(virtio_mem_mib=0))
    vm.start()
    try:
        yield vm
    finally:
        vm.stop()


def interval(vm: GuestVM) -> int:
    with QMPClient(vm.qmp_socket) as q:
        return int(
            q.execute("qom-get", {"path": BALLOON, "property": "guest-stats-polling-interval"})
        )


def set_interval(vm: GuestVM, seconds: int) -> None:
    with QMPClient(vm.qmp_socket) as q:
        q.execute(
            "qom-set",
            {"path": BALLOON, "property": "guest-stats-polling-interval", "value": seconds},
        )


def memory_devices(vm: GuestVM) -> Any:
    with QMPClient(vm.qmp_socket) as q:
        return q.execute("query-memory-devices")


@pytest.fixture
def applied(guest: GuestVM, run_cli: Run, tmp_path: Path) -> Path:
    """Sandbox ``sb`` applied to the guest by a real apply, which sets the configured
    interval; then someone else sets another. Its configuration file."""
    cfg = guest_config(tmp_path, virtio=False, stats_interval_s=CONFIGURED)
    set_interval(guest, 0)  # as QEMU starts
    code, doc = apply_qmp(run_cli, cfg, guest.qmp_socket, "--limit", "256Mi")
    assert code == 0 and doc["status"] in ("Resized", "NoChange"), doc
    assert interval(guest) == CONFIGURED
    set_interval(guest, OTHER)
    return cfg


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_status_changes_nothing_and_waits_for_no_reading(
    guest: GuestVM, applied: Path, run_cli: Run, tmp_path: Path, json_out: bool
) -> None:
    # With polling off no new reading ever comes: status shows the last one with its age.
    set_interval(guest, 0)
    started = time.monotonic()
    r = run_cli(
        "status",
        "--qmp",
        str(guest.qmp_socket),
        "--sandbox",
        "sb",
        "--state-dir",
        str(tmp_path / "state"),
        *(["--json"] if json_out else []),
    )
    assert r.code == 0, r
    assert time.monotonic() - started < 3.0  # a wait for a new reading takes 5 s here
    assert interval(guest) == 0
    if json_out:
        usage = json.loads(r.out)["guest"]
        assert usage is not None and usage["age_s"] is not None and usage["total_mib"] > 0, r.out


def test_a_dry_run_changes_nothing(guest: GuestVM, applied: Path, run_cli: Run) -> None:
    before = memory_devices(guest)
    r = run_cli(
        "apply",
        "--dry-run",
        "--config",
        str(applied),
        "--qmp",
        str(guest.qmp_socket),
        "--sandbox",
        "sb",
        *HOST_ARGS,
        "--limit",
        "1Gi",
        "--json",
    )
    assert r.code == 0 and json.loads(r.out)["status"] == "Resized", r
    assert (interval(guest), memory_devices(guest)) == (OTHER, before)


def _metric(svc: Service, sample: str) -> float:
    """A sample of /metrics (0 while it has none)."""
    text = svc.request("GET", "/metrics").body.decode()
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


IDLE = 'kata_mem_reconcile_visits_total{action="idle"}'


def test_the_service_reads_a_sandbox_and_its_loop_idles_changing_nothing(
    guest: GuestVM, applied: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")}
    svc = start(tmp_path, "--reconcile-interval", "0.2", env=env)  # the sandbox's state dir
    try:
        got = svc.request("GET", "/v1/sandboxes/sb")
        assert got.status == 200 and got.json()["guest"] is not None, got.body
        assert interval(guest) == OTHER
        # The loop's first full pass visits the sandbox (its VM asked without a QMP session:
        # nothing is due), and from then on the kernel watches the guest's QEMU (a pidfd),
        # so nothing more is asked of it (docs/design/state.md; issue 36).
        wait_until(
            lambda: _metric(svc, "kata_mem_reconcile_watched_vms") == 1 and _metric(svc, IDLE) >= 1,
            svc.stderr,
            timeout=30,
            interval=0.1,
        )
        idle = _metric(svc, IDLE)
        time.sleep(1.0)  # not a wait: five intervals in which the loop must leave the VM alone
        assert (
            _metric(svc, IDLE),
            _metric(svc, 'kata_mem_reconcile_visits_total{action="retried"}'),
        ) == (idle, 0)
        assert interval(guest) == OTHER
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_a_real_apply_sets_the_configured_interval(
    guest: GuestVM, applied: Path, run_cli: Run
) -> None:
    code, doc = apply_qmp(run_cli, applied, guest.qmp_socket, "--limit", "256Mi")
    assert (code, doc["status"]) == (0, "NoChange"), doc
    assert interval(guest) == CONFIGURED
