"""``kata-mem runtimeclass`` as a real process: a RuntimeClass that Kubernetes 1.35 takes
(kubernetes-validate, strict), its arithmetic in comments and in ``--json`` (the same
numbers), the options, and its refusals (one line, exit code, nothing on stdout)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_validate.utils import validate

from kata_mem.core.units import MiB
from tests.support.cli import kata_mem_process
from tests.support.configs import write_config
from tests.support.paths import REPO

QEMU = REPO / "configs" / "configuration-qemu-virtio-mem.toml"


def runtimeclass(*args: str) -> tuple[str, dict[str, Any]]:
    """The YAML and the JSON for the same arguments."""
    text = kata_mem_process("runtimeclass", *args)
    assert text.returncode == 0, text.stderr
    doc = kata_mem_process("runtimeclass", *args, "--json")
    assert doc.returncode == 0, doc.stderr
    found: dict[str, Any] = json.loads(doc.stdout)
    return text.stdout, found


def test_the_yaml_is_a_runtimeclass_for_1_35_with_the_json_numbers() -> None:
    text, doc = runtimeclass("--config", str(QEMU), "--max-pod-memory", "8Gi")
    manifest = yaml.safe_load(text)
    validate(manifest, "1.35", strict=True)
    assert manifest == doc["runtimeclass"]
    assert doc["schema"] == "kata-mem/runtimeclass/v1"
    assert manifest["overhead"]["podFixed"] == {
        "memory": f"{doc['pod_fixed_memory_bytes'] // MiB}Mi",
        "cpu": f"{doc['pod_fixed_cpu_millis']}m",
    }
    binding = doc["pods"]["binding"]
    # The podFixed is what the pod that needs the most needs, rounded up to MiB; that pod
    # gets its whole VM in a cgroup of its limits + podFixed.
    assert binding["cgroup_bytes"] == (
        binding["asked_bytes"] + binding["vmm_overhead_bytes"] + binding["margin_bytes"]
    )
    assert binding["asked_bytes"] == binding["vm_bytes"]  # no maximum rounds it down here
    assert doc["pod_fixed_memory_bytes"] - MiB < binding["pod_fixed_bytes"]
    assert binding["pod_fixed_bytes"] <= doc["pod_fixed_memory_bytes"]
    assert binding["limits_bytes"] + doc["pod_fixed_memory_bytes"] >= binding["cgroup_bytes"]
    for pod in doc["pods"].values():
        assert pod["pod_fixed_bytes"] <= binding["pod_fixed_bytes"]
    # The arithmetic is in the comments, the same lines as the JSON's explanation.
    comments = [line[2:] for line in text.splitlines() if line.startswith("# ")]
    assert comments == doc["explanation"]
    assert f"--config {QEMU}" in comments[0]
    assert "pods with memory limits up to 8192 MiB (--max-pod-memory)" in comments[1]


def test_sizing_from_the_option_over_the_configuration(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "configuration.toml",
        {"enable_virtio_mem": True, "default_memory": 512, "default_maxmemory": 4096},
        kata_mem={"sizing": "pod-overhead"},
    )
    _, by_limit = runtimeclass("--config", str(config), "--sizing", "pod-limit")
    assert by_limit["sizing"] == "pod-limit"
    # Pods up to default_maxmemory; the smallest boots 512 MiB: 512 + 64 + 4 + 32.
    assert by_limit["max_pod_memory_bytes"] == 4096 * MiB
    assert by_limit["max_pod_memory_from"] == "default_maxmemory"
    assert by_limit["pods"]["smallest"]["cgroup_bytes"] == (512 + 64 + 4 + 32) * MiB
    _, by_kata = runtimeclass("--config", str(config), "--sizing", "kata")
    assert by_kata["max_pod_memory_bytes"] == (4096 - 512) * MiB
    assert by_kata["pod_fixed_memory_bytes"] > by_limit["pod_fixed_memory_bytes"]


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("--max-pod-memory", "8Gi"), 4, "configuration.toml: [kata_mem] sizing pod-overhead"),
        (("--max-pod-memory", "8Gi", "--sizing", "pod-overhead"), 4, "--sizing pod-overhead"),
        (("--max-pod-memory", "lots", "--sizing", "kata"), 4, "--max-pod-memory"),
        (("--sizing", "kata"), 4, "give --max-pod-memory"),
        (("--sizing", "huge"), 2, "--sizing"),
    ],
)
def test_refusals_are_one_line_and_an_exit_code(
    tmp_path: Path, args: tuple[str, ...], code: int, needle: str
) -> None:
    config = write_config(tmp_path / "configuration.toml", kata_mem={"sizing": "pod-overhead"})
    r = kata_mem_process("runtimeclass", "--config", str(config), *args)
    assert (r.returncode, r.stdout) == (code, ""), r.stderr
    assert needle in r.stderr
    if code != 2:
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        doc = kata_mem_process("runtimeclass", "--config", str(config), *args, "--json")
        assert doc.returncode == code
        assert json.loads(doc.stdout)["error"]["exit_code"] == code


# -- name, handler and CPU policy -------------------------------------------------------------


def test_the_name_is_kata_mem_s_own_and_the_handler_kata_deploy_s() -> None:
    """The RuntimeClass was named as kata-deploy names its own (kata-qemu): applied, it
    replaced kata-deploy's, and deleting it deleted theirs. The name is kata-mem's
    (kata-mem-qemu); the handler stays kata-deploy's for the hypervisor, the runtime handler
    the node knows Kata by, whatever the name."""
    text, doc = runtimeclass("--config", str(QEMU), "--max-pod-memory", "4Gi")
    manifest = yaml.safe_load(text)
    assert (manifest["metadata"]["name"], manifest["handler"]) == ("kata-mem-qemu", "kata-qemu")
    assert doc["runtimeclass"] == manifest
    _, named = runtimeclass("--config", str(QEMU), "--max-pod-memory", "4Gi", "--name", "small")
    assert (named["runtimeclass"]["metadata"]["name"], named["runtimeclass"]["handler"]) == (
        "small",
        "kata-qemu",
    )


def test_the_name_and_handler_follow_the_configurations_hypervisor(tmp_path: Path) -> None:
    """kata-deploy names a RuntimeClass and its handler after the hypervisor (kata-qemu,
    kata-clh, kata-fc): a Cloud Hypervisor configuration's handler is not kata-qemu, and its
    RuntimeClass is kata-mem's for that hypervisor."""
    clh = tmp_path / "configuration-clh.toml"
    clh.write_text(QEMU.read_text().replace("[hypervisor.qemu]", "[hypervisor.clh]"))
    text, _ = runtimeclass("--config", str(clh), "--max-pod-memory", "4Gi")
    manifest = yaml.safe_load(text)
    assert (manifest["metadata"]["name"], manifest["handler"]) == ("kata-mem-clh", "kata-clh")
    assert text.startswith("# RuntimeClass for Kata with clh: ")
    fc = tmp_path / "configuration-fc.toml"
    fc.write_text(QEMU.read_text().replace("[hypervisor.qemu]", "[hypervisor.firecracker]"))
    fc_class = runtimeclass("--config", str(fc), "--max-pod-memory", "4Gi")[1]["runtimeclass"]
    assert (fc_class["metadata"]["name"], fc_class["handler"]) == ("kata-mem-fc", "kata-fc")
    _, named = runtimeclass(
        *("--config", str(QEMU), "--max-pod-memory", "4Gi"),
        *("--name", "kata-qemu-small", "--handler", "kata-qemu-other"),
    )
    assert named["runtimeclass"]["metadata"]["name"] == "kata-qemu-small"
    assert named["runtimeclass"]["handler"] == "kata-qemu-other"
    validate(named["runtimeclass"], "1.35", strict=True)


