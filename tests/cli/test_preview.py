"""`kata-mem preview`, `host` and `config check` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

from tests.support.cli import CliResult
from tests.support.paths import KATA_CONFIGS, PODS, REPO

UPSTREAM_QEMU = str(KATA_CONFIGS / "configuration-qemu.toml")
BOOM = str(PODS / "memory-boom.yaml")
Run = Callable[..., CliResult]


def test_memory_boom_clamped_to_host(run_cli: Run) -> None:
    r = run_cli(
        "preview",
        "--config",
        UPSTREAM_QEMU,
        "--pod",
        BOOM,
        "--host-memory",
        "31753Mi",
        "--host-cpus",
        "8",
        "--json",
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    m = doc["memory"]
    assert doc["schema"] == "kata-mem/plan/v1"
    # The largest 128 MiB-aligned size not above 31753 MiB.
    assert (m["max_mib"], m["target_mib"]) == (31753, 31744)
    assert "host_memtotal" in m["clamped_by"]
    assert m["steps"] == [
        {
            "action": "plug_dimm",
            "size_mib": 29696,
            "device": "kmdimm0",
            "delta_mib": 29696,
            "total_mib": 31744,
        }
    ]
    assert doc["vcpus"] == {
        "host": 8,
        "max": 8,
        "default": 1.0,
        "requested": 501.0,
        "target": 8,
        "clamped_by": ["host_cpus"],
    }
    assert any("MemTotal" in w for w in doc["warnings"])


def test_memory_boom_with_maxmemory_dropin(run_cli: Run, tmp_path: Path) -> None:
    cfg = tmp_path / "configuration.toml"
    cfg.write_bytes(Path(UPSTREAM_QEMU).read_bytes())
    (tmp_path / "config.d").mkdir()
    (tmp_path / "config.d" / "50-max.toml").write_text(
        "[hypervisor.qemu]\ndefault_maxmemory = 8192\n"
    )
    r = run_cli(
        "preview",
        "--config",
        str(cfg),
        "--pod",
        BOOM,
        "--host-memory",
        "31753Mi",
        "--host-cpus",
        "8",
        "--json",
    )
    m = json.loads(r.out)["memory"]
    assert (m["configured_max_mib"], m["max_mib"], m["target_mib"]) == (8192, 8192, 8192)
    assert m["clamped_by"] == ["default_maxmemory"]


def test_human_output_explains_each_clamp(run_cli: Run) -> None:
    r = run_cli(
        "preview",
        "--config",
        UPSTREAM_QEMU,
        "--pod",
        BOOM,
        "--host-memory",
        "31753Mi",
        "--host-cpus",
        "8",
    )
    assert r.code == 0
    assert "target                       31744  clamped: host_memtotal, alignment" in r.out
    assert (
        "why: host_memtotal: requested 1026048 MiB clamped to 31753 MiB by the host's MemTotal"
        in r.out
    )
    assert r.err == ""


def test_current_plans_a_shrink_marked_for_safety(run_cli: Run) -> None:
    cfg = str(REPO / "configs" / "configuration-qemu-virtio-mem.toml")
    r = run_cli(
        "preview",
        "--config",
        cfg,
        "--limit",
        "512Mi",
        "--current",
        "3Gi",
        "--host-memory",
        "16Gi",
        "--host-cpus",
        "4",
        "--allow-shrink",
        "--json",
    )
    m = json.loads(r.out)["memory"]
    assert m["shrink"] is True and m["delta_mib"] == -512
    assert [s["size_mib"] for s in m["steps"]] == [768, 512]
    assert any("safety check" in w for w in json.loads(r.out)["warnings"])


def test_kata_conf_file_is_used_and_named(
    run_cli: Run, monkeypatch: object, tmp_path: Path
) -> None:
    import pytest

    assert isinstance(monkeypatch, pytest.MonkeyPatch)
    monkeypatch.setenv("KATA_CONF_FILE", UPSTREAM_QEMU)
    r = run_cli("config", "check", "--json")
    doc = json.loads(r.out)
    assert (doc["path"], doc["chosen_by"]) == (UPSTREAM_QEMU, "KATA_CONF_FILE")
    assert doc["effective"]["default_memory_mib"] == 2048


def test_config_check_text_shows_origins(run_cli: Run) -> None:
    r = run_cli("config", "check", UPSTREAM_QEMU)
    assert r.code == 0
    assert "[hypervisor.qemu] default_memory = 2048" in r.out
    assert "headroom_percent" in r.out


def test_host_overrides(run_cli: Run) -> None:
    r = run_cli(
        "host", "--host-memory", "32Gi", "--host-cpus", "8", "--host-arch", "arm64", "--json"
    )
    doc = json.loads(r.out)
    assert (doc["memory_mib"], doc["cpus"], doc["arch"]) == (32768, 8, "arm64")
    assert doc["sources"]["memory"] == "override"


def test_host_probe_reads_this_machine(run_cli: Run) -> None:
    import psutil

    doc = json.loads(run_cli("host", "--json").out)
    assert doc["memory_mib"] == psutil.virtual_memory().total // 2**20
    assert doc["cpus"] == psutil.cpu_count()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=REPO, check=False, timeout=60
    )


def test_python_dash_m_and_no_backend_imports() -> None:
    args = [
        "kata-mem",
        "preview",
        "--config",
        UPSTREAM_QEMU,
        "--pod",
        BOOM,
        "--host-memory",
        "32Gi",
    ]
    probe = "\n".join(
        [
            "import sys, runpy",
            f"sys.argv = {args!r}",
            "try: runpy.run_module('kata_mem', run_name='__main__')",
            "except SystemExit: pass",
            "heavy = ('qemu', 'libvirt', 'asyncio')",
            "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in heavy))",
        ]
    )
    r = _run("-c", probe)
    assert "target" in r.stdout
    assert r.stdout.strip().endswith("LOADED []"), r.stdout[-300:]
