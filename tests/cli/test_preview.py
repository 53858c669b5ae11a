"""`kata-mem preview`, `host` and `config check` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

from tests.support.cli import CliResult
from tests.support.configs import write_config
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


QEMU = str(REPO / "configs" / "configuration-qemu.toml")
QEMU_VIRTIO_MEM = str(REPO / "configs" / "configuration-qemu-virtio-mem.toml")


def _line(out: str, start: str) -> str:
    (found,) = [line for line in out.splitlines() if line.lstrip().startswith(start)]
    return found


def test_a_target_rounded_up_to_whole_blocks_says_so(run_cli: Run) -> None:
    """A target above what was asked is not a clamp, and was shown with no word of why
    (requested 2172, target 2176): the text says it is rounded up to whole blocks."""
    r = run_cli("preview", "--config", QEMU, "--limit", "129M", "--host-memory", "31753Mi")
    assert r.code == 0, r.err
    assert _line(r.out, "requested").split()[1] == "2172"
    assert _line(r.out, "target").split() == [
        "target",
        "2176",
        "rounded",
        "up",
        "to",
        "whole",
        "128",
        "MiB",
        "blocks",
    ]
    r = run_cli(
        "preview", "--config", QEMU_VIRTIO_MEM, "--limit", "100.5Mi", "--host-memory", "31753Mi"
    )
    assert (
        " ".join(_line(r.out, "target").split()) == "target 2150 rounded up to whole 2 MiB blocks"
    )
    # Exactly what was asked, or clamped (the clamp says why): nothing more on the row.
    r = run_cli("preview", "--config", QEMU, "--limit", "1Gi", "--host-memory", "31753Mi")
    assert _line(r.out, "target").split() == ["target", "3072"]
    r = run_cli("preview", "--config", QEMU, "--limit", "1000Gi", "--host-memory", "31753Mi")
    assert _line(r.out, "target").split()[2:] == ["clamped:", "host_memtotal,", "alignment"]


def test_the_vcpu_line_adds_up_and_says_why_it_is_clamped(run_cli: Run, tmp_path: Path) -> None:
    """It read "default 1 + containers = 501 ... clamped by host_cpus": the containers'
    CPUs were not shown, and the clamp was a code, not why."""
    host = ("--host-memory", "31753Mi", "--host-arch", "amd64")
    boom = ("preview", "--config", QEMU, "--pod", BOOM, *host)
    r = run_cli(*boom, "--host-cpus", "8")
    assert r.code == 0, r.err
    assert _line(r.out, "vCPUs:") == (
        "vCPUs: target 8 (default 1 + containers 500 = 501), max 8, host 8, "
        "clamped to the host's 8 CPUs"
    )
    capped = tmp_path / "configuration.toml"
    text = Path(QEMU).read_text()
    assert "\ndefault_maxvcpus = 0\n" in text
    capped.write_text(text.replace("\ndefault_maxvcpus = 0\n", "\ndefault_maxvcpus = 4\n"))
    r = run_cli("preview", "--config", str(capped), "--pod", BOOM, *host, "--host-cpus", "8")
    assert r.code == 0, r.err
    assert _line(r.out, "vCPUs:").endswith(", clamped to default_maxvcpus 4")
    r = run_cli(*boom, "--host-cpus", "1000")
    assert _line(r.out, "vCPUs:").endswith(
        ", clamped to 240, the most vCPUs Kata gives a VM on this architecture"
    )
    r = run_cli("preview", "--config", QEMU, "--cpu", "1.5", *host, "--host-cpus", "8")
    assert _line(r.out, "vCPUs:") == (
        "vCPUs: target 3 (default 1 + containers 1.5 = 2.5), max 8, host 8"
    )


def test_the_vcpu_line_holds_default_vcpus_as_kata_does(run_cli: Run, tmp_path: Path) -> None:
    """Kata reads default_vcpus as a float32 (a TOML's, katautils/config.go ``NumVCPUs
    float32``; an annotation's, ``strconv.ParseFloat(v, 32)``): 2.00000001 is 2.0 and boots
    2 vCPUs. The line read "target 3 (default 2 + containers 0 = 2)": it planned with the
    decimal and printed it rounded to six digits (issue 33, item 5)."""
    host = ("--host-memory", "16Gi", "--host-cpus", "8", "--host-arch", "amd64")
    for written, line in (
        ("2.00000001", "vCPUs: target 2 (default 2 + containers 0 = 2), max 8, host 8"),
        # The float32 2 + 2^-22 is above 2: 3 vCPUs, and the line shows why.
        ("2.0000002", "vCPUs: target 3 (default 2.0000002 + containers 0 = 2.0000002), max 8, "
         "host 8"),
    ):  # fmt: skip
        cfg = tmp_path / f"{written}.toml"
        cfg.write_text(
            Path(QEMU)
            .read_text()
            .replace("\ndefault_vcpus = 1\n", f"\ndefault_vcpus = {written}\n")
        )
        r = run_cli("preview", "--config", str(cfg), *host)
        assert r.code == 0, r.err
        assert _line(r.out, "vCPUs:") == line
    # The annotation, read as Kata's Go runtime reads it (setFloat32WithCheck).
    cfg = write_config(tmp_path / "ann.toml", {"enable_annotations": ["default_vcpus"]})
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "kind: Pod\nmetadata:\n  annotations:\n"
        '    io.katacontainers.config.hypervisor.default_vcpus: "2.00000001"\n'
        "spec:\n  containers:\n  - name: a\n    resources:\n      limits: {cpu: 500m}\n"
    )
    r = run_cli("preview", "--config", str(cfg), *host, "--pod", str(pod))
    assert r.code == 0, r.err
    assert _line(r.out, "vCPUs:") == (
        "vCPUs: target 3 (default 2 + containers 0.5 = 2.5), max 8, host 8"
    )
    r = run_cli("preview", "--config", str(cfg), *host, "--pod", str(pod), "--json")
    assert json.loads(r.out)["vcpus"]["default"] == 2


def test_the_vcpu_line_of_runtime_rs_static_sizing_adds_up(run_cli: Run) -> None:
    """runtime-rs static sizing boots overhead_vcpus + the containers' CPUs instead of
    default_vcpus (planner.runtime_rs_static): the line read "default 2.7 + containers 0
    = 2.7" for --cpu 2.5, the containers already folded into the default."""
    static = KATA_CONFIGS / "configuration-qemu-runtime-rs.toml"
    text = static.read_text()
    assert "\noverhead_vcpus = 0.2\n" in text
    assert "\nstatic_sandbox_resource_mgmt = true\n" in text
    host = ("--host-memory", "16Gi", "--host-cpus", "4", "--host-arch", "amd64")
    r = run_cli("preview", "--config", str(static), "--cpu", "2.5", *host)
    assert r.code == 0, r.err
    assert _line(r.out, "vCPUs:") == (
        "vCPUs: target 3 (overhead_vcpus 0.2 + containers 2.5 = 2.7), max 3, host 4"
    )
    # Never fewer than 1 (runtime-rs InitialSizeManager::setup_config).
    r = run_cli("preview", "--config", str(static), "--cpu", "0.5", *host)
    assert r.code == 0, r.err
    assert _line(r.out, "vCPUs:") == (
        "vCPUs: target 1 (overhead_vcpus 0.2 + containers 0.5 = 0.7, at least 1), max 1, host 4"
    )


def test_the_max_row_names_what_set_the_maximum(run_cli: Run, tmp_path: Path) -> None:
    """The row said "default_maxmemory 0 = host 24105 MiB" beside a max of 8192 set by the
    hugepage pool, or of 10240 raised to a static VM's boot size."""
    text = Path(QEMU_VIRTIO_MEM).read_text()
    assert "\nenable_hugepages = false\n" in text
    pooled = tmp_path / "hugepages.toml"
    pooled.write_text(text.replace("\nenable_hugepages = false\n", "\nenable_hugepages = true\n"))
    host = ("--host-memory", "24105Mi", "--host-cpus", "2", "--host-arch", "amd64")
    r = run_cli(
        "preview",
        "--config",
        str(pooled),
        "--limit",
        "100Gi",
        *host,
        "--host-hugepages",
        "4096x2Mi",
    )
    assert r.code == 0, r.err
    assert " ".join(_line(r.out, "max").split()) == (
        "max 8192 default_maxmemory 0 = host 24105 MiB; the hugepage pool holds 8192 MiB"
    )
    text = Path(QEMU).read_text()
    assert (
        "\ndefault_maxmemory = 0\n" in text and "\nstatic_sandbox_resource_mgmt = false\n" in text
    )
    static = tmp_path / "static.toml"
    static.write_text(
        text.replace("\ndefault_maxmemory = 0\n", "\ndefault_maxmemory = 4096\n").replace(
            "\nstatic_sandbox_resource_mgmt = false\n", "\nstatic_sandbox_resource_mgmt = true\n"
        )
    )
    r = run_cli("preview", "--config", str(static), "--limit", "8Gi", *host)
    assert r.code == 0, r.err
    assert " ".join(_line(r.out, "max").split()) == (
        "max 10240 default_maxmemory 4096 MiB, host 24105 MiB; raised to the boot size 10240 MiB"
    )
    # Set by what it names: nothing more.
    r = run_cli("preview", "--config", QEMU, "--limit", "8Gi", *host)
    assert " ".join(_line(r.out, "max").split()) == "max 24105 default_maxmemory 0 = host 24105 MiB"
    # Boot memory above the maximum is the maximum (its note says so).
    text = Path(QEMU).read_text()
    low = tmp_path / "low.toml"
    low.write_text(text.replace("\ndefault_maxmemory = 0\n", "\ndefault_maxmemory = 1024\n"))
    r = run_cli("preview", "--config", str(low), "--limit", "1Gi", *host)
    assert " ".join(_line(r.out, "max").split()) == (
        "max 2048 default_maxmemory 1024 MiB, host 24105 MiB; raised to the boot memory "
        "2048 MiB, which is above it"
    )
    # Lowered to the hugepage pool, then raised to the boot memory above the pool: the row
    # said the boot memory was above the host's 24105 MiB.
    r = run_cli(
        "preview", "--config", str(pooled), "--limit", "1Gi", *host, "--host-hugepages", "512x2Mi"
    )
    assert r.code == 0, r.err
    assert " ".join(_line(r.out, "max").split()) == (
        "max 2048 default_maxmemory 0 = host 24105 MiB; the hugepage pool holds 1024 MiB; "
        "raised to the boot memory 2048 MiB, which is above it"
    )


def test_a_pod_overhead_the_kata_model_does_not_add_says_so(run_cli: Run) -> None:
    """`sizing: kata (pod overhead 160 MiB from ...)` beside a VM of default_memory + limits
    read as if the 160 MiB were in it."""
    pod = str(PODS / "kata-overhead.yaml")
    r = run_cli("preview", "--config", QEMU, "--pod", pod, "--host-memory", "31753Mi")
    assert r.code == 0, r.err
    assert _line(r.out, "sizing:") == (
        f"sizing: kata (pod overhead 160 MiB from {pod}: spec.overhead.memory; not in the VM: "
        "requested is base + container limits)"
    )


def test_config_check_says_what_backs_a_hot_added_dimm(run_cli: Run, tmp_path: Path) -> None:
    r = run_cli("config", "check", UPSTREAM_QEMU, "--json")
    doc = json.loads(r.out)
    assert doc["effective"]["shared_fs"] == "virtio-fs"
    dimm = doc["dimm_backend"]
    assert (dimm["qom_type"], dimm["mem_path"], dimm["share"]) == (
        "memory-backend-file",
        "/dev/shm",
        True,
    )
    assert "qemu.go getMemArgs" in dimm["why"]
    ninep = write_config(tmp_path / "c.toml", {"shared_fs": "virtio-9p"})
    text = run_cli("config", "check", str(ninep))
    assert (
        "a hot-added DIMM's memory: memory-backend-ram (shared_fs virtio-9p: no vhost-user "
        "daemon maps the guest's memory, so private RAM" in text.out
    )
    assert "[hypervisor.qemu] shared_fs = 'virtio-9p'" in text.out
    # Only QEMU takes DIMMs from kata-mem.
    clh = run_cli("config", "check", str(KATA_CONFIGS / "configuration-clh.toml"), "--json")
    assert json.loads(clh.out)["dimm_backend"] is None
