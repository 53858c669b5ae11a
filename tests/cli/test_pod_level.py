"""Pod-level resources through the interfaces: the examples/ Pods with pod-level resources
(KEP-2837), the shim's ``pod_resources``, CRI-O's sandbox-resources annotation and Kata's
hypervisor annotations; preview, apply --dry-run and the shim plan them alike."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import write_config
from tests.support.paths import KATA_CONFIGS, REPO

Run = Callable[..., CliResult]
QEMU = str(KATA_CONFIGS / "configuration-qemu.toml")
EXAMPLES = REPO / "examples" / "pods"
HOST = ("--host-memory", "16Gi", "--host-cpus", "8", "--host-arch", "x86_64")
SCHEMA = json.loads((REPO / "kata_mem" / "schemas" / "shim-request.v1.json").read_text())
MiB = 1 << 20


def _preview(run_cli: Run, *args: str) -> dict[str, Any]:
    r = run_cli("preview", "--config", QEMU, *HOST, "--json", *args)
    assert r.code == 0, r.err
    doc: dict[str, Any] = json.loads(r.out)
    return doc


def _shim(**fields: Any) -> dict[str, Any]:
    doc = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-1",
        "event": "update",
        "config": QEMU,
        "host": {"memory_bytes": 16 << 30, "cpus": 8, "arch": "x86_64"},
        **fields,
    }
    jsonschema.validate(doc, SCHEMA)
    r = kata_mem_process("shim", input=json.dumps(doc), timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    response: dict[str, Any] = json.loads(r.stdout)
    return response


@pytest.mark.parametrize(
    ("example", "target", "vcpus", "memory_from"),
    [
        # 512Mi + 768Mi under a 1Gi pod limit: the limit (was 2048 + 1280 = 3328 -> 3328).
        ("pod-level-limit-below-containers.yaml", 3072, 3, "pod_resources"),
        # unlimited containers under 4Gi: the limit (was default_memory alone, 2048).
        ("pod-level-limit-only.yaml", 6144, 3, "pod_resources"),
    ],
)
def test_the_examples_are_sized_by_their_pod_level_limits(
    run_cli: Run, example: str, target: int, vcpus: int, memory_from: str
) -> None:
    pod = str(EXAMPLES / example)
    doc = _preview(run_cli, "--pod", pod)
    m = doc["memory"]
    assert (m["target_mib"], doc["vcpus"]["target"]) == (target, vcpus)
    assert m["workload"]["memory_from"] == memory_from
    assert m["workload"]["pod_resources_from"] == f"{pod}: spec.resources.limits"
    # apply --dry-run plans the same VM the same way, byte for byte, but for the node's
    # total that only an apply reads.
    r = run_cli("apply", "--config", QEMU, *HOST, "--dry-run", "--json", "--pod", pod)
    assert r.code == 0, r.err
    applied = json.loads(r.out)["plan"]
    assert applied["memory"].pop("node") is not None and doc["memory"].pop("node") is None
    assert json.dumps(applied) == json.dumps(doc)


def test_the_shim_reads_pod_resources_as_the_pod_reader_reads_spec_resources(run_cli: Run) -> None:
    pod = str(EXAMPLES / "pod-level-limit-only.yaml")
    previewed = _preview(run_cli, "--pod", pod)
    answered = _shim(
        containers=[{"id": "app"}, {"id": "helper"}],
        pod_resources={"memory_limit_bytes": 4 << 30, "cpu_quota": 200000, "cpu_period": 100000},
    )["plan"]
    # Only the name of the input differs.
    assert answered["memory"]["workload"]["pod_resources_from"] == "request pod_resources"
    for doc in (previewed, answered):
        doc["memory"]["workload"]["pod_resources_from"] = None
        doc["config"] = None
    assert json.dumps(answered) == json.dumps(previewed)


@pytest.mark.parametrize(
    "key", ["pod-linux-resources.crio.io", "io.kubernetes.cri-o.PodLinuxResources"]
)
def test_crio_sandbox_resources_size_a_static_sandbox(tmp_path: Path, key: str) -> None:
    # As CRI-O writes it (encoding/json of a cri-api LinuxContainerResources, zeros omitted).
    value = json.dumps(
        {"cpu_period": 100000, "cpu_quota": 400000, "cpu_shares": 2048,
         "memory_limit_in_bytes": 268435456, "unified": {"memory.oom.group": "1"}}
    )  # fmt: skip
    cfg = write_config(tmp_path / "c.toml", runtime={"static_sandbox_resource_mgmt": True})
    plan = _shim(config=str(cfg), annotations={key: value})["plan"]
    # Kata's Go static sizing: default_memory + workload, default_vcpus + 4.
    assert plan["memory"]["target_mib"] == 2048 + 256
    assert plan["vcpus"]["target"] == 5
    assert plan["memory"]["workload"]["memory_from"] == "cri_annotations"


def test_a_malformed_crio_annotation_warns_and_plans(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", runtime={"static_sandbox_resource_mgmt": True})
    response = _shim(config=str(cfg), annotations={"pod-linux-resources.crio.io": "wrong"})
    assert response["plan"]["memory"]["target_mib"] == 2048
    assert any("pod-linux-resources.crio.io" in w and "read as absent (0)" in w
               for w in response["warnings"])  # fmt: skip


def test_a_kata_annotation_is_honoured_when_enabled(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", {"enable_annotations": ["default_memory"]})
    ann = {"io.katacontainers.config.hypervisor.default_memory": "1024"}
    plan = _shim(config=str(cfg), annotations=ann)["plan"]
    assert plan["memory"]["base_mib"] == 1024 and plan["memory"]["target_mib"] == 1024


def test_a_kata_annotation_not_enabled_is_exit_4_naming_it(run_cli: Run, tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "kind: Pod\nmetadata:\n  annotations:\n"
        '    io.katacontainers.config.hypervisor.default_memory: "4096"\n'
        "spec:\n  containers:\n  - name: a\n"
    )
    r = run_cli("preview", "--config", QEMU, *HOST, "--pod", str(pod))
    assert r.code == 4, r.err
    assert (
        f"{pod}: metadata.annotations: annotation io.katacontainers.config.hypervisor."
        "default_memory '4096': annotation io.katacontainers.config.hypervisor.default_memory "
        "is not enabled"
    ) in r.err
