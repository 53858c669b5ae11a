"""Planning inputs as a user gives them: --host-arch,
--host-hugepages, --current, default_memory above the host, Kata's integer
types, malformed CRI annotations and cpusets, from the CLI and the shim."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import write_config
from tests.support.paths import KATA_CONFIGS, REPO

Run = Callable[..., CliResult]
UPSTREAM_QEMU = str(KATA_CONFIGS / "configuration-qemu.toml")
REQUEST_SCHEMA = json.loads((REPO / "kata_mem" / "schemas" / "shim-request.v1.json").read_text())


def _preview(run_cli: Run, *args: str) -> dict[str, Any]:
    r = run_cli("preview", "--json", *args)
    assert r.code == 0, r.err
    doc: dict[str, Any] = json.loads(r.out)
    return doc


def _shim(doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    jsonschema.validate(doc, REQUEST_SCHEMA)
    r = kata_mem_process("shim", input=json.dumps(doc), timeout=60)
    assert "Traceback" not in r.stderr, r.stderr
    response: dict[str, Any] = json.loads(r.stdout)
    return r.returncode, response


def _request(**fields: Any) -> dict[str, Any]:
    return {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-1",
        "event": "update",
        "config": UPSTREAM_QEMU,
        "containers": [],
        **fields,
    }


# --- the architecture ------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "cap"), [("x86_64", 240), ("amd64", 240), ("aarch64", 123)])
def test_host_arch_names_keep_the_vcpu_cap(run_cli: Run, arch: str, cap: int) -> None:
    doc = _preview(
        run_cli,
        "--config",
        UPSTREAM_QEMU,
        "--host-memory",
        "64Gi",
        "--host-cpus",
        "1000",
        "--host-arch",
        arch,
        "--cpu",
        "2000",
    )
    assert (doc["vcpus"]["max"], doc["vcpus"]["target"]) == (cap, cap)
    assert doc["vcpus"]["clamped_by"] == ["arch"]


def test_unknown_arch_exits_4_with_the_list() -> None:
    r = kata_mem_process("preview", "--config", UPSTREAM_QEMU, "--host-arch", "sparc")
    assert r.returncode == 4, r.stderr
    assert "--host-arch 'sparc'" in r.stderr
    assert "x86_64/amd64, aarch64/arm64, ppc64le, s390x, riscv64" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_name_kata_mem_host_prints_is_accepted_back(run_cli: Run) -> None:
    shown = json.loads(run_cli("host", "--json").out)
    machine = dict(shown["sources"])["arch"].removeprefix("uname machine = ")
    again = json.loads(run_cli("host", "--json", "--host-arch", machine).out)
    assert again["arch"] == shown["arch"]


def test_shim_host_arch_is_normalized_and_checked() -> None:
    host = {"memory_bytes": 64 << 30, "cpus": 1000, "arch": "x86_64"}
    code, doc = _shim(
        _request(containers=[{"id": "c", "cpu_quota": 10**9, "cpu_period": 10**5}], host=host)
    )
    assert code == 0 and doc["plan"]["vcpus"]["max"] == 240
    bad = _request(host={**host, "arch": "sparc"})
    r = kata_mem_process("shim", input=json.dumps(bad), timeout=60)
    assert r.returncode == 4
    error = json.loads(r.stdout)["error"]
    assert "request host.arch 'sparc'" in error["message"] and "x86_64/amd64" in error["message"]


# --- default_memory above the host, and Kata's integer types ------------------------------


def test_a_plan_never_exceeds_the_host(run_cli: Run, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", {"default_memory": 40000})
    args = ("--config", str(cfg), "--host-memory", "31753Mi", "--host-cpus", "8")
    m = _preview(run_cli, *args, "--limit", "1Gi")["memory"]
    assert m["base_mib"] == m["max_mib"] == m["target_mib"] == m["current_mib"] == 31753
    text = run_cli("preview", *args).out
    assert "default_memory 40000 MiB is above the host's memory 31753 MiB" in text
    for row in ("max", "target", "current"):
        assert re.search(rf"^  {row} +31753\b", text, re.M), text


def test_default_memory_beyond_uint32_is_a_config_error(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", {"default_memory": 99999999999999999999})
    r = kata_mem_process("preview", "--config", str(cfg), "--host-memory", "8Gi")
    assert r.returncode == 3, r.stderr
    assert f"{cfg}: [hypervisor.qemu] default_memory: 99999999999999999999 is out of range" in (
        r.stderr
    )
    assert "uint32 (MiB), expected 0 to 4294967295" in r.stderr


# --- --current ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "message"),
    [
        ("100Gi", "above the memory maximum 8192 MiB (host_memtotal)"),
        ("2100Mi", "52 MiB above the boot memory 2048 MiB is not a whole number of 128 MiB blocks"),
        ("1Gi", "below the boot memory 2048 MiB"),
    ],
)
def test_impossible_current_sizes_exit_4(run_cli: Run, current: str, message: str) -> None:
    r = run_cli("preview", "--config", UPSTREAM_QEMU, "--host-memory", "8Gi", "--current", current)
    assert r.code == 4
    assert f"--current {current!r}: {message}" in r.err


def test_impossible_current_real_process() -> None:
    r = kata_mem_process(
        "preview", "--config", UPSTREAM_QEMU, "--host-memory", "8Gi", "--current", "2100Mi"
    )
    assert r.returncode == 4 and "--current '2100Mi'" in r.stderr and "Traceback" not in r.stderr


def test_virtio_mem_current_uses_the_device_block(run_cli: Run, tmp_path: Path) -> None:
    cfg = str(write_config(tmp_path / "c.toml", {"enable_virtio_mem": True}))
    doc = _preview(run_cli, "--config", cfg, "--host-memory", "8Gi", "--current", "2050Mi")
    assert doc["memory"]["current_mib"] == 2050
    r = run_cli("preview", "--config", cfg, "--host-memory", "8Gi", "--current", "2049Mi")
    assert r.code == 4 and "2 MiB blocks (virtio-mem)" in r.err


# --- --host-hugepages and host.hugepages ---------------------------------------------------


def test_host_hugepages_make_the_plan_reproducible(run_cli: Run, tmp_path: Path) -> None:
    cfg = str(write_config(tmp_path / "c.toml", {"enable_hugepages": True}))
    args = ("--config", cfg, "--host-memory", "16Gi", "--host-cpus", "8", "--limit", "8Gi")
    m = _preview(run_cli, *args, "--host-hugepages", "2048x2Mi")["memory"]
    assert (m["max_mib"], m["target_mib"], m["clamped_by"]) == (4096, 4096, ["hugepages"])
    m = _preview(run_cli, *args, "--host-hugepages", "8x1Gi")["memory"]
    assert (m["max_mib"], m["block_mib"], m["target_mib"]) == (8192, 1024, 8192)
    host = json.loads(run_cli("host", "--json", "--host-hugepages", "512x2Mi").out)
    assert (host["hugepages_total"], host["hugepage_size_kib"]) == (512, 2048)
    assert dict(host["sources"])["hugepages"] == "override"
    # The shim's host field gives the same plan.
    code, doc = _shim(
        _request(
            config=cfg,
            containers=[{"id": "c", "memory_limit_bytes": 8 << 30}],
            host={
                "memory_bytes": 16 << 30,
                "cpus": 8,
                "hugepages": {"count": 2048, "size_bytes": 2 << 20},
            },
        )
    )
    assert code == 0 and doc["plan"]["memory"]["target_mib"] == 4096


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("512", "expected COUNTxSIZE"),
        ("x2Mi", "expected COUNTxSIZE"),
        ("-1x2Mi", "expected COUNTxSIZE"),
        ("12x3Mi", "page size 3Mi is not a hugepage size of amd64; expected 2Mi or 1Gi"),
        ("4x1Ki", "page size 1Ki is not a hugepage size of amd64; expected 2Mi or 1Gi"),
        ("4x64Ki", "page size 64Ki is not a hugepage size of amd64"),  # arm64's, not x86's
        ("1x2Q", "SIZE: invalid quantity '2Q'"),
    ],
)
def test_bad_host_hugepages_exit_4(run_cli: Run, value: str, message: str) -> None:
    r = run_cli("host", "--host-arch", "x86_64", "--host-hugepages", value)
    assert r.code == 4 and f"--host-hugepages {value!r}" in r.err and message in r.err


def test_bad_shim_hugepages_exit_4() -> None:
    bad = _request(host={"hugepages": {"count": 1, "size_bytes": 3 << 20}})
    r = kata_mem_process("shim", input=json.dumps(bad), timeout=60)
    assert r.returncode == 4
    assert "request host.hugepages: page size" in json.loads(r.stdout)["error"]["message"]


# --- Kata fidelity from the command line -------------------------------------------------


def _sandbox_spec(tmp_path: Path, annotations: dict[str, str]) -> str:
    path = tmp_path / "sandbox.json"
    path.write_text(
        json.dumps({"annotations": {"io.kubernetes.cri.container-type": "sandbox", **annotations}})
    )
    return str(path)


def test_malformed_sizing_annotations_warn_and_plan(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", runtime={"static_sandbox_resource_mgmt": True})
    spec = _sandbox_spec(
        tmp_path,
        {
            "io.kubernetes.cri.sandbox-memory": "1Gi",
            "io.kubernetes.cri.sandbox-cpu-quota": "",
            "io.kubernetes.cri.sandbox-cpu-period": "100000",
        },
    )
    args = ("preview", "--config", str(cfg), "--oci", spec, "--host-memory", "16Gi")
    r = kata_mem_process(*args, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["memory"]["target_mib"] == 2048
    (warning,) = [w for w in doc["warnings"] if "read as absent" in w]
    assert "io.kubernetes.cri.sandbox-memory: '1Gi'" in warning and "read as absent (0)" in warning
    assert "read as absent" in kata_mem_process(*args).stdout
    code, response = _shim(
        _request(
            config=str(cfg),
            annotations={
                "io.kubernetes.cri.sandbox-memory": "1Gi",
                "io.kubernetes.cri.sandbox-cpu-quota": "x",
            },
        )
    )
    assert code == 0
    assert sum("read as absent" in w for w in response["warnings"]) == 2


def test_oci_cpusets_size_the_vcpus(run_cli: Run, tmp_path: Path) -> None:
    specs = []
    for name, cpu in (("a", {"cpus": "0-3,7", "quota": -1}), ("b", {"cpus": "8-9"})):
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps({"linux": {"resources": {"cpu": cpu}}}))
        specs += ["--oci", str(path)]
    args = ("--config", UPSTREAM_QEMU, "--host-memory", "16Gi", "--host-cpus", "16", *specs)
    assert _preview(run_cli, *args)["vcpus"]["target"] == 1 + 5 + 2
    # One container with a quota: the cpusets no longer count (Kata calculateSandboxCPUs).
    assert _preview(run_cli, *args, "--cpu", "2")["vcpus"]["target"] == 3


def test_static_sizing_raises_the_maxima(run_cli: Run, tmp_path: Path) -> None:
    cfg = write_config(
        tmp_path / "c.toml",
        {"default_vcpus": 2, "default_maxvcpus": 4, "default_maxmemory": 4096},
        runtime={"static_sandbox_resource_mgmt": True},
    )
    doc = _preview(
        run_cli,
        "--config",
        str(cfg),
        "--host-memory",
        "16Gi",
        "--host-cpus",
        "8",
        "--cpu",
        "6",
        "--limit",
        "6Gi",
    )
    assert (doc["vcpus"]["target"], doc["vcpus"]["max"], doc["vcpus"]["clamped_by"]) == (8, 8, [])
    assert (doc["memory"]["target_mib"], doc["memory"]["max_mib"]) == (8192, 8192)


def test_reported_default_vcpus_is_the_one_used(run_cli: Run, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", {"default_vcpus": -1, "default_maxvcpus": 1})
    args = ("--config", str(cfg), "--host-memory", "16Gi", "--host-cpus", "8")
    v = _preview(run_cli, *args)["vcpus"]
    assert (v["default"], v["requested"], v["target"], v["max"]) == (1.0, 1.0, 1, 1)
    assert "vCPUs: target 1 (default 1 + containers 0 = 1), max 1" in run_cli("preview", *args).out
