"""Pod manifests, OCI specs and CRI annotations into containers."""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest

from kata_mem.core.errors import InputError, QuantityError
from kata_mem.core.model import SizingConfig
from kata_mem.core.plan.workload import containers_peak, demand
from kata_mem.core.units import MiB
from kata_mem.edges.pod import read_pod
from kata_mem.edges.sources import build_workload, read_oci
from tests.support.paths import PODS


def test_memory_boom_pod() -> None:
    (c,) = read_pod(PODS / "memory-boom.yaml", "amd64")
    assert (c.name, c.memory_limit, c.cpu, c.role) == (
        "memory-boom",
        1000 * 2**30,
        Fraction(500),
        "app",
    )


def test_init_and_sidecar_roles() -> None:
    cs = read_pod(PODS / "init-heavy.yaml", "amd64")
    assert [(c.name, c.role) for c in cs] == [
        ("log-shipper", "sidecar"),
        ("warm-cache", "init"),
        ("app", "app"),
    ]
    mem, cpu = containers_peak(cs)
    assert mem == (128 + 3072) * MiB
    assert cpu == Fraction(11, 10)


def test_two_containers_pod() -> None:
    mem, _ = containers_peak(read_pod(PODS / "two-containers.yaml", "amd64"))
    assert mem == (1536 + 512) * MiB


def test_json_pod_and_hugepages(tmp_path: Path) -> None:
    pod = {
        "kind": "Pod",
        "spec": {
            "containers": [
                {
                    "name": "a",
                    "resources": {"limits": {"memory": 1073741824, "hugepages-2Mi": "64Mi"}},
                }
            ]
        },
    }
    path = tmp_path / "pod.json"
    path.write_text(json.dumps(pod))
    (c,) = read_pod(path, "amd64")
    assert (c.memory_limit, c.hugepages_limit) == (2**30, 64 * MiB)


@pytest.mark.parametrize(
    ("text", "error", "message"),
    [
        (
            "kind: Pod\nspec: {containers: []}\n",
            InputError,
            r"spec.containers: expected a non-empty list",
        ),
        (
            "kind: Deployment\n",
            InputError,
            r"expected one Pod manifest \(kind: Pod\), found no document",
        ),
        (
            # PyYAML (YAML 1.1) reads 750; Kubernetes reads the string "12:30", no quantity.
            "kind: Pod\nspec: {containers: [{name: a, resources: {limits: {memory: 12:30}}}]}\n",
            QuantityError,
            r"spec.containers\[0\].resources.limits.memory: invalid quantity '12:30'.*base-60",
        ),
        (
            "kind: Pod\nspec: {containers: [{name: a, resources: {limits: {memory: 1K}}}]}\n",
            QuantityError,
            r"spec.containers\[0\].resources.limits.memory: invalid quantity '1K'",
        ),
        (
            "kind: Pod\nspec: {containers: [{name: a, resources: {limits: {memory: -1Gi}}}]}\n",
            InputError,
            r"is negative",
        ),
        ("kind: Pod\nspec: [\n", InputError, r"invalid YAML/JSON"),
        # What Kubernetes' ValidatePodSpec refuses (a name is required, and a
        # string; an init container's restartPolicy is Always or absent).
        (
            "kind: Pod\nspec: {containers: [{image: a}, {image: b}]}\n",
            InputError,
            r"spec.containers\[0\].name: no name; expected a container name",
        ),
        (
            "kind: Pod\nspec: {containers: [{name: 5}]}\n",
            InputError,
            r"spec.containers\[0\].name: 5; expected a container name \(a non-empty string\)",
        ),
        (
            "kind: Pod\nspec: {containers: [{name: .nan}]}\n",
            InputError,
            r"spec.containers\[0\].name: nan; expected a container name",
        ),
        (
            "kind: Pod\nspec: {initContainers: [{name: i, restartPolicy: Sometimes}],"
            " containers: [{name: a}]}\n",
            InputError,
            r'spec.initContainers\[0\].restartPolicy: "Sometimes": expected Always',
        ),
    ],
)
def test_bad_pods(tmp_path: Path, text: str, error: type[Exception], message: str) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(text)
    with pytest.raises(error, match=message) as info:
        read_pod(path, "amd64")
    assert str(path) in str(info.value)


