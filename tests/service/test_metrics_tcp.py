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

import jsonschema
import pytest

from tests.support.cli import kata_mem_process
from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.service import Service, read_response, start
from tests.support.shim import ERROR_SCHEMA, request
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
    assert "the metrics address serves those only" in doc["error"]["message"]
    # The shim never ran: it would have counted its plan's request (the unix socket's own).
    metrics = tcp(port, "GET", "/metrics")[1].decode()
    assert 'kata_mem_request_seconds_count{endpoint="shim"' not in metrics
    assert 'kata_mem_request_seconds_count{endpoint="other",listener="tcp"}' in metrics


def exchange(port: int, raw: bytes) -> tuple[bytes, dict[str, str], bytes]:
    """Send raw bytes to the metrics address, read one response: the status line and
    anything before it (a 100 Continue), headers, body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(raw)
        reply = read_response(sock, body=not raw.startswith(b"HEAD "))
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    return status_line.encode(), headers, body


def _status(line: bytes) -> int:
    return int(line.split()[1])


def _new_lines(svc: Service, at: int) -> list[str]:
    return svc.stderr()[at:].splitlines()


def _one_tcp_refusal(svc: Service, at: int, status: int) -> str:
    """The one line serve logged for a request refused on the metrics address."""
    lines = wait_until(lambda: _new_lines(svc, at), "serve logs the refusal")
    assert len(lines) == 1 and "Traceback" not in svc.stderr()[at:], lines
    assert f": {status}: " in lines[0] and re.search(r"127\.0\.0\.1:\d+ \(TCP\)", lines[0]), lines
    return lines[0]


def _doc(headers: dict[str, str], body: bytes, code: int = 4) -> dict[str, Any]:
    assert headers["content-type"].startswith("application/json"), body
    doc: dict[str, Any] = json.loads(body)
    jsonschema.validate(doc, ERROR_SCHEMA)
    assert doc["error"]["exit_code"] == code and "\n" not in doc["error"]["message"], doc
    return doc


@pytest.mark.parametrize(
    "raw",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"GET /heal\x00thz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 70000 + b"\r\n\r\n",
        b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
        b"GARBAGE\r\n\r\n",
    ],
    ids=["bad header", "nul in path", "header too long", "version", "request line"],
)
def test_malformed_http_on_the_metrics_address_is_400_with_a_document_and_one_log_line(
    scraped: tuple[Service, int], raw: bytes
) -> None:
    # Before: aiohttp's text/plain 400 and an ERROR with an 11-line traceback per request.
    svc, port = scraped
    at = len(svc.stderr())
    key = 'kata_mem_malformed_requests_total{listener="tcp",status="400"} '
    before = _sample(tcp(port, "GET", "/metrics")[1].decode(), key)
    line, headers, body = exchange(port, raw)
    assert _status(line) == 400, (line, body)
    assert "serves those only" in _doc(headers, body)["error"]["message"]
    _one_tcp_refusal(svc, at, 400)
    assert tcp(port, "GET", "/healthz")[0] == 200
    # Counted, though no endpoint (and so no request timing) ever saw it.
    assert _sample(tcp(port, "GET", "/metrics")[1].decode(), key) == before + 1


def _sample(text: str, key: str) -> float:
    line = next((ln for ln in text.splitlines() if ln.startswith(key)), key + "0")
    return float(line[len(key) :])


def test_an_expectation_not_met_on_the_metrics_address_is_417_with_a_document(
    scraped: tuple[Service, int],
) -> None:
    svc, port = scraped
    at = len(svc.stderr())
    line, headers, body = exchange(
        port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\n\r\n"
    )
    assert _status(line) == 417, (line, body)
    assert "Expect 'bogus'" in _doc(headers, body)["error"]["message"]
    _one_tcp_refusal(svc, at, 417)


def test_the_metrics_address_never_invites_a_body(scraped: tuple[Service, int]) -> None:
    """GET only: 100 Continue would ask for a body nothing reads; the answer is the 405."""
    svc, port = scraped
    at = len(svc.stderr())
    raw = b"POST /metrics HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
    line, headers, body = exchange(port, raw)
    assert b"100 Continue" not in line and _status(line) == 405, (line, body)
    assert headers["allow"] == "GET, HEAD"
    _doc(headers, body)
    _one_tcp_refusal(svc, at, 405)


def test_head_is_answered_on_the_metrics_address_as_on_the_unix_socket(
    scraped: tuple[Service, int],
) -> None:
    svc, port = scraped
    for path in ("/healthz", "/metrics"):
        on_socket = svc.request("HEAD", path)
        line, headers, body = exchange(port, f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert (_status(line), body) == (on_socket.status, b"") == (200, b"")
        assert headers["content-type"] == on_socket.headers["content-type"]


def _count(text: str, endpoint: str, listener: str) -> float:
    sample = f'kata_mem_request_seconds_count{{endpoint="{endpoint}",listener="{listener}"}} '
    found = [line for line in text.splitlines() if line.startswith(sample)]
    return float(found[0].rpartition(" ")[2]) if found else 0.0


def test_requests_on_the_metrics_address_are_logged_and_counted_as_on_the_socket(
    scraped: tuple[Service, int],
) -> None:
    svc, port = scraped
    text = tcp(port, "GET", "/metrics")[1].decode()
    before = {(e, "tcp"): _count(text, e, "tcp") for e in ("metrics", "healthz", "other")}
    unix_before = _count(text, "metrics", "unix")
    at = len(svc.stderr())
    status, body = tcp(port, "GET", "/v1/node")
    assert status == 404 and "not found" in json.loads(body)["error"]["message"].lower()
    assert "GET /v1/node" in _one_tcp_refusal(svc, at, 404)
    assert tcp(port, "GET", "/healthz")[0] == 200
    text = tcp(port, "GET", "/metrics")[1].decode()
    # This scrape is counted once it is answered: the one before it is in its text.
    assert _count(text, "metrics", "tcp") == before["metrics", "tcp"] + 1
    assert _count(text, "healthz", "tcp") == before["healthz", "tcp"] + 1
    assert _count(text, "other", "tcp") == before["other", "tcp"] + 1
    assert _count(text, "metrics", "unix") == unix_before


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


@contextlib.contextmanager
def _some_requests(svc: Service, tmp_path: Path) -> Iterator[None]:
    """A clamped plan, an applied resize (an outcome) and a VM that is gone (a backend error).
    The resized VM runs until the block ends: the service's loop forgets a sandbox as soon
    as its VM goes (its monitor socket removed), and its gauges with it."""
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
        yield


@pytest.mark.prometheus
def test_promtool_accepts_the_exposition(scraped: tuple[Service, int], tmp_path: Path) -> None:
    svc, port = scraped
    with _some_requests(svc, tmp_path):
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

        with _some_requests(svc, tmp_path):
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
