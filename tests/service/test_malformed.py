"""Malformed and refused requests to ``kata-mem serve``: each gets a ``kata-mem/error/v1``
document and one log line, never aiohttp's plain-text answer or a traceback; a peer
that is not allowed gets 403 before anything of its body is looked at."""

from __future__ import annotations

import grp
import json
import os
import re
import socket
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest

from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import doc
from tests.support.service import Service, all_read, curl_answer, read_response, start
from tests.support.shim import ERROR_SCHEMA, request
from tests.support.waits import wait_until

REQUEST = json.dumps(request()).encode()


class Log:
    """The lines a service writes to its stderr from now on."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.at = len(service.stderr())

    def lines(self) -> list[str]:
        return self.service.stderr()[self.at :].splitlines()


def _exchange(service: Service, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read one response: status, headers, body."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(service.socket))
        sock.sendall(raw)
        reply = read_response(sock)
    head, _, body = reply.partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    return int(status_line.split()[1]), headers, body


def _post(body: bytes, *headers: str) -> bytes:
    head = ["POST /v1/shim HTTP/1.1", "Host: x", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _one_refusal(log: Log, status: int) -> str:
    """The one line the service logged for a refused request."""
    lines = log.lines()
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0] and f": {status}: " in lines[0], lines
    return lines[0]


@pytest.fixture(scope="module")
def gzip_body() -> bytes:
    packer = zlib.compressobj(wbits=31)  # a gzip member
    return packer.compress(REQUEST) + packer.flush()


@pytest.mark.parametrize(
    ("coding", "body"),
    [
        ("gzip", b"not gzip at all"),
        ("gzip", None),  # valid gzip: refused too, the service reads identity only
        ("deflate", b"not deflate"),
        ("br", REQUEST),
        ("zzz-unknown", REQUEST),
        ("gzip, identity", REQUEST),
    ],
)
def test_a_content_encoding_other_than_identity_is_415_with_a_document(
    service: Service, gzip_body: bytes, coding: str, body: bytes
) -> None:
    log = Log(service)
    status, headers, reply = _exchange(
        service, _post(body or gzip_body, f"Content-Encoding: {coding}")
    )
    assert status == 415 and headers["content-type"].startswith("application/json"), reply
    assert headers["accept-encoding"] == "identity"
    doc = json.loads(reply)
    jsonschema.validate(doc, ERROR_SCHEMA)
    assert doc["error"]["exit_code"] == 4
    assert f"Content-Encoding {coding!r}: not accepted" in doc["error"]["message"]
    _one_refusal(log, 415)
    assert service.request("GET", "/healthz").status == 200


def test_identity_is_the_encoding_served(service: Service) -> None:
    status, _, reply = _exchange(service, _post(REQUEST, "Content-Encoding: identity"))
    assert status == 200, reply


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"POST /v1/shim HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"\x00\xff" * 8 + b"\r\n\r\n",
        b"POST /v1/shim HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"y" * 10000 + b"\r\n\r\n",
    ],
    ids=["request line", "content-length", "binary", "chunk size", "header too long"],
)
def test_a_malformed_request_is_400_with_a_document_and_one_log_line(
    service: Service, raw: bytes
) -> None:
    log = Log(service)
    status, headers, reply = _exchange(service, raw)
    assert status == 400 and headers["content-type"].startswith("application/json"), reply
    doc = json.loads(reply)
    jsonschema.validate(doc, ERROR_SCHEMA)
    assert doc["error"]["exit_code"] == 4
    assert "\n" not in doc["error"]["message"]
    line = _one_refusal(log, 400)
    assert re.search(r"uid 0 gid 0 pid \d+", line), line
    assert service.request("GET", "/healthz").status == 200


@pytest.fixture
def grouped(world_dir: Path) -> Iterator[Service]:
    svc = start(world_dir, "--group", "users")
    yield svc
    assert svc.stop() == 0, svc.stderr()


#: nobody holding the socket's group for the file system, but no member of it in the user
#: database: the kernel lets it connect, the service refuses it.
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", f"--groups={grp.getgrnam('users').gr_gid}")


@pytest.mark.parametrize(
    "args",
    [
        ("-H", "Content-Encoding: gzip", "--data-binary", "not gzip"),
        ("-H", "Transfer-Encoding: chunked", "--data-binary", "{}"),
        ("--data-binary", "\xff\xfe{"),
    ],
    ids=["bad gzip", "chunked", "not utf-8"],
)
def test_a_peer_not_allowed_gets_403_whatever_its_body(
    grouped: Service, args: tuple[str, ...]
) -> None:
    log = Log(grouped)
    status, body = curl_answer(grouped.curl("/v1/shim", *args, user=NOBODY))
    doc = json.loads(body)
    assert (status, doc["error"]["exit_code"]) == (403, 4), body
    assert "uid 65534" in doc["error"]["message"]
    _one_refusal(log, 403)


def test_a_malformed_request_from_a_peer_not_allowed_is_403(grouped: Service) -> None:
    log = Log(grouped)
    r = grouped.curl("/v1/shim", "-H", "Content-Length: x", user=NOBODY)
    status, body = curl_answer(r)
    assert (status, json.loads(body)["error"]["exit_code"]) == (403, 4), body
    _one_refusal(log, 403)


def _samples(service: Service) -> dict[str, float]:
    text = service.request("GET", "/metrics").body.decode()
    return {
        name: float(value)
        for name, _, value in (line.rpartition(" ") for line in text.splitlines())
        if not name.startswith("#")
    }


def test_every_backend_error_document_is_counted(service: Service, tmp_path: Path) -> None:
    """The 503 of GET /v1/sandboxes/ID counts as the 503 of POST /v1/shim does."""
    name = 'kata_mem_backend_errors_total{kind="backend-unavailable"}'
    cfg = small_vm_config(tmp_path)
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
        applied = service.post(
            request(
                sandbox_id="sb-counted",
                config=str(cfg),
                apply=True,
                backend={"type": "qmp", "socket": str(qmp.path)},
            )
        )
        assert applied.status == 200, applied.body
    before = _samples(service).get(name, 0.0)
    gone = service.request("GET", "/v1/sandboxes/sb-counted")
    assert (gone.status, gone.json()["error"]["kind"]) == (503, "backend-unavailable")
    assert _samples(service)[name] == before + 1


def test_every_label_the_service_uses_is_documented(service: Service) -> None:
    """Each endpoint label of the latency histogram (a path no endpoint takes included)
    is in the metrics table (docs/guide/service.md)."""
    for method, path in [
        ("GET", "/healthz"),
        ("GET", "/v1/node"),
        ("GET", "/v1/sandboxes/none-such"),
        ("GET", "/no/such/path"),
        ("GET", "/v1/shim"),
        ("GET", "/metrics"),
    ]:
        service.request(method, path)
    service.post(request())
    labels = {
        m.group(1)
        for m in re.finditer(
            r'kata_mem_request_seconds_count\{endpoint="([^"]+)",listener="unix"\}',
            "\n".join(_samples(service)),
        )
    }
    assert {"shim", "node", "sandbox", "metrics", "healthz", "other"} <= labels
    readme = doc("guide/service.md")
    row = next(
        line for line in readme.splitlines() if line.startswith("| `kata_mem_request_seconds`")
    )
    for label in labels:
        assert re.search(rf"\b{label}\b", row), (label, row)


def test_a_chunk_that_cannot_be_parsed_after_the_headers_is_400(tmp_path: Path) -> None:
    """aiohttp's Python parser (where its C one is not built) reports a bad chunk to the
    handler reading the body; the C parser reports it before any handler runs."""
    env = {**os.environ, "AIOHTTP_NO_EXTENSIONS": "1"}
    svc = start(tmp_path, env=env)
    try:
        log = Log(svc)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(svc.socket))
            sock.sendall(b"POST /v1/shim HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            # The bad chunk comes in a read of its own, after the service has the headers.
            wait_until(lambda: all_read(sock), "the service reads the request's headers")
            sock.sendall(b"zz\r\n{}\r\n0\r\n\r\n")
            reply = read_response(sock)
        assert reply.startswith(b"HTTP/1.1 400"), reply
        doc = json.loads(reply.partition(b"\r\n\r\n")[2])
        assert doc["error"]["message"] == "request body: zz; expected an HTTP/1.1 body"
        _one_refusal(log, 400)
    finally:
        assert svc.stop() == 0, svc.stderr()
    assert "Traceback" not in svc.stderr()


PARTIAL = """
import socket, sys, time
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(30)
sock.connect(sys.argv[1])
sock.sendall(b"POST /v1/shim HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 100000\\r\\n\\r\\n{")
t0, reply = time.monotonic(), b""
while chunk := sock.recv(65536):
    reply += chunk
