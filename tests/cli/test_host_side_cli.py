"""The host side on the command line and the shim: the guard from a named cgroup
(--host-cgroup, host.cgroup), the pod overhead from a Pod or a sandbox spec, and
`status --all` over a state directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from kata_mem.core.cri_annotations import ANN_POD_OVERHEAD
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.model import Workload
from kata_mem.core.record import Record
from kata_mem.core.request import SandboxRequest
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.journal import SandboxState
from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import HOST_ARGS, write_config
from tests.support.paths import PODS, REPO
from tests.support.shim import shim_request_doc

Run = Callable[..., CliResult]
SCHEMAS = REPO / "kata_mem" / "schemas"
RESPONSE_SCHEMA = json.loads((SCHEMAS / "shim-response.v1.json").read_text())
REQUEST_SCHEMA = json.loads((SCHEMAS / "shim-request.v1.json").read_text())


@pytest.fixture
def pod_cgroup(tmp_path: Path) -> Path:
    """A v2 tree as a kubelet makes it: the pod limited to 4256 MiB (4Gi + podFixed
    160Mi), charged 600 MiB; QEMU's own cgroup below it with no limit."""
    root = tmp_path / "cg"
    (root / "kubepods.slice/pod1/qemu").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory\n")
    (root / "kubepods.slice/memory.max").write_text("max\n")
    (root / "kubepods.slice/pod1/memory.max").write_text(f"{4256 * MiB}\n")
    (root / "kubepods.slice/pod1/memory.current").write_text(f"{600 * MiB}\n")
    (root / "kubepods.slice/pod1/qemu/memory.max").write_text("max\n")
    (root / "kubepods.slice/pod1/qemu/memory.current").write_text(f"{590 * MiB}\n")
    return root / "kubepods.slice/pod1/qemu"


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return write_config(tmp_path / "c.toml", kata_mem={"state_dir": str(tmp_path / "state")})


def test_preview_host_cgroup_clamps_with_its_why(run_cli: Run, cfg: Path, pod_cgroup: Path) -> None:
    # kata: 2048 + 4096 = 6144; the pod allows (4256 - 32 - 64) * 1024 / 1032 = 4127 MiB,
    # so 2048 + 16 whole DIMMs of 128 = 4096.
    args = ("preview", "--config", str(cfg), "--limit", "4Gi", *HOST_ARGS)
    r = run_cli(*args, "--host-cgroup", str(pod_cgroup))
    assert r.code == 0, r.err
    assert "why: host_cgroup: grow to 6144 MiB clamped to 4127 MiB by the host cgroup " in r.out
    # The limit is the pod's, one level up: the line says where it binds.
    assert (
        f"host cgroup: {pod_cgroup} (v2, --host-cgroup): limit 4256 MiB at {pod_cgroup.parent}, "
        "charged 590 MiB"
    ) in r.out
    r = run_cli(*args, "--host-cgroup", str(pod_cgroup), "--json")
    doc = json.loads(r.out)["memory"]
    assert doc["target_mib"] == 4096 and doc["clamped_by"] == ["host_cgroup", "alignment"]
    cg = doc["host_cgroup"]
    assert {k: cg[k] for k in ("path", "version", "limit_mib", "usage_mib")} == {
        "path": str(pod_cgroup),
        "version": 2,
        "limit_mib": 4256,
        "usage_mib": 590,
    }
    assert cg["vmm_overhead_mib"] == 64 + 32  # 64 + 8 MiB for each of the 4 GiB
    assert cg["limits"] == [{"path": str(pod_cgroup.parent), "limit_mib": 4256, "usage_mib": 600}]
    # Without the flag a preview has no VMM to find a cgroup from: unguarded.
    doc = json.loads(run_cli(*args, "--json").out)["memory"]
    assert (doc["target_mib"], doc["host_cgroup"], doc["node"]) == (6144, None, None)