def test_oci_container(tmp_path: Path) -> None:
    spec = {
        "linux": {
            "resources": {
                "memory": {"limit": 536870912},
                "cpu": {"quota": 50000, "period": 100000},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 2097152}],
            }
        }
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(spec))
    c, sizing, _, _ = read_oci(path, "amd64")
    assert sizing is None and c is not None
    assert (c.memory_limit, c.hugepages_limit, c.cpu) == (512 * MiB, 2 * MiB, Fraction(1, 2))


def test_oci_hugepages_are_bounded_per_page_size_under_a_pod(
    tmp_path: Path, make_config: Callable[..., SizingConfig]
) -> None:
    """An OCI spec names each page size (runc writes one hugetlb limit per size), so a
    Pod's pod-level hugepages-2Mi limit bounds its 2 MiB pages only (kubelet
    HugePageLimits): 50 MiB + 2 GiB, not the sum capped at 100 MiB."""
    spec = {
        "linux": {
            "resources": {
                "memory": {"limit": 1 << 30},
                "hugepageLimits": [
                    {"pageSize": "1GB", "limit": 2 << 30},
                    {"pageSize": "2MB", "limit": 50 * MiB},
                ],
            }
        }
    }
    (tmp_path / "config.json").write_text(json.dumps(spec))
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "kind: Pod\nspec:\n  resources: {limits: {hugepages-2Mi: 100Mi}}\n"
        "  containers: [{name: a, resources: {limits: {memory: 1Gi}}}]\n"
    )
    w = build_workload(pod, (tmp_path / "config.json",), (), (), "amd64")
    oci = w.containers[1]
    assert oci.hugepage_limits == ((2 * MiB, 50 * MiB), (1 << 30, 2 << 30))
    assert w.pod is not None and w.pod.hugepage_limits == ((2 * MiB, 100 * MiB),)
    # The Pod's container has no hugepages: it may use the pod's 100 MiB of 2 MiB pages
    # while the OCI container uses its 50 MiB (100 in all, the pod's cap), and 2 GiB of
    # 1 GiB pages no pod-level limit bounds.
    need, _ = demand(make_config(), w)
    assert (need.hugepages, need.hugepages_from) == (100 * MiB + (2 << 30), "pod_resources")


def test_oci_unlimited_is_zero(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"linux": {"resources": {"memory": {"limit": -1}}}}))
    c, _, _, _ = read_oci(path, "amd64")
    assert c is not None and c.memory_limit == 0


def test_oci_sandbox_annotations(tmp_path: Path) -> None:
    ann = {
        "io.kubernetes.cri.container-type": "sandbox",
        "io.kubernetes.cri.sandbox-memory": "4294967296",
        "io.kubernetes.cri.sandbox-cpu-quota": "400000",
        "io.kubernetes.cri.sandbox-cpu-period": "100000",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"annotations": ann}))
    c, sizing, _, _ = read_oci(path, "amd64")
    assert c is None and sizing is not None
    assert (sizing.memory, sizing.cpu) == (4096 * MiB, Fraction(4))


def test_oci_shares_fallback(tmp_path: Path) -> None:
    ann = {
        "io.kubernetes.cri.sandbox-memory": "-5",
        "io.kubernetes.cri.sandbox-cpu-quota": "-1",
        "io.kubernetes.cri.sandbox-cpu-shares": "2048",
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"annotations": ann}))
    _, sizing, _, _ = read_oci(path, "amd64")
    assert sizing is not None and (sizing.memory, sizing.cpu) == (0, Fraction(2))


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("[1, 2]", r"expected an OCI runtime spec"),
        (
            '{"linux": {"resources": {"memory": {"limit": "1Gi"}}}}',
            r"linux.resources.memory.limit: expected an integer, got '1Gi'",
        ),
        ("{", r"invalid JSON"),
        # As the file has it, not "inf".
        (
            '{"linux": {"resources": {"memory": {"limit": 1e400}}}}',
            r"linux.resources.memory.limit: expected an integer, got 1e400$",
        ),
    ],
)
def test_bad_oci(tmp_path: Path, doc: str, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(doc)
    with pytest.raises(InputError, match=message):
        read_oci(path, "amd64")


def test_cli_values() -> None:
    req = build_workload(None, (), ("1Gi", "500m"), ("250m",), "amd64")
    assert [c.memory_limit for c in req.containers] == [2**30, 1, 0]
    assert req.containers[2].cpu == Fraction(1, 4)
    with pytest.raises(QuantityError, match=r"--limit '1K'"):
        build_workload(None, (), ("1K",), (), "amd64")
