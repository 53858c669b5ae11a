"""Shim requests (``kata-mem/shim-request/v1``) for the shim and service tests, the
shipped schemas of the protocol, and the requests it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.paths import KATA_CONFIGS, REPO

SCHEMAS = REPO / "kata_mem" / "schemas"
REQUEST_SCHEMA = json.loads((SCHEMAS / "shim-request.v1.json").read_text())
RESPONSE_SCHEMA = json.loads((SCHEMAS / "shim-response.v1.json").read_text())
#: What an error answer of ``kata-mem serve`` is (beside the shim's response schema).
ERROR_SCHEMA = {
    "type": "object",
    "required": ["schema", "error"],
    "properties": {
        "schema": {"const": "kata-mem/error/v1"},
        "error": {
            "type": "object",
            "required": ["kind", "message", "exit_code"],
            "properties": {"exit_code": {"type": "integer"}},
        },
    },
}
CONFIG = str(KATA_CONFIGS / "configuration-qemu.toml")


def request(**fields: Any) -> dict[str, Any]:
    """The documentation's example request (upstream QEMU configuration, one 256 MiB container,
    a 32 GiB 8-CPU host), with ``fields`` replaced."""
    doc: dict[str, Any] = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-1",
        "event": "update",
        "config": CONFIG,
        "containers": [
            {
                "id": "c1",
                "state": "running",
                "memory_limit_bytes": 268435456,
                "cpu_quota": 50000,
                "cpu_period": 100000,
            }
        ],
        "backend": None,
        "apply": False,
        "allow_shrink": False,
        "host": {"memory_bytes": 34359738368, "cpus": 8},
    }
    doc.update(fields)
    return doc


def sandbox_update(mib: int, **fields: Any) -> dict[str, Any]:
    """:func:`request` as an ``update-sandbox`` (CRI ``UpdatePodSandboxResources``): the
    pod's new resources of ``mib`` MiB and a 256 MiB overhead, no containers."""
    return request(
        event="update-sandbox",
        containers=[],
        sandbox_resources={"memory_limit_bytes": mib << 20, "cpu_quota": -1, "cpu_period": 100000},
        overhead={"memory_limit_bytes": 256 << 20},
        **fields,
    )


def shim_request_doc(cfg: Path, **fields: Any) -> dict[str, Any]:
    """A plan-only shim request for one 1 GiB container on a 16 GiB, 4-CPU host."""
    doc: dict[str, Any] = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-1",
        "event": "update",
        "config": str(cfg),
        "containers": [{"id": "c1", "memory_limit_bytes": 1 << 30}],
        "host": {"memory_bytes": 16 << 30, "cpus": 4},
    }
    doc.update(fields)
    return doc


#: Requests the shim refuses: the raw body, the exit code, and a fragment of the message.
BAD_REQUESTS: list[tuple[bytes, int, str]] = [
    (b"{", 4, "not JSON"),
    (b"[]", 4, "expected a JSON object"),
    (
        json.dumps(request(schema="kata-mem/shim-request/v2")).encode(),
        4,
        "expected 'kata-mem/shim-request/v1'",
    ),
    (json.dumps(request(sandbox_id="../etc")).encode(), 4, "sandbox id '../etc'"),
    (
        json.dumps(request(event="resize")).encode(),
        4,
        "request event: expected create | update | update-sandbox | delete | reconcile",
    ),
    (
        json.dumps(request(containers=[{"id": "c", "memory_limit_bytes": "1Gi"}])).encode(),
        4,
        "containers[0].memory_limit_bytes: expected an integer",
    ),
    (
        json.dumps(request(containers=[{"id": "c", "limit": 1}])).encode(),
        4,
        "containers[0]: unknown field 'limit'",
    ),
    (json.dumps(request(apply=True)).encode(), 4, "apply: true needs a backend"),
    (json.dumps(request(backend={"type": "xen"})).encode(), 4, "backend.type"),
    (json.dumps(request(host={"memory_bytes": True})).encode(), 4, "host.memory_bytes"),
    (
        json.dumps(request(config="/nonexistent/kata.toml")).encode(),
        3,
        "/nonexistent/kata.toml: no such configuration file",
    ),
    (b" " * (1 << 20) + b"{}", 4, "larger than 1048576 bytes"),
    (
        json.dumps(request()).encode()[:-1] + b', "event": "delete"}',
        4,
        'request event: the key "event" is given more than once in one object',
    ),
    (
        json.dumps(request(containers=[{"id": "c", "memory_limit_bytes": 1}]))
        .encode()
        .replace(b'"id": "c"', b'"id": "c", "id": "d"'),
        4,
        'request containers[0].id: the key "id" is given more than once in one object',
    ),
    (
        json.dumps(request(sandbox_id="sb")).encode().replace(b'"sb"', b'"s\\udcffb"'),
        4,
        'request sandbox_id: "s\\udcffb" is not valid Unicode (a lone surrogate)',
    ),
]


#: The host a guest test's requests describe.
GUEST_HOST = {"memory_bytes": 16 << 30, "cpus": 4}


def apply_request(
    cfg: Path, sandbox: str, qmp_socket: Path, limit_mib: int, **fields: Any
) -> dict[str, Any]:
    """An update that applies one running container of ``limit_mib`` (none at 0) to the
    guest behind ``qmp_socket``, shrinking allowed."""
    containers = (
        [{"id": "c1", "state": "running", "memory_limit_bytes": limit_mib << 20}]
        if limit_mib
        else []
    )
    return {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": sandbox,
        "event": "update",
        "config": str(cfg),
        "containers": containers,
        "backend": {"type": "qmp", "socket": str(qmp_socket)},
        "apply": True,
        "allow_shrink": True,
        "host": GUEST_HOST,
        **fields,
    }
