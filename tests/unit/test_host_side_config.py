"""The host-side keys of the ``[kata_mem]`` table: read by the real loader, shown by
``kata-mem config check``, and refused (exit 3) with the file, key and what was expected."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.core.units import MiB
from kata_mem.edges.config import load_config
from tests.support.cli import kata_mem_process
from tests.support.configs import write_config

KEYS = {
    "sizing": "pod-limit",
    "pod_overhead_mib": 160,
    "vmm_overhead_mib": 80,
    "vmm_overhead_per_gib_mib": 6,
    "host_cgroup_margin_mib": 16,
    "node_reserved_mib": 2048,
    "node_overcommit": 1.1,
    "host_cgroup_guard": "off",
}


def test_defaults_when_absent(tmp_path: Path) -> None:
    s = load_config(write_config(tmp_path / "c.toml")).settings
    assert (s.sizing, s.pod_overhead, s.node_overcommit) == ("kata", None, None)
    assert s.host_cgroup_guard == "on"
    assert (s.vmm_overhead, s.vmm_overhead_per_gib, s.host_cgroup_margin, s.node_reserved) == (
        64 * MiB,
        8 * MiB,
        32 * MiB,
        0,
    )


def test_every_host_side_key_is_read(tmp_path: Path) -> None:
    s = load_config(write_config(tmp_path / "c.toml", kata_mem=KEYS)).settings
    assert s.sizing == "pod-limit"
    assert s.pod_overhead == 160 * MiB
    assert (s.vmm_overhead, s.vmm_overhead_per_gib) == (80 * MiB, 6 * MiB)
    assert (s.host_cgroup_margin, s.node_reserved) == (16 * MiB, 2048 * MiB)
    assert s.node_overcommit == Fraction(11, 10)  # exact, not the binary float 1.1
    assert s.host_cgroup_guard == "off"


def test_integer_overcommit_and_zero_overheads(tmp_path: Path) -> None:
    keys = {"node_overcommit": 2, "vmm_overhead_mib": 0, "vmm_overhead_per_gib_mib": 0}
    s = load_config(write_config(tmp_path / "c.toml", kata_mem=keys)).settings
    assert (s.node_overcommit, s.vmm_overhead, s.vmm_overhead_per_gib) == (Fraction(2), 0, 0)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("sizing", "pod", '"kata" or "pod-overhead" or "pod-limit"'),
        ("sizing", 1, '"kata" or "pod-overhead" or "pod-limit"'),
        ("pod_overhead_mib", -1, "an integer from 0 to 8796093022207 (MiB; 8 EiB of bytes)"),
        ("pod_overhead_mib", "160Mi", "an integer from 0 to 8796093022207 (MiB; 8 EiB of bytes)"),
        ("vmm_overhead_mib", 1.5, "an integer from 0 to 8796093022207 (MiB; 8 EiB of bytes)"),
        # The range said without its upper bound, so a value above it
        # was refused as not "a non-negative integer".
        ("vmm_overhead_mib", 8796093022208, "an integer from 0 to 8796093022207 (MiB; 8 EiB"),
        ("vmm_overhead_per_gib_mib", 2048, "an integer from 0 to 1024 (MiB per GiB"),
        (
            "host_cgroup_margin_mib",
            True,
            "an integer from 0 to 8796093022207 (MiB; 8 EiB of bytes)",
        ),
        ("node_reserved_mib", -5, "an integer from 0 to 8796093022207 (MiB; 8 EiB of bytes)"),
        ("node_overcommit", 0, "a ratio above 0 and at most 100"),
        ("node_overcommit", -1.5, "a ratio above 0 and at most 100"),
        ("node_overcommit", 1000, "a ratio above 0 and at most 100"),
        ("node_overcommit", "1.5", "a ratio above 0 and at most 100"),
        ("node_overcommit", True, "a ratio above 0 and at most 100"),
        ("host_cgroup_guard", False, '"on" (hold a grow while the VMM\'s cgroup cannot be seen)'),
        ("host_cgroup_guard", "no", '"on" (hold a grow while the VMM\'s cgroup cannot be seen)'),
    ],
)
def test_bad_values_name_file_key_and_expectation(
    tmp_path: Path, key: str, value: object, expected: str
) -> None:
    path = write_config(tmp_path / "c.toml", kata_mem={key: value})
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = info.value.message
    assert str(path) in text and f"[kata_mem] {key}: expected {expected}" in text
    assert info.value.exit_code == 3


def test_nan_and_inf_overcommit_are_refused(tmp_path: Path) -> None:
    for raw in ("nan", "inf"):
        path = tmp_path / f"{raw}.toml"
        path.write_text(f"[hypervisor.qemu]\n[kata_mem]\nnode_overcommit = {raw}\n")
        with pytest.raises(ConfigError, match=r"\[kata_mem\] node_overcommit: expected a ratio"):
            load_config(path)


def test_config_check_json_shows_them_with_their_origin(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", kata_mem=KEYS)
    r = kata_mem_process("config", "check", str(path), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {k: doc["kata_mem"][k] for k in KEYS} == KEYS
    assert doc["sources"]["kata_mem.node_overcommit"].startswith(str(path))
    r = kata_mem_process("config", "check", str(write_config(tmp_path / "d.toml")), "--json")
    shown = json.loads(r.stdout)["kata_mem"]
    assert (shown["sizing"], shown["pod_overhead_mib"], shown["node_overcommit"]) == (
        "kata",
        None,
        None,
    )


def test_config_check_bad_value_exits_3(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", kata_mem={"sizing": "pod"})
    r = kata_mem_process("config", "check", str(path))
    assert r.returncode == 3
    assert f"{path}: [kata_mem] sizing: expected" in r.stderr and "Traceback" not in r.stderr
