"""CRI-O's copy of the kubelet's pod overhead (``pod-linux-overhead.crio.io``, before
CRI-O 1.35 ``io.kubernetes.cri-o.PodLinuxOverhead``: cri-o pkg/annotations/v2/annotations.go
``PodLinuxOverhead``, written by server/sandbox_run_linux.go ``setupSandboxResources``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.cri_annotations import ANN_POD_OVERHEAD, overhead_annotation
from kata_mem.core.errors import InputError
from kata_mem.core.request import SandboxRequest
from kata_mem.core.units import MiB
from kata_mem.edges.sources import build_workload

NEW, OLD = "pod-linux-overhead.crio.io", "io.kubernetes.cri-o.PodLinuxOverhead"
#: As CRI-O writes it: encoding/json of the kubelet's LinuxContainerResources for a
#: RuntimeClass overhead of 250m CPU and 160Mi (kuberuntime_sandbox_linux.go
#: convertOverheadToLinuxResources, zeros omitted).
WRITTEN = json.dumps(
    {
        "cpu_period": 100000,
        "cpu_quota": 25000,
        "cpu_shares": 256,
        "memory_limit_in_bytes": 160 * MiB,
    }
)


@pytest.mark.parametrize("key", [NEW, OLD])
def test_either_key_gives_the_overhead(key: str) -> None:
    assert overhead_annotation({key: WRITTEN}, "spec") == (160 * MiB, key)


def test_the_1_35_key_comes_first_as_crio_reads_it_back() -> None:
    old = json.dumps({"memory_limit_in_bytes": 1 * MiB})
    assert overhead_annotation({OLD: old, NEW: WRITTEN}, "spec") == (160 * MiB, NEW)


def test_crios_overhead_comes_before_kata_mems_annotation() -> None:
    # The kubelet's own figure, which it sized the pod cgroup with.
    got = overhead_annotation({NEW: WRITTEN, ANN_POD_OVERHEAD: "64Mi"}, "spec")
    assert got == (160 * MiB, NEW)


@pytest.mark.parametrize("value", ["null", "{}", json.dumps({"cpu_shares": 256})])
def test_no_memory_overhead_falls_back_to_kata_mems_annotation(value: str) -> None:
    # null: the kubelet gave none; {} or CPU only: a RuntimeClass without memory overhead.
    assert overhead_annotation({NEW: value}, "spec") is None
    assert overhead_annotation({NEW: value, ANN_POD_OVERHEAD: "64Mi"}, "spec") == (
        64 * MiB,
        ANN_POD_OVERHEAD,
    )


@pytest.mark.parametrize(
    "value",
    ["wrong", "[]", json.dumps({"memory_limit_in_bytes": -1}), '{"memory_limit_in_bytes": "1"}'],
)
def test_a_malformed_value_is_bad_input_naming_it(value: str) -> None:
    with pytest.raises(InputError, match=rf"^spec: annotation {NEW} .*expected CRI-O's copy"):
        overhead_annotation({NEW: value}, "spec")


def test_a_crio_sandbox_spec_carries_its_overhead(tmp_path: Path) -> None:
    spec = tmp_path / "config.json"
    annotations = {"io.kubernetes.cri-o.ContainerType": "sandbox", NEW: WRITTEN}
    annotations["pod-linux-resources.crio.io"] = json.dumps({"memory_limit_in_bytes": 512 * MiB})
    spec.write_text(json.dumps({"annotations": annotations}))
    workload = build_workload(None, (spec,), (), (), "amd64")
    assert workload.overhead == 160 * MiB
    assert workload.overhead_origin == f"{spec}: annotation {NEW}"


def test_a_shim_request_reads_it() -> None:
    doc: dict[str, Any] = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-1",
        "event": "create",
        "annotations": {NEW: WRITTEN},
    }
    workload = SandboxRequest.from_json(doc).workload
    assert (workload.overhead, workload.overhead_origin) == (160 * MiB, f"annotation {NEW}")
