"""`kata-mem preview`, `host` and `config check` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

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


def test_the_vcpu_line_holds_an_annotations_default_vcpus_as_kata_does(
    run_cli: Run, tmp_path: Path
) -> None:
    """Kata reads default_vcpus as a float32 (an annotation's, ``strconv.ParseFloat(v,
    32)``): 2.00000001 is 2.0. The line read "target 3 (default 2 + containers 0 = 2)": it
    planned with the decimal and printed it rounded to six digits (issue 33, item 5). A
    TOML's is the plan case tables' (fidelity.json, default-vcpus-*)."""
    host = ("--host-memory", "16Gi", "--host-cpus", "8", "--host-arch", "amd64")
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


def test_a_clamp_says_the_requested_mib_the_table_and_the_json_show(run_cli: Run) -> None:
    # 2048 MiB and a byte: 2049 in the table and requested_mib, and so in the clamp's text.
    args = ("preview", "--config", UPSTREAM_QEMU, "--limit", "1", "--host-memory", "2048Mi")
    text = run_cli(*args, "--host-cpus", "2").out
    assert "requested                     2049" in text
    assert "why: host_memtotal: requested 2049 MiB clamped to 2048 MiB by the host's" in text
    doc = json.loads(run_cli(*args, "--host-cpus", "2", "--json").out)
    memory = doc["memory"]
    assert memory["requested_mib"] == 2049
    assert memory["clamps"][0]["detail"].startswith("requested 2049 MiB clamped to 2048 MiB")
    assert not any("2048.01" in w for w in doc["warnings"]), doc["warnings"]


def test_preview_and_a_dry_run_plan_one_request_alike(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same flags, a configuration named relative to the working directory: the plan
    of ``apply --dry-run`` (on the VM Kata boots, as no endpoint is given) is preview's,
    byte for byte, but for the node's total, which only an apply reads (it admits a grow
    against the node's budget; a preview has no node to admit against)."""
    monkeypatch.chdir(KATA_CONFIGS)
    host = ("--host-memory", "16Gi", "--host-cpus", "8", "--host-arch", "x86_64")
    workload = ("--limit", "1Gi", "--cpu", "500m", "--limit", "300Mi")
    args = ("--config", "configuration-qemu.toml", *host, *workload, "--json")
    previewed = run_cli("preview", *args)
    dry = run_cli("apply", "--dry-run", "--state-dir", str(tmp_path / "state"), *args)
    assert (previewed.code, dry.code) == (0, 0), (previewed.err, dry.err)
    plan = json.loads(dry.out)["plan"]
    assert plan["memory"]["node"] is not None
    plan["memory"]["node"] = None
    assert json.dumps(plan, indent=2) + "\n" == previewed.out
    # Both name the configuration as it was given.
    assert plan["config"]["path"] == "configuration-qemu.toml"
    assert not (tmp_path / "state").exists()
