"""Pods as the API server defaults and validates them (tests/fixtures/pod-cases): each
case a Pod spec read by the real manifest reader, and the error that refuses it or the
workload kata-mem reads from it; what a case may hold: tests/fixtures/schemas/pod.schema.json.
Every example Pod under examples/pods is one the API server accepts."""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate.utils import validate

from kata_mem.core.errors import InputError
from kata_mem.core.model import SizingConfig
from kata_mem.core.plan.workload import demand
from kata_mem.core.quantity import format_quantity
from kata_mem.core.units import MiB
from kata_mem.edges.pod import load_pod
from tests.support.cases import case_params
from tests.support.paths import REPO


def _write(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "pod.json"
    path.write_text(
        json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    )
    return path


@pytest.mark.parametrize("case", case_params("pod"))
def test_pod_case(
    case: dict[str, Any], tmp_path: Path, make_config: Callable[..., SizingConfig]
) -> None:
    path = _write(tmp_path, case["spec"])
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(InputError) as refused:
            load_pod(path, "amd64")
        message = str(refused.value)
        assert expect["error"] in message
        assert message.startswith(f"{path}: ") and "\n" not in message
        return
    workload = load_pod(path, "amd64")
    need, _ = demand(make_config(), workload)
    got = {
        "memory_mib": need.memory // MiB,
        "hugepages_mib": need.hugepages // MiB,
        "cpus": float(need.cpu),
        "memory_from": need.memory_from,
        "hugepages_from": need.hugepages_from,
        "cpus_from": need.cpu_from,
    }
    want = expect["workload"]
    assert {k: got[k] for k in want} == want
    if "pod_hugepages" in expect:
        assert workload.pod is not None
        pages = {
            f"hugepages-{format_quantity(Fraction(size))}": format_quantity(Fraction(limit))
            for size, limit in workload.pod.hugepage_limits
        }
        assert pages == expect["pod_hugepages"]


@pytest.mark.parametrize(
    "example", sorted(p.name for p in (REPO / "examples" / "pods").glob("*.yaml"))
)
def test_every_example_is_a_pod_the_api_server_accepts(example: str) -> None:
    # Its fields: the Kubernetes 1.35 OpenAPI schema, strictly (unknown fields refused), as
    # kubernetes-validate has it; its resources: the same defaulting and validation as the
    # cases above (the API server's Go rules, which no schema carries), else exit 4.
    path = REPO / "examples" / "pods" / example
    validate(yaml.safe_load(path.read_text()), "1.35", strict=True)
    load_pod(path, "amd64")