print(round(time.monotonic() - t0, 1), reply.split(b" ", 2)[1].decode())
"""


def test_a_peer_not_allowed_is_not_drained(grouped: Service) -> None:
    """The 403 goes out and the connection closes at once: the service reads no more of
    a refused peer's body (aiohttp would otherwise linger, reading it, --idle-timeout)."""
    r = subprocess.run(
        [*NOBODY, sys.executable, "-c", PARTIAL, str(grouped.socket)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    seconds, status = r.stdout.split()
    assert status == "403" and float(seconds) < 2, r.stdout


# -- Expect and repeated Content-Encoding ----------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/v1/node"), ("POST", "/v1/shim"), ("GET", "/no/such/path")]
)
def test_an_expectation_the_service_cannot_meet_is_417_with_a_document(
    service: Service, method: str, path: str
) -> None:
    # Before: aiohttp's own "417 Expectation Failed", text/plain, no log line, not counted.
    log = Log(service)
    before = _samples(service).get(
        'kata_mem_request_seconds_count{endpoint="other",listener="unix"}', 0.0
    )
    raw = f"{method} {path} HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nContent-Length: 2\r\n\r\n{{}}"
    status, headers, reply = _exchange(service, raw.encode())
    assert status == 417 and headers["content-type"].startswith("application/json"), reply
    doc = json.loads(reply)
    jsonschema.validate(doc, ERROR_SCHEMA)
    assert "Expect 'bogus': not an expectation kata-mem serve meets" in doc["error"]["message"]
    _one_refusal(log, 417)
    if path == "/no/such/path":
        after = _samples(service)[
            'kata_mem_request_seconds_count{endpoint="other",listener="unix"}'
        ]
        assert after == before + 1


FIRST_LINE = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
sock.connect(sys.argv[1])
sock.sendall(b"POST /v1/shim HTTP/1.1\\r\\nHost: x\\r\\nExpect: 100-continue\\r\\n"
             b"Content-Length: 2\\r\\n\\r\\n")
print(sock.recv(65536).split(b"\\r\\n", 1)[0].decode())
"""


def test_a_peer_not_allowed_is_not_invited_to_send_its_body(grouped: Service) -> None:
    # Before: "HTTP/1.1 100 Continue" (send the body), then the 403.
    r = subprocess.run(
        [*NOBODY, sys.executable, "-c", FIRST_LINE, str(grouped.socket)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (r.returncode, r.stdout) == (0, "HTTP/1.1 403 Forbidden\n"), r.stderr


def test_an_allowed_peer_is_invited_then_answered(service: Service) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(service.socket))
        sock.sendall(
            b"POST /v1/shim HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
            + f"Content-Length: {len(REQUEST)}\r\n\r\n".encode()
        )
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(REQUEST)
        assert read_response(sock).startswith(b"HTTP/1.1 200 OK")


def test_every_content_encoding_header_counts(service: Service) -> None:
    # Before: 200 (only the first header was looked at).
    log = Log(service)
    raw = _post(REQUEST, "Content-Encoding: identity", "Content-Encoding: gzip")
    status, _, reply = _exchange(service, raw)
    assert status == 415, reply
    assert (
        "Content-Encoding 'identity, gzip': not accepted" in json.loads(reply)["error"]["message"]
    )
    _one_refusal(log, 415)
