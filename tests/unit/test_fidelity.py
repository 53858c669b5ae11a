"""Kata fidelity and planning inputs at the unit level:
architecture names, Kata's integer types, CRI annotations that do not parse,
cpusets, impossible current sizes, the boot memory on a small host."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.arch import GO_ARCH, normalize_arch
from kata_mem.core.cpuset import cpuset_size
from kata_mem.core.cri_annotations import (
    ANN_SANDBOX_CPU_PERIOD,
    ANN_SANDBOX_CPU_QUOTA,
    ANN_SANDBOX_CPU_SHARES,
    ANN_SANDBOX_MEMORY,
    sandbox_sizing,
)
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import ConfigError, InputError
from kata_mem.core.frozen import replace
from kata_mem.core.model import ARCHES, Container, HostFacts, SizingConfig, Workload
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import assumed_vm, boot_memory, current_problem
from kata_mem.core.request import SandboxRequest
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.config import load_config
from kata_mem.edges.host import probe_host
from kata_mem.edges.sources import read_oci
from kata_mem.orchestration.handle import saved_request
from tests.support.configs import write_config

HOST = HostFacts(memory=8 * GiB, cpus=8, arch="amd64")

# --- architecture names --------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "go"),
    [
        ("x86_64", "amd64"),
        ("amd64", "amd64"),
        ("aarch64", "arm64"),
        ("arm64", "arm64"),
        ("ppc64le", "ppc64le"),
        ("s390x", "s390x"),
        ("riscv64", "riscv64"),
    ],
)
def test_uname_and_go_names_mean_one_arch(given: str, go: str) -> None:
    assert normalize_arch(given, "--host-arch") == go
    assert probe_host(memory=GiB, cpus=4, arch=given).arch == go


@pytest.mark.parametrize("name", ["sparc", "i686", "X86_64", "", "ppc64"])
def test_unknown_arch_is_refused_with_the_list(name: str) -> None:
    with pytest.raises(InputError) as info:
        probe_host(memory=GiB, cpus=4, arch=name)
    assert f"{name!r}" in info.value.message
    assert "x86_64/amd64, aarch64/arm64, ppc64le, s390x, riscv64" in info.value.message


def test_every_arch_has_a_vcpu_cap() -> None:
    assert set(GO_ARCH.values()) == set(ARCHES)
    for arch in ARCHES:
        host = HostFacts(memory=8 * GiB, cpus=10_000, arch=arch)
        assert plan(_cfg(), host, Workload()).vcpus.max < 10_000


def test_planner_refuses_an_arch_it_has_no_cap_for() -> None:
    with pytest.raises(InputError, match="host arch 'x86_64'"):
        # A library caller may still pass a name the types do not allow.
        host = HostFacts(memory=8 * GiB, cpus=8, arch="x86_64")  # type: ignore[arg-type]
        plan(_cfg(), host, Workload())


# --- Kata's integer types ----------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "range_text"),
    [
        ("default_memory", 99999999999999999999, "uint32 (MiB), expected 0 to 4294967295"),
        ("default_memory", 1 << 32, "expected 0 to 4294967295"),
        ("memory_slots", 1 << 32, "uint32, expected 0 to 4294967295"),
        ("default_maxvcpus", 1 << 32, "uint32, expected 0 to 4294967295"),
        ("default_maxmemory", 1 << 63, "expected 0 to 9223372036854775807"),
        ("memory_offset", 99999999999999999999, "expected 0 to 9223372036854775807"),
        ("default_vcpus", 1e39, "float32"),
        ("default_vcpus", 1 << 24, "float32, expected -16777215 to 16777215"),
    ],
)
def test_values_beyond_katas_types_are_config_errors(
    tmp_path: Path, key: str, value: object, range_text: str
) -> None:
    path = write_config(tmp_path / "c.toml", {key: value})
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = info.value.message
    assert f"{path}: [hypervisor.qemu] {key}: " in message
    assert "out of range" in message and range_text in message


def test_the_largest_values_katas_types_hold_load(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "c.toml",
        {
            "default_memory": (1 << 32) - 1,
            "memory_slots": (1 << 32) - 1,
            "default_maxvcpus": (1 << 32) - 1,
            "default_maxmemory": (1 << 63) - 1,
            "default_vcpus": (1 << 24) - 1,
        },
    )
    cfg = load_config(path)
    assert cfg.default_memory == ((1 << 32) - 1) * MiB
    assert cfg.default_vcpus == (1 << 24) - 1


# --- CRI sandbox-sizing annotations ----------------------------------------------------


@pytest.mark.parametrize(
    ("key", "raw"),
    [
        (ANN_SANDBOX_MEMORY, "lots"),
        (ANN_SANDBOX_MEMORY, "1_000"),
        (ANN_SANDBOX_MEMORY, " 1"),
        (ANN_SANDBOX_MEMORY, "9223372036854775808"),
        (ANN_SANDBOX_CPU_QUOTA, "1.5"),
        (ANN_SANDBOX_CPU_PERIOD, "-100000"),  # ParseUint: no sign
        (ANN_SANDBOX_CPU_SHARES, "+1024"),
    ],
)
def test_a_malformed_annotation_is_read_as_absent_with_a_warning(key: str, raw: str) -> None:
    good = {
        ANN_SANDBOX_MEMORY: str(GiB),
        ANN_SANDBOX_CPU_QUOTA: "200000",
        ANN_SANDBOX_CPU_PERIOD: "100000",
        ANN_SANDBOX_CPU_SHARES: "2048",
    }
    sizing = sandbox_sizing({**good, key: raw}, "spec.json")
    assert len(sizing.notes) == 1
    assert key in sizing.notes[0].text and "read as absent (0)" in sizing.notes[0].text
    expected = sandbox_sizing({**good, key: "0"}, "spec.json")
    assert (sizing.memory, sizing.cpu) == (expected.memory, expected.cpu)


def test_empty_annotations_are_absent_without_a_warning() -> None:
    keys = (ANN_SANDBOX_MEMORY, ANN_SANDBOX_CPU_QUOTA, ANN_SANDBOX_CPU_PERIOD)
    sizing = sandbox_sizing(dict.fromkeys(keys, ""), "spec.json")
    assert (sizing.memory, sizing.cpu, sizing.notes) == (0, Fraction(0), ())


def test_go_integer_syntax_is_accepted() -> None:
    sizing = sandbox_sizing(
        {
            ANN_SANDBOX_MEMORY: "9223372036854775807",  # 19 digits: int64 max
            ANN_SANDBOX_CPU_QUOTA: "+150000",
            ANN_SANDBOX_CPU_PERIOD: "0100000",
        },
        "spec.json",
    )
    assert (sizing.memory, sizing.cpu, sizing.notes) == ((1 << 63) - 1, Fraction(3, 2), ())


def test_shares_size_the_sandbox_only_when_the_quota_is_unconstrained() -> None:
    # Kata CalculateSandboxSizing: quota < 0 (CPU manager static) -> ceil(shares / 1024).
    assert sandbox_sizing(
        {ANN_SANDBOX_CPU_QUOTA: "-1", ANN_SANDBOX_CPU_SHARES: "2049"}, "s"
    ).cpu == Fraction(3)
    assert sandbox_sizing(
        {ANN_SANDBOX_CPU_QUOTA: "0", ANN_SANDBOX_CPU_SHARES: "2049"}, "s"
    ).cpu == Fraction(0)


def test_annotation_warnings_reach_the_plan(tmp_path: Path) -> None:
    spec = tmp_path / "config.json"
    spec.write_text(
        json.dumps(
            {
                "annotations": {
                    "io.kubernetes.cri.container-type": "sandbox",
                    ANN_SANDBOX_MEMORY: "2Gi",
                }
            }
        )
    )
    container, sizing, _, _ = read_oci(spec, "amd64")
    assert container is None and sizing is not None
    result = plan(_cfg(), HOST, Workload((), sizing))
    assert any(ANN_SANDBOX_MEMORY in n.text and "'2Gi'" in n.text for n in result.notes)
    assert result.memory.requested == 2048 * MiB  # the annotation counted as 0


# --- cpusets -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count"),
    [("", 0), ("0", 1), ("0-3,7", 5), ("0-3,2", 4), ("4,0-1,1-2", 4), ("0-4294967295", 1 << 32)],
)
def test_cpuset_size(text: str, count: int) -> None:
    assert cpuset_size(text, "cpus") == count


@pytest.mark.parametrize("text", ["3-1", "a", "0-", "-1", "1,,2", "0-3:1/2", " 0", "0-3,"])
def test_a_malformed_cpuset_is_refused(text: str) -> None:
    with pytest.raises(InputError, match=r"f: .*expected a CPU list such as \"0-3,7\""):
        cpuset_size(text, "f")


def _oci(tmp_path: Path, name: str, cpu: dict[str, Any]) -> Path:
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"linux": {"resources": {"cpu": cpu}}}))
    return path


def test_read_oci_counts_the_cpuset(tmp_path: Path) -> None:
    container, _, _, _ = read_oci(_oci(tmp_path, "a", {"cpus": "0-3,7", "quota": -1}), "amd64")
    assert container is not None and container.cpuset_cpus == 5
    with pytest.raises(InputError, match=r"linux.resources.cpu.cpus: expected a string, got 7"):
        read_oci(_oci(tmp_path, "b", {"cpus": 7}), "amd64")
    with pytest.raises(InputError, match=r"linux.resources.cpu.cpus: '0-3,x'"):
        read_oci(_oci(tmp_path, "c", {"cpus": "0-3,x"}), "amd64")


def test_shim_containers_carry_a_cpuset_and_it_survives_the_saved_request() -> None:
    req = SandboxRequest.from_json(
        json.dumps(
            {
                "schema": "kata-mem/shim-request/v1",
                "sandbox_id": "sb",
                "event": "update",
                "containers": [{"id": "a", "cpuset": "2-3"}, {"id": "b", "cpuset": "0-2,2"}],
            }
        ).encode()
    )
    workload = req.workload
    assert [c.cpuset_cpus for c in workload.containers] == [2, 3]
    assert plan(_cfg(), HOST, workload).vcpus.target == 6
    saved = saved_request(_applying("sb", workload), _cfg(), HOST)
    again = SandboxRequest.from_json(json.dumps(saved.to_json()).encode())
    assert [c.cpuset_cpus for c in again.workload.containers] == [2, 3]


def _applying(sandbox: str, workload: Workload) -> SandboxRequest:
    return SandboxRequest(sandbox, workload=workload, endpoint=Endpoint("qmp", "/q"), mode="apply")


# --- host hugepages in the shim request and the saved request ---------------------------


def test_hugepages_override_survives_the_saved_request() -> None:
    host = probe_host(memory=16 * GiB, cpus=8, arch="x86_64", hugepages=(512, 2 * MiB))
    assert (host.hugepages_total, host.hugepage_size) == (512, 2 * MiB)
    doc = saved_request(_applying("sb", Workload()), _cfg(), host).to_json()
    assert doc["host"]["hugepages"] == {"count": 512, "size_bytes": 2 * MiB}
    assert SandboxRequest.from_json(json.dumps(doc).encode()).host.hugepages == (512, 2 * MiB)


# --- current sizes and the boot memory -------------------------------------------------


def test_current_problems() -> None:
    cfg = _cfg()
    assert current_problem(cfg, HOST, 2048 * MiB) is None
    assert current_problem(cfg, HOST, 2176 * MiB) is None
    assert current_problem(cfg, HOST, 8 * GiB) is None
    assert "below the boot memory 2048 MiB" in (current_problem(cfg, HOST, GiB) or "")
    assert "above the memory maximum 8192 MiB" in (current_problem(cfg, HOST, 100 * GiB) or "")
    assert "not a whole number of 128 MiB blocks (pc-dimm)" in (
        current_problem(cfg, HOST, 2100 * MiB) or ""
    )


def test_the_boot_memory_never_exceeds_the_host() -> None:
    cfg = _cfg(default_memory=40000 * MiB)
    host = HostFacts(memory=31753 * MiB, cpus=8, arch="amd64")
    assert boot_memory(cfg, host) == assumed_vm(cfg, host).base == 31753 * MiB
    result = plan(cfg, host, Workload((Container("c", memory_limit=GiB),)))
    m = result.memory
    assert m.base == m.max == m.target == m.current == 31753 * MiB
    assert any(
        "default_memory 40000 MiB is above the host's memory" in n.text for n in result.notes
    )


def test_the_assumed_vm_has_qemu_s_device_space_as_each_runtime_asks_for_it() -> None:
    """QEMU's maxmem less the boot memory: the Go runtime adds memory_offset and 1024 MiB
    (qemu.go genericMemoryTopology), runtime-rs nothing (cmdline_generator.rs Memory::new)."""
    go = _cfg(default_maxmemory=8 * GiB, memory_offset=512 * MiB)
    assert assumed_vm(go, HOST).device_space == (8192 + 512 + 1024 - 2048) * MiB
    rs = replace(go, runtime="runtime-rs")
    assert assumed_vm(rs, HOST).device_space == (8192 - 2048) * MiB
    # default_maxmemory 0: the host's memory (runtime-rs MemoryInfo::adjust_config).
    assert assumed_vm(replace(rs, default_maxmemory=0), HOST).device_space == HOST.memory - 2 * GiB


def _cfg(**changes: Any) -> SizingConfig:
    base = SizingConfig(
        path="c.toml",
        hypervisor="qemu",
        default_memory=2048 * MiB,
        default_maxmemory=0,
        memory_slots=10,
        memory_offset=0,
        enable_virtio_mem=False,
        enable_hugepages=False,
        static_sandbox_resource_mgmt=False,
        default_vcpus=Fraction(1),
        default_maxvcpus=0,
    )
    return replace(base, **changes)
