"""One path for every interface, shown through each of them: the same request
is planned to the same bytes by ``kata-mem preview --json``, the one-shot ``kata-mem
shim`` and ``POST /v1/shim``; the node's and a sandbox's status are the same documents
from ``kata-mem status`` as from ``GET /v1/node`` and ``GET /v1/sandboxes/ID``.

``apply --dry-run`` is compared with preview in tests/cli/test_one_path.py: its plan
carries the node's total (it admits against the node's budget), which a plan-only request
has no node for, and the shim protocol has no dry-run mode to compare it through.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Run, kata_mem_process
from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.service import Service
from tests.support.shim import CONFIG

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
