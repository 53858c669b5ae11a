"""Kata's per-pod hypervisor annotations against the case table
(tests/fixtures/annotation-cases/hypervisor.json; its schema:
tests/fixtures/schemas/hypervisor-annotations.schema.json)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.annotations import PREFIX, pod_config
from kata_mem.core.errors import ConfigError, InputError
from kata_mem.core.model import HostFacts, SizingConfig, Workload
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.config import load_config
from tests.support.cases import case_params, float32
from tests.support.configs import write_config


@pytest.mark.parametrize("case", case_params("hypervisor-annotations"))
def test_annotation_case(case: dict[str, Any], tmp_path: Path) -> None:
    cfg = load_config(
        write_config(
            tmp_path / "c.toml",
            {"enable_annotations": case["enable_annotations"]},
            name=case.get("hypervisor", "qemu"),
        )
    )
    host = HostFacts(memory=64 * GiB, cpus=case.get("host_cpus", 8), arch=case.get("arch", "amd64"))
    given = tuple((PREFIX + k, v) for k, v in case["annotations"].items())
    workload = Workload(hypervisor=given, hypervisor_origin="pod.yaml: metadata.annotations")
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(InputError) as info:
            pod_config(cfg, host, workload)
        message = info.value.message
        assert expect["error"] in message
        assert message.startswith("pod.yaml: metadata.annotations: annotation " + PREFIX)
        return
    got = pod_config(cfg, host, workload)
    values = {
        "default_memory_mib": got.default_memory // MiB,
        "memory_slots": got.memory_slots,
        "memory_offset_mib": got.memory_offset // MiB,
        "enable_virtio_mem": got.enable_virtio_mem,
        "enable_hugepages": got.enable_hugepages,
        "default_vcpus": got.default_vcpus,
        "default_maxvcpus": got.default_maxvcpus,
        "shared_fs": got.shared_fs,
    }
    for key, want in expect.items():
        # A case's vCPUs are the float32 Kata holds (float32() in setFloat32WithCheck).
        exact = Fraction(float32(want)) if key == "default_vcpus" else want
        assert values[key] == exact, key


def test_an_applied_annotation_says_where_it_came_from(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path / "c.toml", {"enable_annotations": ["default_memory"]}))
    host = HostFacts(memory=64 * GiB, cpus=8, arch="amd64")
    workload = Workload(hypervisor=((PREFIX + "default_memory", "4096"),), hypervisor_origin="x")
    origin = pod_config(cfg, host, workload).origin("hypervisor.qemu.default_memory")
    assert origin.describe() == f"override, annotation {PREFIX}default_memory = 4096"


def test_a_pattern_go_does_not_compile_loads_and_allows_nothing(tmp_path: Path) -> None:
    # As Kata: the configuration runs every pod that names no hypervisor annotation
    # (Go compiles the patterns only when one is named, and regexpContains drops the error).
    cfg = load_config(
        write_config(tmp_path / "c.toml", {"enable_annotations": ["default_(memory"]})
    )
    host = HostFacts(memory=64 * GiB, cpus=8, arch="amd64")
    assert pod_config(cfg, host, Workload()) == cfg
    workload = Workload(hypervisor=((PREFIX + "default_memory", "4096"),), hypervisor_origin="x")
    with pytest.raises(
        InputError,
        match=r"'default_\(memory' is not a Go regexp \(missing closing \): `default_\(memory`\)",
    ):
        pod_config(cfg, host, workload)


def _applied(tmp_path: Path, pattern: str) -> SizingConfig:
    """The configuration with ``enable_annotations = [pattern]`` and a pod asking for
    ``default_memory`` 4096 through its annotation."""
    path = tmp_path / "c.toml"
    path.write_text(  # a TOML basic string: JSON's escapes are TOML's for these patterns
        f'[hypervisor.qemu]\npath = "/usr/bin/qemu"\nenable_annotations = [{json.dumps(pattern)}]\n'
    )
    cfg = load_config(path)
    assert cfg.enable_annotations == (pattern,)
    host = HostFacts(memory=64 * GiB, cpus=8, arch="amd64")
    workload = Workload(hypervisor=((PREFIX + "default_memory", "4096"),), hypervisor_origin="x")
    return pod_config(cfg, host, workload)


@pytest.mark.parametrize(
    ("pattern", "why"),
    [
        # Go's maxHeight: a parse tree over 1000 levels (issue 33, item 15). RE2 compiled it.
        ("(" * 1000 + "default_memory" + ")" * 1000, "expression nests too deeply"),
        # Go's maxSize: 3,355,443 instructions; RE2 said "pattern too large - compile failed".
        ("default_memory|(?:" + "x" * 3400 + "){1000}", "expression too large"),
    ],
    ids=["nested-1000-deep", "too-large"],
)
def test_a_pattern_beyond_gos_limits_allows_nothing_and_says_why(
    tmp_path: Path, pattern: str, why: str
) -> None:
    """Kata's regexpContains drops regexp.MatchString's error, so such a pattern allows no
    annotation; kata-mem matched it with RE2, which has no such limit, and applied the
    pod's default_memory. The refusal names Go's reason, and the pattern only in part."""
    with pytest.raises(InputError) as info:
        _applied(tmp_path, pattern)
    message = info.value.message
    assert "annotation io.katacontainers.config.hypervisor.default_memory is not enabled" in message
    assert f"is not a Go regexp ({why}: `" in message
    assert len(message) < 1000, message


@pytest.mark.parametrize(
    "pattern",
    [
        "(" * 999 + "default_memory" + ")" * 999,
        # Within Go's maxSize (about 2 million instructions); RE2's default memory budget
        # (8 MiB) refused it, so it allowed nothing where Kata allows default_memory.
        "default_memory|(?:" + "x" * 2000 + "){1000}",
    ],
    ids=["nested-999-deep", "large-within-go"],
)
def test_a_pattern_within_gos_limits_allows_as_go_does(tmp_path: Path, pattern: str) -> None:
    assert _applied(tmp_path, pattern).default_memory == 4096 * MiB


def test_a_go_regexp_re2_cannot_match_is_a_configuration_error(tmp_path: Path) -> None:
    # Go 1.25+ reads \p{greek} as \p{Greek} (regexp/syntax canonicalName); RE2 refuses
    # it. kata-mem cannot tell what Kata would allow, and says so rather than allow nothing
    # on a claim that Go does not compile it (what it said before issue 33).
    with pytest.raises(
        ConfigError, match=r"'\\\\p\{greek\}\|default_memory' is a Go regexp, but RE2"
    ):
        _applied(tmp_path, "\\p{greek}|default_memory")
