"""``kata-mem serve --metrics-address``: GET /metrics and /healthz over TCP and nothing
else; the exposition as ``promtool check metrics`` reads it, and a real Prometheus
scraping it (Debian's ``prometheus``, scripts/install-system-deps.sh prometheus)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import kata_mem_process
from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.service import Service, start
from tests.support.shim import request
from tests.support.waits import wait_until


def tcp(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def metrics_port(svc: Service) -> int:
    """The port serve says it listens on (``--metrics-address 127.0.0.1:0``: any free one)."""
    found = wait_until(
        lambda: re.search(r"metrics on 127\.0\.0\.1:(\d+) ", svc.stderr()),
        lambda: f"serve logs its metrics address: {svc.stderr()}",
    )
    assert found is not None  # wait_until returns it once it is
    return int(found.group(1))


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, int]]:
    svc = start(tmp_path_factory.mktemp("serve"), "--metrics-address", "127.0.0.1:0")
    yield svc, metrics_port(svc)
    assert svc.stop() == 0, svc.stderr()


def test_metrics_and_healthz_are_served_over_tcp(scraped: tuple[Service, int]) -> None:
    port = scraped[1]
    status, body = tcp(port, "GET", "/metrics")
    assert status == 200 and b"# TYPE kata_mem_clamps_total counter" in body
    assert tcp(port, "GET", "/healthz") == (200, b'{"status": "ok"}\n')


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1/shim", 404),
        ("GET", "/v1/node", 404),
        ("GET", "/v1/sandboxes/sb-1", 404),
        ("POST", "/metrics", 405),
        ("DELETE", "/healthz", 405),
    ],
)
def test_nothing_else_is_served_over_tcp(
    scraped: tuple[Service, int], method: str, path: str, status: int
) -> None:
    port = scraped[1]
    body = json.dumps(request()).encode() if method == "POST" else None
    got, answer = tcp(port, method, path, body)
    doc = json.loads(answer)
    assert (got, doc["schema"], doc["error"]["exit_code"]) == (status, "kata-mem/error/v1", 4)
    assert "serves GET /metrics and GET /healthz only" in doc["error"]["message"]
    # The shim never ran: it would have counted its plan's request (the unix socket's own).
    metrics = tcp(port, "GET", "/metrics")[1].decode()
    assert 'kata_mem_request_seconds_count{endpoint="shim"}' not in metrics


def _listening_tcp_inodes(pid: int) -> set[str]:
    """The TCP sockets process ``pid`` listens on (state 0A in /proc/net/tcp*)."""
    mine = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed since the listing
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                mine.add(target[len("socket:[") : -1])
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                listening.add(fields[9])
    return mine & listening


def test_without_the_option_serve_listens_on_no_tcp_port(tmp_path: Path) -> None:
    svc = start(tmp_path)
    try:
        assert _listening_tcp_inodes(svc.proc.pid) == set()
    finally:
        assert svc.stop() == 0, svc.stderr()
    with_tcp = start(tmp_path, "--metrics-address", "127.0.0.1:0")
    try:
        assert len(_listening_tcp_inodes(with_tcp.proc.pid)) == 1  # the check sees one
    finally:
        assert with_tcp.stop() == 0, with_tcp.stderr()


def test_an_address_in_use_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = kata_mem_process(
            "serve",
            "--socket",
            str(tmp_path / "kata-mem.sock"),
            "--state-dir",
            str(tmp_path / "state"),
            "--metrics-address",
            f"127.0.0.1:{port}",
            timeout=60,
        )
    assert done.returncode == 3, done.stderr
    assert f"--metrics-address 127.0.0.1:{port}: cannot listen there" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no socket, no lock


def test_a_bad_address_is_a_usage_error(tmp_path: Path) -> None:
    done = kata_mem_process("serve", "--metrics-address", ":9464", timeout=60)
    assert done.returncode == 2
    assert "--metrics-address" in done.stderr and "give 127.0.0.1:9464" in done.stderr


def _some_requests(svc: Service, tmp_path: Path) -> None:
    """A clamped plan, an applied resize (an outcome) and a VM that is gone (a backend error)."""
    boom = request(
        containers=[{"id": "boom", "memory_limit_bytes": 1000 * 2**30}],
        host={"memory_bytes": 31753 * 2**20, "cpus": 8},
    )
    assert svc.post(boom).status == 200
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
        applied = request(
            sandbox_id="sb-scraped",
            config=str(small_vm_config(tmp_path)),
            apply=True,
            backend={"type": "qmp", "socket": str(qmp.path)},
            host={"memory_bytes": 16 << 30, "cpus": 4},
        )
        assert svc.post(applied).json()["outcome"]["status"] == "Resized"
    gone = request(apply=True, backend={"type": "qmp", "socket": str(tmp_path / "gone.sock")})
    assert svc.post(gone).status == 503


@pytest.mark.prometheus
def test_promtool_accepts_the_exposition(scraped: tuple[Service, int], tmp_path: Path) -> None:
    svc, port = scraped
    _some_requests(svc, tmp_path)
    status, body = tcp(port, "GET", "/metrics")
    assert status == 200
    assert b"kata_mem_clamps_total{" in body and b"kata_mem_outcomes_total{" in body
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=60, check=False
    )
    # promtool prints its lint findings (names, units, help) and exits 3 on any.
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def _query(port: int, promql: str) -> list[dict[str, Any]]:
    status, body = tcp(port, "GET", "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    doc = json.loads(body)
    assert (status, doc["status"]) == (200, "success"), doc
    return list(doc["data"]["result"])


def _holds(port: int, promql: str) -> Callable[[], list[dict[str, Any]]]:
    """Whether Prometheus at ``port`` finds a series where ``promql`` holds."""
    return lambda: _query(port, promql)


@pytest.mark.prometheus
def test_prometheus_scrapes_kata_mem(tmp_path: Path) -> None:
    svc = start(tmp_path, "--metrics-address", "127.0.0.1:0")
    prometheus = None
    try:
        port = metrics_port(svc)
        (tmp_path / "prometheus.yml").write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: kata-mem\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
        )
        web = _free_port()
        with (tmp_path / "prometheus.log").open("w") as log:
            prometheus = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{web}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def prometheus_log() -> str:
            return (tmp_path / "prometheus.log").read_text()

        def ready() -> bool:
            assert prometheus is not None and prometheus.poll() is None, prometheus_log()
            try:
                return tcp(web, "GET", "/-/ready")[0] == 200
            except OSError:
                return False

        wait_until(ready, lambda: f"prometheus is ready: {prometheus_log()}", timeout=60)
        up = 'up{job="kata-mem"} == 1'
        wait_until(lambda: _query(web, up), lambda: f"{up}: {prometheus_log()}", timeout=30)

        _some_requests(svc, tmp_path)
        for promql in (
            'kata_mem_outcomes_total{job="kata-mem",status="Resized",reason=""} >= 1',
            'kata_mem_clamps_total{job="kata-mem",cause="host_memtotal"} >= 1',
            'kata_mem_backend_errors_total{job="kata-mem",kind="backend-unavailable"} >= 1',
            'kata_mem_sandbox_current_bytes{job="kata-mem",sandbox="sb-scraped"} == 768 * 2^20',
        ):
            wait_until(_holds(web, promql), promql, timeout=30)
    finally:
        if prometheus is not None:
            prometheus.terminate()
            prometheus.wait(30)
        assert svc.stop() == 0, svc.stderr()
