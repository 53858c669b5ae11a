"""Every endpoint of ``kata-mem serve``, through curl and a Python client, against the
shim's JSON Schemas; the shim corpus answered identically by ``kata-mem shim``; one path
for every interface: the same request planned to the same bytes by ``kata-mem preview
--json``, the one-shot ``kata-mem shim`` and ``POST /v1/shim``, and the node's and a
sandbox's status the same documents from ``kata-mem status`` as from ``GET /v1/node`` and
``GET /v1/sandboxes/ID``.

``apply --dry-run`` is compared with preview in tests/cli/test_preview.py: its plan carries
the node's total (it admits against the node's budget), which a plan-only request has no
node for, and the shim protocol has no dry-run mode to compare it through."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.cli import Run, kata_mem_process
from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
from tests.support.service import Service, curl_answer, read_response
from tests.support.shim import (
    BAD_REQUESTS,
    CONFIG,
    ERROR_SCHEMA,
    RESPONSE_SCHEMA,
    request,
    sandbox_update,
)

MiB = 1 << 20

#: The shim corpus: the requests tests/cli/test_shim.py sends (its documented example, the
#: memory-boom pod, and every refused request), as raw bodies.
CORPUS: list[bytes] = [
    json.dumps(request()).encode(),
    json.dumps(
        request(
            containers=[{"id": "boom", "memory_limit_bytes": 1000 * 2**30}],
            host={"memory_bytes": 31753 * 2**20, "cpus": 8},
        )
    ).encode(),
    # Pod-level limits, CRI-O's sandbox resources, a Kata annotation not enabled.
    json.dumps(
        request(
            containers=[{"id": "app"}],
            pod_resources={
                "memory_limit_bytes": 4 << 30,
                "cpu_quota": 200000,
                "cpu_period": 100000,
            },
        )
    ).encode(),
    json.dumps(
        request(annotations={"pod-linux-resources.crio.io": '{"memory_limit_in_bytes":268435456}'})
    ).encode(),
    json.dumps(
        request(annotations={"io.katacontainers.config.hypervisor.default_memory": "4096"})
    ).encode(),
    *(raw for raw, _, _ in BAD_REQUESTS),
    # CRI UpdatePodSandboxResources: plan only, and a VM that is gone (both with cri).
    json.dumps(sandbox_update(1024)).encode(),
    json.dumps(
        sandbox_update(
            1024, apply=True, backend={"type": "qmp", "socket": "/nonexistent/kata-mem/qmp.sock"}
        )
    ).encode(),
]
EXPECTED_STATUS = {0: 200, 3: 400, 4: 400, 6: 503, 7: 503, 8: 503}


@pytest.mark.parametrize("raw", CORPUS, ids=lambda raw: raw[:60].decode(errors="replace"))
def test_the_shim_corpus_is_answered_as_the_one_shot_shim_answers_it(
    service: Service, raw: bytes
) -> None:
    one_shot = kata_mem_process("shim", input=raw.decode(), timeout=60)
    if len(raw) > 1 << 20:  # refused by the HTTP layer: its error document, the shim's error
        status, body = curl_answer(service.curl("/v1/shim", data=raw))
        assert status == 413
        doc, shim = json.loads(body), json.loads(one_shot.stdout)
        jsonschema.validate(doc, ERROR_SCHEMA)
        assert doc["error"] == shim["error"]
        return
    else:
        answer = service.post(raw)
        status, body = answer.status, answer.body
        assert answer.headers["x-kata-mem-exit-code"] == str(one_shot.returncode)
        assert status == EXPECTED_STATUS[one_shot.returncode]
    assert body.decode() == one_shot.stdout
    jsonschema.validate(json.loads(body), RESPONSE_SCHEMA)


def test_curl_posts_a_request_and_gets_the_plan(service: Service) -> None:
    status, body = curl_answer(service.curl("/v1/shim", data=json.dumps(request()).encode()))
    doc = json.loads(body)
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    assert (status, doc["plan"]["memory"]["target_mib"]) == (200, 2304)


def test_a_vm_that_is_gone_is_503_with_the_shims_exit_code(
    service: Service, tmp_path: Path
) -> None:
    req = request(apply=True, backend={"type": "qmp", "socket": str(tmp_path / "gone.sock")})
    answer = service.post(req)
    doc = answer.json()
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    assert (answer.status, doc["error"]["exit_code"], doc["error"]["kind"]) == (
        503,
        6,
        "backend-unavailable",
    )


def test_apply_then_sandbox_status_node_and_metrics(service: Service, tmp_path: Path) -> None:
    cfg = small_vm_config(tmp_path)
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
        req = request(
            sandbox_id="sb-applied",
            config=str(cfg),
            apply=True,
            backend={"type": "qmp", "socket": str(qmp.path)},
            host={"memory_bytes": 16 << 30, "cpus": 4},
        )
        answer = service.post(req)
        doc = answer.json()
        jsonschema.validate(doc, RESPONSE_SCHEMA)
        assert (answer.status, doc["outcome"]["status"]) == (200, "Resized"), doc
        assert doc["outcome"]["observed_mib"] == 768

        # The service's state dir has the journal, whatever the configuration says.
        assert (service.state / "sb-applied" / "journal.json").is_file()

        status, body = curl_answer(service.curl("/v1/sandboxes/sb-applied"))
        st = json.loads(body)
        assert (status, st["schema"], st["base_mib"], st["plugged_mib"]) == (
            200,
            "kata-mem/status/v1",
            512,
            256,
        )
        assert st["journal"]["observed_mib"] == 768

    # A VM that is gone, counted by kind (this test's own: the service is the module's).
    no_vm = request(apply=True, backend={"type": "qmp", "socket": str(tmp_path / "gone.sock")})
    assert service.post(no_vm).status == 503

    node = service.request("GET", "/v1/node")
    rows = {row["sandbox"]: row for row in node.json()["sandboxes"]}
    assert node.status == 200 and node.json()["schema"] == "kata-mem/node/v1"
    assert rows["sb-applied"]["current_mib"] == 768

    metrics = service.request("GET", "/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    samples = _samples(metrics.body)
    assert samples['kata_mem_sandbox_current_bytes{sandbox="sb-applied"}'] == 768 * MiB
    assert samples['kata_mem_sandbox_target_bytes{sandbox="sb-applied"}'] == 768 * MiB
    assert samples['kata_mem_outcomes_total{reason="",status="Resized"}'] >= 1
    assert samples['kata_mem_backend_errors_total{kind="backend-unavailable"}'] >= 1
    assert samples['kata_mem_request_seconds_count{endpoint="shim",listener="unix"}'] >= 2
    assert samples["kata_mem_deferred_shrinks"] == 0

    # The VM is gone now: its status is a 503 with the error document.
    gone = service.request("GET", "/v1/sandboxes/sb-applied")
    assert (gone.status, gone.json()["error"]["exit_code"]) == (503, 6)


def test_clamps_are_counted_by_cause(service: Service) -> None:
    req = request(
        containers=[{"id": "boom", "memory_limit_bytes": 1000 * 2**30}],
        host={"memory_bytes": 31753 * 2**20, "cpus": 8},
    )
    before = _counter(service, 'kata_mem_clamps_total{cause="host_memtotal"}')
    assert service.post(req).status == 200
    assert _counter(service, 'kata_mem_clamps_total{cause="host_memtotal"}') == before + 1


def _samples(text: bytes) -> dict[str, float]:
    return {
        name: float(value)
        for name, _, value in (
            line.rpartition(" ") for line in text.decode().splitlines() if not line.startswith("#")
        )
    }


def _counter(service: Service, name: str) -> float:
    return _samples(service.request("GET", "/metrics").body).get(name, 0.0)


@pytest.mark.parametrize(
    ("path", "status"),
    [("/v1/sandboxes/no-such-sandbox", 404), ("/v1/sandboxes/-bad", 400), ("/v2/shim", 404)],
)
def test_sandbox_lookups_and_unknown_paths_are_error_documents(
    service: Service, path: str, status: int
) -> None:
    got, body = curl_answer(service.curl(path))
    doc = json.loads(body)
    jsonschema.validate(doc, ERROR_SCHEMA)
    assert got == status
    assert doc["error"]["exit_code"] == 4


def test_wrong_method_is_405_with_a_document(service: Service) -> None:
    answer = service.request("GET", "/v1/shim")
    assert answer.status == 405
    jsonschema.validate(answer.json(), ERROR_SCHEMA)


def test_healthz(service: Service) -> None:
    assert curl_answer(service.curl("/healthz")) == (200, b'{"status": "ok"}\n')


def _oversized() -> bytes:
    return b" " * (1 << 20) + b"{}"


def test_an_oversized_body_is_413_with_an_error_document(service: Service) -> None:
    # docs/guide/service.md: 413 carries a kata-mem/error/v1 document.
    status, body = curl_answer(service.curl("/v1/shim", data=_oversized()))
    doc = json.loads(body)
    jsonschema.validate(doc, ERROR_SCHEMA)
    assert doc["schema"] == "kata-mem/error/v1"
    assert (status, doc["error"]["exit_code"]) == (413, 4)
    assert "larger than 1048576 bytes" in doc["error"]["message"]


def test_an_oversized_chunked_body_is_413(service: Service) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(service.socket))
        sock.sendall(b"POST /v1/shim HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"x" * 65536
        try:
            for _ in range(20):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused before the end, as it should be
        reply = read_response(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"larger than 1048576 bytes" in reply


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


@pytest.mark.parametrize(
    "raw",
    [b"GARBAGE\r\n\r\n", b"POST /v1/shim HTTP/1.1\r\nContent-Length: x\r\n\r\n", b"\x00\xff" * 8],
)
def test_malformed_http_is_400(service: Service, raw: bytes) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(service.socket))
        sock.sendall(raw + b"\r\n\r\n")
        reply = _read_all(sock)
    assert reply.split(b" ", 2)[:2] in ([b"HTTP/1.0", b"400"], [b"HTTP/1.1", b"400"]), reply[:200]
    assert service.request("GET", "/healthz").status == 200


_UTF8 = json.dumps(request()).encode()


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (json.dumps(request()).encode("utf-16"), "byte 0xff at offset 0"),
        (json.dumps(request()).encode("utf-16-le"), "NUL"),
        (json.dumps(request()).encode("utf-32"), "byte 0xff at offset 0"),
        (b"\xef\xbb\xbf" + _UTF8, "byte-order mark"),
        (_UTF8.replace(b"sb-1", b"sb-\xe9"), "byte 0xe9 at offset"),
    ],
    ids=["utf-16", "utf-16-le without a BOM", "utf-32", "utf-8 with a BOM", "latin-1"],
)
def test_a_request_that_is_not_utf8_is_refused_by_the_shim_and_the_service(
    service: Service, raw: bytes, why: str
) -> None:
    one_shot = subprocess.run(
        [sys.executable, "-m", "kata_mem", "shim"],
        input=raw,
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    doc = json.loads(one_shot.stdout)
    assert (one_shot.returncode, doc["error"]["kind"]) == (4, "input"), doc
    assert why in doc["error"]["message"] and "expected UTF-8" in doc["error"]["message"]
    answer = service.post(raw)
    assert (answer.status, answer.body) == (400, one_shot.stdout)


def test_update_sandbox_is_answered_with_the_grpc_status(service: Service, tmp_path: Path) -> None:
    """``POST /v1/shim`` with CRI UpdatePodSandboxResources: the VM grows to
    what the new pod limit and the limit in force allow, and the answer says OK."""
    cfg = small_vm_config(tmp_path)
    pod = tmp_path / "cg" / "pod1"  # the pod cgroup (v2 files), 2048 MiB in force
    pod.mkdir(parents=True)
    (tmp_path / "cg" / "cgroup.controllers").write_text("memory\n")
    (pod / "memory.max").write_text(f"{2048 * MiB}\n")
    (pod / "memory.current").write_text(f"{100 * MiB}\n")
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
        req = sandbox_update(
            1024,
            sandbox_id="sb-pod",
            config=str(cfg),
            apply=True,
            backend={"type": "qmp", "socket": str(qmp.path)},
            host={"memory_bytes": 16 << 30, "cpus": 4, "cgroup": str(pod)},
        )
        answer = service.post(req)
    doc = answer.json()
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    assert answer.status == 200 and doc["cri"]["code"] == "OK", doc
    # Kata's sizing (512 + 1024 MiB) fits the new 1280 MiB pod limit only as far as
    # (1280 - 32 - 64) * 1024 / 1032 MiB, in whole 128 MiB DIMMs above the boot memory.
    assert doc["outcome"]["observed_mib"] == 1152, doc["outcome"]
    assert "so the pod cgroup may be set" in doc["cri"]["message"]


# -- one path for every interface ---------------------------------------------------------

GiB = 1 << 30
#: One sandbox, as the command line and as the shim protocol say it.
CASES: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (
        ("--limit", "1Gi", "--cpu", "500m", "--limit", "300Mi"),
        {
            "containers": [
                {"id": "a", "memory_limit_bytes": GiB, "cpu_quota": 50000, "cpu_period": 100000},
                {"id": "b", "memory_limit_bytes": 300 << 20},
            ]
        },
    ),
    # Clamped to the host, with the warnings a plan carries.
    (("--limit", "100Gi"), {"containers": [{"id": "a", "memory_limit_bytes": 100 * GiB}]}),
    # A shrink allowed, which a plan of a booted VM has no memory to take away for.
    (
        ("--limit", "64Mi", "--allow-shrink"),
        {"containers": [{"id": "a", "memory_limit_bytes": 64 << 20}], "allow_shrink": True},
    ),
]
HOST = ("--host-memory", "16Gi", "--host-cpus", "8", "--host-arch", "x86_64")
HOST_FIELD = {"memory_bytes": 16 * GiB, "cpus": 8, "arch": "x86_64"}


@pytest.mark.parametrize(("flags", "fields"), CASES, ids=["limits", "clamped", "allow-shrink"])
def test_one_request_is_planned_to_the_same_bytes_by_every_interface(
    service: Service, run_cli: Run, flags: tuple[str, ...], fields: dict[str, Any]
) -> None:
    previewed = run_cli("preview", "--config", CONFIG, *HOST, *flags, "--json")
    assert previewed.code == 0, previewed.err
    request = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-one-path",
        "event": "update",
        "config": CONFIG,
        "host": HOST_FIELD,
        **fields,
    }
    shim = kata_mem_process("shim", input=json.dumps(request), timeout=60)
    served = service.post(request)
    assert (shim.returncode, served.status) == (0, 200), (shim.stderr, served.body)
    for answer in (json.loads(shim.stdout), served.json()):
        # The plan document as preview prints it, the same bytes.
        assert json.dumps(answer["plan"], indent=2) + "\n" == previewed.out
        assert answer["warnings"] == json.loads(previewed.out)["warnings"]


def test_node_and_sandbox_status_are_the_same_documents_from_the_cli_and_the_service(
    service: Service, run_cli: Run, tmp_path: Path
) -> None:
    state = str(service.state)
    cfg = small_vm_config(tmp_path)
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
        applied = service.post(
            {
                "schema": "kata-mem/shim-request/v1",
                "sandbox_id": "sb-status",
                "event": "update",
                "config": str(cfg),
                "containers": [{"id": "c1", "memory_limit_bytes": 256 << 20}],
                "backend": {"type": "qmp", "socket": str(qmp.path)},
                "apply": True,
                "host": {"memory_bytes": 16 * GiB, "cpus": 4},
            }
        )
        assert applied.json()["outcome"]["status"] == "Resized", applied.body
        served = service.request("GET", "/v1/sandboxes/sb-status")
        shown = run_cli("status", "--sandbox", "sb-status", "--state-dir", state, "--json")
        assert (served.status, shown.code) == (200, 0), (served.body, shown.err)
        assert served.json() == json.loads(shown.out)
        assert served.json()["journal"]["observed_mib"] == 768
    node = service.request("GET", "/v1/node")
    listed = run_cli("status", "--all", "--state-dir", state, "--json")
    assert (node.status, listed.code) == (200, 0), (node.body, listed.err)
    assert node.json() == json.loads(listed.out)
    assert "sb-status" in [row["sandbox"] for row in node.json()["sandboxes"]]
    # A sandbox kata-mem does not know: the same message (404 there, exit 4 here).
    unknown = service.request("GET", "/v1/sandboxes/sb-unknown")
    shown = run_cli("status", "--sandbox", "sb-unknown", "--state-dir", state, "--json")
    assert (unknown.status, shown.code) == (404, 4)
    assert unknown.json()["error"] == json.loads(shown.out)["error"]