def test_the_cpu_policy_is_kata_s_250m_by_default_and_says_why() -> None:
    text, doc = runtimeclass("--config", str(QEMU), "--max-pod-memory", "8Gi")
    assert yaml.safe_load(text)["overhead"]["podFixed"]["cpu"] == "250m"
    assert (doc["cpu_policy"], doc["pod_fixed_cpu_millis"]) == ("kata", 250)
    assert doc["all_vcpus_cpu_millis"] == 1999
    comments = " ".join(doc["explanation"])
    assert "kata-deploy's own" in comments and "throttled, never killed" in comments
    assert "1999m (--cpu-policy all-vcpus)" in comments
    _, every = runtimeclass(
        "--config", str(QEMU), "--max-pod-memory", "8Gi", "--cpu-policy", "all-vcpus"
    )
    assert every["runtimeclass"]["overhead"]["podFixed"]["cpu"] == "1999m"
    none_text, none = runtimeclass(
        "--config", str(QEMU), "--max-pod-memory", "8Gi", "--cpu-policy", "none"
    )
    assert "cpu" not in none["runtimeclass"]["overhead"]["podFixed"]
    assert none["pod_fixed_cpu_millis"] is None and "--cpu-policy none" in none_text


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--name", "Kata_QEMU"),
        ("--name", "-kata"),
        ("--handler", "kata.qemu"),
        ("--handler", "x" * 64),
    ],
)
def test_a_name_or_handler_the_api_server_refuses_is_a_usage_error(option: str, value: str) -> None:
    r = kata_mem_process(
        "runtimeclass", "--config", str(QEMU), "--max-pod-memory", "1Gi", option, value
    )
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert option in r.stderr and "DNS-1123" in r.stderr


# -- size classes --------------------------------------------------------------------------------


