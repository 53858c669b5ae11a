"""A sandbox request as a value: ``to_json`` and ``from_json`` round trips,
the saved request that ``kata-mem reconcile`` re-runs, and errors that name the field."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings

from kata_mem.core.endpoint import Endpoint, VmmIdentity
from kata_mem.core.errors import InputError
from kata_mem.core.frozen import replace
from kata_mem.core.model import Container, HostFacts, Origin, SandboxSizing, Workload
from kata_mem.core.request import SandboxRequest
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.config import load_config
from kata_mem.orchestration.handle import saved_request
from tests.strategies import examples, sandbox_requests, valid_requests
from tests.support.configs import write_config
from tests.support.paths import REPO

REQUEST_SCHEMA = jsonschema.Draft202012Validator(
    json.loads((REPO / "kata_mem" / "schemas" / "shim-request.v1.json").read_text())
)
# Cheap examples: twice the profile's.
ROUND_TRIPS = settings(
    max_examples=examples(2), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@ROUND_TRIPS
@given(sandbox_requests())
def test_to_json_then_from_json_is_the_same_request(request: SandboxRequest) -> None:
    doc = request.to_json()
    REQUEST_SCHEMA.validate(doc)  # what kata-mem writes, the shim accepts
    assert SandboxRequest.from_json(json.dumps(doc).encode()) == request
    assert SandboxRequest.from_json(doc) == request


@ROUND_TRIPS
@given(valid_requests)
def test_a_request_read_and_written_back_reads_the_same(doc: dict[str, Any]) -> None:
    request = SandboxRequest.from_json(json.dumps(doc).encode())
    assert SandboxRequest.from_json(json.dumps(request.to_json()).encode()) == request


def test_the_saved_request_is_written_as_before(tmp_path: Path) -> None:
    """``<state_dir>/<sandbox>/request.json``, byte for byte as kata-mem wrote it before
    requests were values: overridden host facts pinned with the others as probed."""
    cfg = load_config(write_config(tmp_path / "c.toml"))
    host = HostFacts(
        memory=16 * GiB,
        cpus=2,
        arch="amd64",
        hugepage_size=2 * MiB,
        hugepages_total=512,
        sources=(
            ("memory", Origin("override")),
            ("cpus", Origin("probe", "psutil (online CPUs)")),
            ("arch", Origin("probe", "uname machine = x86_64")),
            ("hugepages", Origin("override")),
        ),
    )
    workload = Workload(
        (
            Container("app", 256 * MiB, 0, Fraction(1, 2), "app", "running", "x", 4),
            Container("init", 0, 2 * MiB, Fraction(0), "init", "stopped"),
        ),
        SandboxSizing(GiB, Fraction(3, 2)),
    )
    endpoint = Endpoint("libvirt", "qemu:///system", "dom")
    applied = SandboxRequest("sb-1", workload=workload, endpoint=endpoint, mode="apply")
    doc = saved_request(replace(applied, allow_shrink=True), cfg, host).to_json()
    assert json.dumps(doc) == (
        '{"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb-1", "event": "reconcile", '
        f'"config": "{tmp_path / "c.toml"}", "containers": [{{"id": "app", "state": "running", '
        '"role": "app", "memory_limit_bytes": 268435456, "hugepages_limit_bytes": 0, '
        '"cpu_quota": 1, "cpu_period": 2, "cpuset": "0-3"}, {"id": "init", "state": "stopped", '
        '"role": "init", "memory_limit_bytes": 0, "hugepages_limit_bytes": 2097152, '
        '"cpu_quota": 0, "cpu_period": 1}], "backend": {"type": "libvirt", "uri": '
        '"qemu:///system", "domain": "dom"}, "apply": true, "allow_shrink": true, "host": '
        '{"memory_bytes": 17179869184, "cpus": 2, "arch": "amd64", "hugepages": {"count": 512, '
        '"size_bytes": 2097152}}, "annotations": {"io.kubernetes.cri.sandbox-memory": '
        '"1073741824", "io.kubernetes.cri.sandbox-cpu-quota": "3", '
        '"io.kubernetes.cri.sandbox-cpu-period": "2"}}'
    )
    probed = HostFacts(memory=16 * GiB, cpus=2, arch="amd64")
    applied = SandboxRequest("sb-2", endpoint=Endpoint("qmp", "/q"), mode="apply")
    doc = saved_request(applied, cfg, probed).to_json()
    assert "host" not in doc and "annotations" not in doc


_VMM = {"device": 1, "inode": 2, "owner_uid": 0, "peer_uid": 0, "peer_pid": 3}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"sandbox_id": None}, "request sandbox_id: expected a non-empty string, got null"),
        ({"sandbox_id": 7}, "request sandbox_id: expected a non-empty string, got 7"),
        ({"sandbox_id": "a/b"}, "request sandbox_id: sandbox id 'a/b': expected 1-128 characters"),
        (
            {"containers": [{"id": "c", "role": "pod"}]},
            'request containers[0].role: expected app | init | sidecar, got "pod"',
        ),
        (
            {"host": {"hugepages": {"count": 1}}},
            "request host.hugepages.size_bytes: expected an integer from 1 to "
            "9223372036854775807, got null",
        ),
        (
            {"backend": {"type": "qmp", "socket": "", "x": 1}},
            "request backend: unknown field 'x'; expected only socket, type",
        ),
        (
            {"backend": {"type": "qmp", "socket": "/s", "vmm": {"device": 1, "owner_uid": 0}}},
            "request backend.vmm.inode: expected an integer from 0 to 18446744073709551615, "
            "got null",
        ),
        (
            {"backend": {"type": "qmp", "socket": "/s", "vmm": {**_VMM, "owner_uid": -1}}},
            "request backend.vmm.owner_uid: expected an integer from 0 to 4294967295, got -1",
        ),
        (
            {"backend": {"type": "qmp", "socket": "/s", "vmm": {**_VMM, "peer_pid": 0}}},
            "request backend.vmm.peer_pid: expected an integer from 1 to 2147483647, got 0",
        ),
        # A range states both bounds, a NUL is named, and a number too large
        # for a float is shown as the request held it, not as Infinity.
        (
            {"containers": [{"id": "c", "memory_limit_bytes": 2**64 - 1}]},
            "request containers[0].memory_limit_bytes: expected an integer from "
            "-9223372036854775808 to 9223372036854775807, got 18446744073709551615",
        ),
        (
            {"host": {"cpus": 2**63}},
            "request host.cpus: expected an integer from 1 to 9223372036854775807, got "
            "9223372036854775808",
        ),
        (
            {"host": {"memory_bytes": 2**64 - 1}},
            "request host.memory_bytes: expected an integer from 1048576 to 9223372036854775807",
        ),
        (
            {"sandbox_id": "a\0b"},
            "request sandbox_id: expected a string without NUL (U+0000",
        ),
        (
            {"containers": [{"id": "a\0b"}]},
            "request containers[0].id: expected a string without NUL (U+0000",
        ),
        ({"config": "/tmp/a\0b"}, "request config: expected a string without NUL (U+0000"),
        # A shim runs in a directory of its own, and reconcile re-runs a saved request from
        # another: a relative path there names something else, or nothing.
        (
            {"backend": {"type": "qmp", "socket": "qmp.sock"}},
            'request backend.socket: expected an absolute path (a QMP unix socket), got "qmp.sock"',
        ),
        (
            {"config": "configuration.toml"},
            "request config: expected an absolute path (a Kata configuration file), got "
            '"configuration.toml"',
        ),
        (
            {"host": {"cgroup": "."}},
            'request host.cgroup: expected an absolute path (a cgroup directory), got "."',
        ),
    ],
)
def test_errors_name_the_field_once(doc: dict[str, Any], message: str) -> None:
    base = {"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "update"}
    with pytest.raises(InputError) as caught:
        SandboxRequest.from_json(json.dumps({**base, **doc}).encode())
    assert caught.value.message.startswith(message), caught.value.message


@pytest.mark.parametrize("number", ["1e400", "-1e400", "1.0E+999"])
def test_a_number_too_large_for_a_float_is_shown_as_the_request_held_it(number: str) -> None:
    raw = (
        '{"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "update", "containers": '
        f'[{{"id": "c", "memory_limit_bytes": {number}}}]}}'
    )
    with pytest.raises(InputError) as caught:
        SandboxRequest.from_json(raw.encode())
    assert caught.value.message.endswith(f"9223372036854775807, got {number}")


def test_a_vmm_is_another_when_its_socket_file_or_its_listener_differs() -> None:
    vmm = VmmIdentity(device=1, inode=2, owner_uid=0, peer_uid=0, peer_pid=100)
    assert vmm.other_socket(1, 2, 0) is None
    assert vmm.other_socket(1, 3, 0) == (
        "another socket than the one kata-mem applied through (inode 3, owner uid 0; it was "
        "inode 2, owner uid 0)"
    )
    assert vmm.other_socket(9, 2, 0) is not None  # the same inode number on another filesystem
    assert vmm.other_socket(1, 2, 65534) is not None
    assert vmm.other_peer(0, 100) is None
    assert vmm.other_peer(0, None) is None  # a pid the kernel cannot tell is not compared
    assert replace(vmm, peer_pid=None).other_peer(0, 7) is None
    assert vmm.other_peer(0, 101) is not None
    assert vmm.other_peer(65534, 100) == (
        "another process listens on it than the one kata-mem applied through (uid 65534, pid "
        "100; it was uid 0, pid 100)"
    )


def test_hugepage_limits_per_size_bound_each_size_on_its_own(tmp_path: Path) -> None:
    """A shim (or a saved request) can give each page size's limit: the pod-level 2 MiB
    limit then bounds 2 MiB pages only (kubelet HugePageLimits), and the request reads
    back the same when written (a reconcile repeats it)."""
    from kata_mem.core.plan.workload import demand

    base = {"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "update"}
    container: dict[str, Any] = {
        "id": "a",
        "memory_limit_bytes": GiB,
        "hugepage_limits": [
            {"page_size_bytes": 2 * MiB, "limit_bytes": 50 * MiB},
            {"page_size_bytes": GiB, "limit_bytes": 2 * GiB},
        ],
    }
    doc: dict[str, Any] = {
        **base,
        "containers": [container],
        "pod_resources": {
            "hugepage_limits": [{"page_size_bytes": 2 * MiB, "limit_bytes": 100 * MiB}]
        },
    }
    REQUEST_SCHEMA.validate(doc)
    request = SandboxRequest.from_json(json.dumps(doc).encode())
    assert request.workload.containers[0].hugepages_limit == 2 * GiB + 50 * MiB
    cfg = load_config(write_config(tmp_path / "c.toml"))
    need, _ = demand(cfg, request.workload)
    assert need.hugepages == 2 * GiB + 50 * MiB  # not the sum capped at the pod's 100 MiB
    written = request.to_json()
    REQUEST_SCHEMA.validate(written)
    assert SandboxRequest.from_json(json.dumps(written).encode()) == request
    container["hugepages_limit_bytes"] = GiB  # not their sum
    with pytest.raises(InputError) as caught:
        SandboxRequest.from_json(json.dumps(doc).encode())
    assert caught.value.message.startswith(
        "request containers[0].hugepages_limit_bytes: expected the sum of hugepage_limits"
    )
