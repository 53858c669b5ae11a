"""`kata-mem shim`: the JSON protocol, its schemas, its errors and its import path."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kata_mem.interfaces.shim import run_shim
from tests.support.cli import kata_mem_process
from tests.support.paths import REPO
from tests.support.shim import (
    BAD_REQUESTS,
    REQUEST_SCHEMA,
    RESPONSE_SCHEMA,
    request,
    sandbox_update,
)


def run(raw: bytes) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    code = run_shim(io.BytesIO(raw), out, {})
    doc = json.loads(out.getvalue())
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    return code, doc


def test_readme_example_request_is_valid_and_plans() -> None:
    jsonschema.validate(request(), REQUEST_SCHEMA)
    code, doc = run(json.dumps(request()).encode())
    assert code == 0 and doc["outcome"] is None
    m = doc["plan"]["memory"]
    assert (m["base_mib"], m["target_mib"], m["steps"][0]["size_mib"]) == (2048, 2304, 256)
    assert doc["plan"]["vcpus"]["target"] == 2


def test_memory_boom_through_the_shim_is_clamped() -> None:
    req = request(
        containers=[{"id": "boom", "memory_limit_bytes": 1000 * 2**30}],
        host={"memory_bytes": 31753 * 2**20, "cpus": 8},
    )
    code, doc = run(json.dumps(req).encode())
    assert code == 0
    assert (doc["plan"]["memory"]["target_mib"], doc["plan"]["memory"]["clamped_by"]) == (
        31744,
        ["host_memtotal", "alignment"],
    )


@pytest.mark.parametrize(("raw", "code", "needle"), BAD_REQUESTS)
def test_bad_requests_get_an_error_response(
    raw: bytes, code: int, needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    got, doc = run(raw)
    assert got == code == doc["error"]["exit_code"]
    assert needle in doc["error"]["message"]
    assert capsys.readouterr().err.startswith("kata-mem shim: error: ")


def test_apply_to_a_missing_vm_is_backend_unavailable_and_leaves_no_state(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[hypervisor.qemu]\n[kata_mem]\nstate_dir = "{tmp_path / "state"}"\n')
    req = request(
        apply=True, config=str(cfg), backend={"type": "qmp", "socket": str(tmp_path / "gone.sock")}
    )
    code, doc = run(json.dumps(req).encode())
    assert (code, doc["error"]["kind"]) == (6, "backend-unavailable")
    # never reached the VM: nothing recorded (only the state dir's marker)
    assert [p.name for p in (tmp_path / "state").iterdir()] == [".kata-mem-state"]


def test_delete_forgets_the_sandbox(tmp_path: Path) -> None:
    from kata_mem.edges.journal import SandboxState

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[hypervisor.qemu]\n[kata_mem]\nstate_dir = "{tmp_path / "state"}"\n')
    state = SandboxState(tmp_path / "state", "sb-1")
    with state.locked(0):
        state.save_request({"any": 1})
    code, doc = run(json.dumps(request(event="delete", config=str(cfg))).encode())
    assert (code, doc["plan"], doc["outcome"], doc["warnings"]) == (0, None, None, [])
    assert not state.dir.exists()


def test_the_shim_path_imports_no_click_no_backend_and_no_service() -> None:
    probe = (
        "import sys, io\n"
        "from kata_mem.interfaces.main import main\n"
        f"sys.stdin = io.TextIOWrapper(io.BytesIO({json.dumps(request()).encode()!r}))\n"
        "code = main(['shim'])\n"
        "heavy = ('click', 'qemu', 'libvirt', 'yaml', 'asyncio', 'psutil', 'aiohttp',"
        " 'prometheus_client')\n"
        "ours = ('kata_mem.interfaces.service', 'kata_mem.interfaces.serve', 'kata_mem.interfaces.listener',"
        " 'kata_mem.interfaces.reconcile_loop', 'kata_mem.interfaces.metrics')\n"
        "print('LOADED', sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in heavy}"
        " | {m for m in sys.modules if m in ours}), code)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert r.stdout.strip().splitlines()[-1] == "LOADED [] 0", r.stdout + r.stderr


def test_real_process(tmp_path: Path) -> None:
    r = kata_mem_process("shim", input=json.dumps(request()), timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["plan"]["memory"]["target_mib"] == 2304
    r = kata_mem_process("shim", "--x", timeout=60)
    assert r.returncode == 2
    r = kata_mem_process("shim", "--help", timeout=60)
    assert r.returncode == 0 and "kata-mem/shim-request/v1" in r.stdout


def test_update_sandbox_is_answered_with_a_grpc_status() -> None:
    """CRI UpdatePodSandboxResources: the response carries the status a Go
    shim returns verbatim. A request that does not apply changed nothing: the kubelet must
    not act on it (FailedPrecondition)."""
    req = sandbox_update(4096)
    jsonschema.validate(req, REQUEST_SCHEMA)
    code, doc = run(json.dumps(req).encode())
    assert code == 0 and doc["outcome"] is None
    assert (doc["cri"]["code"], doc["cri"]["grpc_code"]) == ("FailedPrecondition", 9)
    # Sized from the new resources, as a sandbox of 4 GiB of limits (Kata's sizing).
    assert doc["plan"]["memory"]["requested_mib"] == 2048 + 4096
    # A container's update answers UpdateContainerResources (the NRI plugin's
    # UpdateContainer): a plan only is FailedPrecondition too. A create answers no CRI call.
    assert run(json.dumps(request()).encode())[1]["cri"]["code"] == "FailedPrecondition"
    assert "cri" not in run(json.dumps(request(event="create")).encode())[1]


def test_update_sandbox_takes_the_pods_kata_annotations() -> None:
    """The pod's Kata hypervisor annotations choose its configuration on every request
    about it (the NRI plugin sends them with the pod's new resources); an annotation that
    sizes the sandbox does not come with them."""
    kata = {"io.katacontainers.config.hypervisor.default_memory": "1024"}
    code, doc = run(json.dumps({**sandbox_update(4096), "annotations": kata}).encode())
    # Not enabled in the upstream configuration: refused as Kata refuses it.
    assert code == 4 and "default_memory" in doc["error"]["message"], doc
    assert doc["cri"]["code"] == "InvalidArgument"
    sizing = {"io.kubernetes.cri.sandbox-memory": "1073741824"}
    code, doc = run(json.dumps({**sandbox_update(4096), "annotations": sizing}).encode())
    assert code == 4 and doc["error"]["message"].startswith("request sandbox_resources"), doc


def test_update_sandbox_whose_vm_is_gone_is_unavailable() -> None:
    req = sandbox_update(
        1024, apply=True, backend={"type": "qmp", "socket": "/nonexistent/kata-mem/qmp.sock"}
    )
    code, doc = run(json.dumps(req).encode())
    assert code == doc["error"]["exit_code"] == 6
    assert doc["cri"]["code"] == "Unavailable"
    assert doc["cri"]["message"] == f"kata-mem: {doc['error']['message']}"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"overhead": {"memory_limit_bytes": -1}}, "request overhead.memory_limit_bytes"),
        ({"sandbox_resources": {"memory_limit_bytes": 1, "swap": 2}}, "request sandbox_resources"),
        ({"sandbox_resources": "1Gi"}, "request sandbox_resources"),
    ],
)
def test_an_update_sandbox_refused_while_parsing_carries_a_grpc_status(
    change: dict[str, Any], field: str
) -> None:
    """docs/guide/shim.md: every answer to an update-sandbox request carries ``cri``, a
    request refused while it is parsed included: a shim always has a code."""
    code, doc = run(json.dumps({**sandbox_update(1024), **change}).encode())
    assert code == doc["error"]["exit_code"] == 4
    assert doc["error"]["message"].startswith(field)
    assert (doc["cri"]["code"], doc["cri"]["grpc_code"]) == ("InvalidArgument", 3)
    assert doc["cri"]["message"] == f"kata-mem: {doc['error']['message']}"
    # A request that is not JSON names no event: nothing to answer a gRPC call with.
    assert "cri" not in run(b'{"event": "update-sandbox"')[1]


def test_a_backend_vmm_the_socket_does_not_lead_to_is_bad_input(tmp_path: Path) -> None:
    """A shim that sends a ``backend.vmm`` (kata-mem writes it in the
    requests it saves; a shim leaves it null) that the socket does not match gave it wrong:
    exit 4 naming the field, not exit 6 saying that the VM is gone."""
    import socket

    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[hypervisor.qemu]\n[kata_mem]\nstate_dir = "{tmp_path / "state"}"\n')
    path = tmp_path / "qmp.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))
        listener.listen(1)
        st = path.stat()
        vmm = {
            "device": st.st_dev,
            "inode": st.st_ino + 1,  # another socket file than the one at the path
            "owner_uid": st.st_uid,
            "peer_uid": 0,
            "peer_pid": 1,
        }
        backend = {"type": "qmp", "socket": str(path), "vmm": vmm}
        req = request(apply=True, config=str(cfg), backend=backend)
        jsonschema.validate(req, REQUEST_SCHEMA)
        code, doc = run(json.dumps(req).encode())
    assert (code, doc["error"]["kind"]) == (4, "input"), doc["error"]
    message = doc["error"]["message"]
    assert message.startswith("request backend.vmm: names the VMM of socket inode"), message
    assert f"the socket file there is inode {st.st_ino}" in message
    assert "gone" not in message


def test_a_deeply_nested_request_is_refused_in_kata_mems_words() -> None:
    # Before: "request is not JSON: maximum recursion depth exceeded while decoding a JSON
    # array from a unicode string", Python's words about its interpreter.
    deep = '{"schema": "kata-mem/shim-request/v1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = kata_mem_process("shim", input=deep)
    assert r.returncode == 4, r.stderr
    message = (
        "request: nested too deeply to read (more than a few hundred levels of arrays and "
        "objects); a shim request is a few levels deep"
    )
    assert r.stderr.strip() == f"kata-mem shim: error: {message}"
    assert json.loads(r.stdout)["error"]["message"] == message