def test_size_classes_are_one_runtimeclass_per_bound_with_the_split_arithmetic() -> None:
    """podFixed grows with the largest pod covered; one RuntimeClass per size class reserves
    for each pod what its class needs, each the RuntimeClass --max-pod-memory BOUND gives."""
    args = ("--config", str(QEMU), "--size-classes", "2Gi,8Gi,256Gi")
    text, doc = runtimeclass(*args)
    header, *manifests = text.split("---\n")
    classes = [yaml.safe_load(m) for m in manifests]
    assert [c["metadata"]["name"] for c in classes] == [
        "kata-mem-qemu-2gi",
        "kata-mem-qemu-8gi",
        "kata-mem-qemu-256gi",
    ]
    for c, bound in zip(classes, ("2Gi", "8Gi", "256Gi"), strict=True):
        validate(c, "1.35", strict=True)
        assert c["handler"] == "kata-qemu"
        single = yaml.safe_load(
            kata_mem_process(
                "runtimeclass", "--config", str(QEMU), "--max-pod-memory", bound
            ).stdout
        )
        assert c["overhead"] == single["overhead"]
    fixed = [int(c["overhead"]["podFixed"]["memory"].removesuffix("Mi")) for c in classes]
    assert fixed == sorted(fixed) and fixed[0] < fixed[-1]
    assert f"would reserve {fixed[-1]}Mi on each" in " ".join(header.split())
    assert f"podFixed.memory {fixed[0]}Mi, {fixed[-1] - fixed[0]}Mi less a pod" in header
    assert "pods with memory limits up to 2048 MiB (--size-classes 2Gi)" in manifests[0]
    assert doc["schema"] == "kata-mem/runtimeclass-classes/v1"
    assert [c["runtimeclass"] for c in doc["classes"]] == classes


@pytest.mark.parametrize(
    "extra",
    [
        ("--size-classes", "8Gi,2Gi"),
        ("--size-classes", "2Gi,2048Mi"),
        ("--size-classes", "0,1Gi"),
        ("--size-classes", "2Gi", "--max-pod-memory", "8Gi"),
    ],
)
def test_size_classes_refused(extra: tuple[str, ...]) -> None:
    r = kata_mem_process("runtimeclass", "--config", str(QEMU), *extra)
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert "--size-classes" in r.stderr


def test_a_max_pod_memory_below_one_byte_is_refused_alike(tmp_path: Path) -> None:
    # A negative size was answered "expected a size of 0 or more", and 0 is refused too.
    cfg = str(REPO / "configs" / "configuration-qemu.toml")
    for given in ("0", "-1", "-1Gi"):
        r = kata_mem_process("runtimeclass", "--config", cfg, "--max-pod-memory", given)
        assert r.returncode == 4, r.stderr
        assert r.stderr == (
            f"kata-mem: error: --max-pod-memory {given!r}: expected at least 1 byte\n"
        ), given


def test_the_kubernetes_guide_gives_the_size_classes_the_command_prints() -> None:
    """docs/guide/kubernetes.md, "Size classes": each podFixed it names for Kata's QEMU
    defaults is what ``--max-pod-memory BOUND`` prints (it said 4336Mi up to 256Gi where the
    command prints 4209Mi: a figure no test read)."""
    page = " ".join((REPO / "docs" / "guide" / "kubernetes.md").read_text().split())
    sentence = page[page.index("for Kata's QEMU defaults, ") :]
    sentence = sentence[: sentence.index(". ")]
    shown = re.findall(r"(\d+)Mi (?:for pods )?up to (\d+Gi)", sentence)
    assert [bound for _, bound in shown] == ["2Gi", "8Gi", "32Gi", "256Gi"], sentence
    cfg = str(REPO / "configs" / "configuration-qemu.toml")
    printed = []
    for _, bound in shown:
        manifest = yaml.safe_load(
            kata_mem_process("runtimeclass", "--config", cfg, "--max-pod-memory", bound).stdout
        )
        printed.append(manifest["overhead"]["podFixed"]["memory"].removesuffix("Mi"))
    assert [fixed for fixed, _ in shown] == printed


def test_each_pod_line_adds_up() -> None:
    """For pods past the guest's memmap ceiling the line read "VM 87168 MiB, VMM overhead
    2128 MiB: cgroup >= 266352 MiB": the guard is asked for more than that VM (it checks the
    target before the guest's ceiling clamps it), and the line now names what it adds."""
    cfg = str(REPO / "configs" / "configuration-qemu.toml")
    text, doc = runtimeclass("--config", cfg, "--max-pod-memory", "256Gi")
    lines = [line for line in text.splitlines() if " -> VM " in line]
    assert lines
    for line in lines:
        found = re.search(
            r"-> VM (\d+) MiB(?: \(the guard is asked for (\d+) MiB\))?, VMM overhead (\d+) MiB: "
            r"cgroup >= (\d+) MiB",
            line,
        )
        assert found is not None, line
        vm, asked, overhead, cgroup = found.groups()
        assert int(asked or vm) + int(overhead) + 32 == int(cgroup), line
    assert any("(the guard is asked for 264192 MiB)" in line for line in lines)
    binding = doc["pods"]["binding"]
    assert (binding["vm_bytes"], binding["asked_bytes"]) == (87168 * MiB, 264192 * MiB)