def test_preview_missing_host_cgroup_exits_4_naming_it(
    run_cli: Run, cfg: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-cgroup"
    r = run_cli("preview", "--config", str(cfg), *HOST_ARGS, "--host-cgroup", str(missing))
    assert r.code == 4, r.err
    assert f"--host-cgroup {str(missing)!r}: does not exist" in r.err
    assert r.err.count("--host-cgroup") == 1, r.err


def test_preview_host_cgroup_that_is_no_cgroup_exits_4(
    run_cli: Run, cfg: Path, tmp_path: Path
) -> None:
    r = run_cli("preview", "--config", str(cfg), *HOST_ARGS, "--host-cgroup", str(tmp_path))
    assert r.code == 4, r.err
    assert f"--host-cgroup {str(tmp_path)!r}: has neither memory.max (cgroup v2)" in r.err


def test_shim_host_cgroup_is_the_same_guard(cfg: Path, pod_cgroup: Path) -> None:
    req = shim_request_doc(
        cfg,
        containers=[{"id": "c1", "memory_limit_bytes": 4 * GiB}],
        host={"memory_bytes": 16 * GiB, "cpus": 4, "cgroup": str(pod_cgroup)},
    )
    jsonschema.validate(req, REQUEST_SCHEMA)
    r = kata_mem_process("shim", input=json.dumps(req))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    memory = doc["plan"]["memory"]
    assert memory["target_mib"] == 4096 and "host_cgroup" in memory["clamped_by"]
    assert memory["host_cgroup"]["found_by"] == "request host.cgroup"
    assert memory["host_cgroup"]["limit_mib"] == 4256


def test_shim_host_cgroup_missing_is_an_input_error(cfg: Path, tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    req = shim_request_doc(cfg, host={"memory_bytes": 16 * GiB, "cpus": 4, "cgroup": str(missing)})
    r = kata_mem_process("shim", input=json.dumps(req))
    assert r.returncode == 4, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    assert f"request host.cgroup {str(missing)!r}: does not exist" in json.dumps(doc)


def test_pod_overhead_from_the_pod_manifest(run_cli: Run, tmp_path: Path) -> None:
    pod = PODS / "kata-overhead.yaml"
    cfg = write_config(tmp_path / "c.toml", kata_mem={"sizing": "pod-overhead"})
    r = run_cli("preview", "--config", str(cfg), "--pod", str(pod), *HOST_ARGS)
    assert r.code == 0, r.err
    assert f"sizing: pod-overhead (pod overhead 160 MiB from {pod}: spec.overhead.memory)" in r.out
    doc = json.loads(
        run_cli("preview", "--config", str(cfg), "--pod", str(pod), *HOST_ARGS, "--json").out
    )
    sizing = doc["memory"]["sizing"]
    assert sizing == {
        "model": "pod-overhead",
        "pod_overhead_mib": 160,
        "pod_overhead_from": f"{pod}: spec.overhead.memory",
    }
    assert doc["memory"]["requested_mib"] == 160 + 4096


def test_the_three_models_on_the_worked_example(run_cli: Run, tmp_path: Path) -> None:
    """The docs' worked example: Kata's defaults, podFixed 160Mi, a 4Gi limit."""
    pod = PODS / "kata-overhead.yaml"
    got = {}
    for model in ("kata", "pod-overhead", "pod-limit"):
        cfg = write_config(tmp_path / f"{model}.toml", kata_mem={"sizing": model})
        r = run_cli("preview", "--config", str(cfg), "--pod", str(pod), *HOST_ARGS, "--json")
        got[model] = json.loads(r.out)["memory"]["requested_mib"]
    assert got == {"kata": 6144, "pod-overhead": 4256, "pod-limit": 4096}


def test_pod_overhead_from_a_sandbox_spec_annotation(run_cli: Run, tmp_path: Path) -> None:
    spec = tmp_path / "sandbox.json"
    spec.write_text(
        json.dumps(
            {
                "ociVersion": "1.1.0",
                "annotations": {
                    "io.kubernetes.cri.container-type": "sandbox",
                    ANN_POD_OVERHEAD: "250Mi",
                },
            }
        )
    )
    cfg = write_config(tmp_path / "c.toml", kata_mem={"sizing": "pod-overhead"})
    r = run_cli(
        "preview", "--config", str(cfg), "--oci", str(spec), "--limit", "3Gi", *HOST_ARGS, "--json"
    )
    assert r.code == 0, r.err
    memory = json.loads(r.out)["memory"]
    assert memory["sizing"]["pod_overhead_from"] == f"{spec}: annotation {ANN_POD_OVERHEAD}"
    assert (memory["sizing"]["pod_overhead_mib"], memory["requested_mib"]) == (250, 250 + 3072)
    spec.write_text(
        json.dumps(
            {
                "annotations": {
                    "io.kubernetes.cri.container-type": "sandbox",
                    ANN_POD_OVERHEAD: "lots",
                }
            }
        )
    )
    r = run_cli("preview", "--config", str(cfg), "--oci", str(spec), *HOST_ARGS)
    assert r.code == 4 and f"{spec}: annotation {ANN_POD_OVERHEAD} 'lots'" in r.err


def _sandbox(
    state_dir: Path,
    name: str,
    record: Record,
    endpoint: Endpoint | None = None,
) -> None:
    """A sandbox's state as apply leaves it: the journal, and the request reconcile re-runs."""
    state = SandboxState(state_dir, name)
    with state.locked(5) as got:
        assert got
        state.save(record)
        if endpoint is not None:
            state.save_request(
                SandboxRequest(
                    name, "reconcile", "/etc/kata/c.toml", Workload(), endpoint, mode="apply"
                ).to_json()
            )


def test_status_all_lists_the_sandboxes_and_the_node(run_cli: Run, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _sandbox(
        state,
        "sb-a",
        Record("sb-a", observed=2048 * MiB, target=4096 * MiB, state="running"),
        Endpoint("qmp", "/run/vc/sb-a/qmp.sock"),
    )
    _sandbox(state, "sb-b", Record("sb-b", observed=3072 * MiB))
    (state / "stray").mkdir()
    cfg = write_config(
        tmp_path / "c.toml",
        kata_mem={"state_dir": str(state), "node_reserved_mib": 1024, "node_overcommit": 1.5},
    )
    r = run_cli("status", "--all", "--config", str(cfg), "--host-memory", "16Gi", "--json")
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert doc["schema"] == "kata-mem/node/v1"
    assert (doc["host_mib"], doc["reserved_mib"], doc["budget_mib"]) == (16384, 1024, 23040)
    assert doc["committed_mib"] == 4096 + 3072  # sb-a grows: its target counts
    rows = {s["sandbox"]: s for s in doc["sandboxes"]}
    assert rows["sb-a"]["backend"] == {"type": "qmp", "socket": "/run/vc/sb-a/qmp.sock"}
    assert (rows["sb-a"]["current_mib"], rows["sb-a"]["target_mib"], rows["sb-a"]["state"]) == (
        2048,
        4096,
        "running",
    )
    assert (rows["sb-b"]["backend"], rows["sb-b"]["current_mib"], rows["sb-b"]["target_mib"]) == (
        None,
        3072,
        3072,
    )
    assert doc["skipped"] == ["stray"]
    text = run_cli("status", "--all", "--config", str(cfg), "--host-memory", "16Gi").out
    assert "budget 23040 MiB, committed 7168 MiB in 2 sandbox(es)" in text
    assert "skipped: stray: not created by kata-mem" in text


def test_status_all_report_only_and_empty(run_cli: Run, tmp_path: Path) -> None:
    r = run_cli(
        "status", "--all", "--state-dir", str(tmp_path / "none"), "--host-memory", "8Gi", "--json"
    )
    assert r.code == 0, r.err
    doc = json.loads(r.out)
    assert (doc["budget_mib"], doc["committed_mib"], doc["sandboxes"], doc["skipped"]) == (
        None,
        0,
        [],
        [],
    )
    assert doc["state_dir_exists"] is False  # said, so that a mistyped path is noticed
    assert not (tmp_path / "none").exists()
    text = run_cli("status", "--all", "--state-dir", str(tmp_path / "none"), "--host-memory", "8Gi")
    assert "does not exist: no sandbox has been applied with it" in text.out


def test_status_all_with_a_backend_is_a_usage_error(run_cli: Run, tmp_path: Path) -> None:
    r = run_cli("status", "--all", "--qmp", str(tmp_path / "q.sock"))
    assert r.code == 2
    assert "status --all takes no --qmp" in r.err


def test_status_all_refuses_a_foreign_state_dir(run_cli: Run, tmp_path: Path) -> None:
    (tmp_path / "foreign" / "x").mkdir(parents=True)
    r = run_cli("status", "--all", "--state-dir", str(tmp_path / "foreign"), "--json")
    assert r.code == 3, r.err


def test_status_all_reads_a_saved_request_only_as_far_as_its_backend(
    run_cli: Run, tmp_path: Path
) -> None:
    # status shows the backend, so it checks the document, the sandbox and the backend as
    # every reader does, and leaves the workload to reconcile (the per-sandbox
    # cost at 1,000 sandboxes). A bad container no longer hides the backend; a bad backend,
    # another sandbox's request or an unknown key still leave it unknown.
    state = tmp_path / "state"
    good = {"type": "qmp", "socket": "/run/vc/sb-a/qmp.sock"}
    docs = {
        "sb-a": {"containers": [{"id": 5}], "backend": good},
        "sb-b": {"backend": {"type": "qmp", "socket": "relative.sock"}},
        "sb-c": {"sandbox_id": "sb-a", "backend": good},
        "sb-d": {"backend": good, "unknown": 1},
        "sb-e": {"backend": {"type": "libvirt", "uri": "qemu+ssh://h/system", "domain": "d"}},
    }
    for name, extra in docs.items():
        _sandbox(state, name, Record(name, observed=2048 * MiB), Endpoint("qmp", "/x.sock"))
        doc = json.loads((state / name / "request.json").read_text()) | extra
        (state / name / "request.json").write_text(json.dumps(doc))
    r = run_cli("status", "--all", "--state-dir", str(state), "--host-memory", "16Gi", "--json")
    assert r.code == 0, r.err
    rows = {s["sandbox"]: s["backend"] for s in json.loads(r.out)["sandboxes"]}
    assert rows == {"sb-a": good, "sb-b": None, "sb-c": None, "sb-d": None, "sb-e": None}


def test_a_budget_of_0_says_why_in_status_all_and_config_check(
    run_cli: Run, tmp_path: Path
) -> None:
    cfg = write_config(
        tmp_path / "c.toml",
        kata_mem={
            "state_dir": str(tmp_path / "state"),
            "node_reserved_mib": 1 << 40,  # above any host
            "node_overcommit": 1.0,
        },
    )
    why = "is not below the host's memory (16384 MiB): the node budget is 0, so no sandbox"
    r = run_cli("status", "--all", "--config", str(cfg), "--host-memory", "16Gi")
    assert r.code == 0 and "budget 0 MiB" in r.out
    assert why in r.err
    r = run_cli("config", "check", str(cfg))
    assert r.code == 0
    assert "the node budget is 0, so no sandbox can grow; lower node_reserved_mib" in r.err
    # Without node_overcommit there is no budget to be 0: nothing to say.
    write_config(cfg, kata_mem={"node_reserved_mib": 1 << 40})
    assert "budget" not in run_cli("config", "check", str(cfg)).err
