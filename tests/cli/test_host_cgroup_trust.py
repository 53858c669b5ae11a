"""As root, a host cgroup named by hand (``--host-cgroup``, a request's ``host.cgroup``,
``[kata_mem] host_memory_cgroup``) is used only when no other user could have written it:
its directory, every directory above it and the limit and usage files read are root's
and not writable by group or others (a nobody-owned copy of a
cgroup once chose the limit root sized the VM against)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kata_mem.core.units import MiB
from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import HOST_ARGS, write_config
from tests.support.shim import shim_request_doc

Run = Callable[..., CliResult]
NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the rule is root's")


def _tree(tmp_path: Path) -> Path:
    """A v2 tree: a pod limited to 600 MiB, QEMU's cgroup below it."""
    root = tmp_path / "cg"
    (root / "pod1/qemu").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory\n")
    (root / "pod1/memory.max").write_text(f"{600 * MiB}\n")
    (root / "pod1/memory.current").write_text("100\n")
    (root / "pod1/qemu/memory.max").write_text("max\n")
    (root / "pod1/qemu/memory.current").write_text("100\n")
    return root / "pod1/qemu"


def _chown_all(qemu: Path) -> str:
    for path in [qemu.parent.parent, *qemu.parent.parent.rglob("*")]:
        os.chown(path, NOBODY, -1)
    return f"{qemu.parent.parent} is owned by nobody (uid {NOBODY}), mode 0755"


def _chown_pod_limit(qemu: Path) -> str:
    os.chown(qemu.parent / "memory.max", NOBODY, -1)
    return f"{qemu.parent / 'memory.max'} is owned by nobody (uid {NOBODY}), mode 0644"


def _group_writable_usage(qemu: Path) -> str:
    (qemu / "memory.current").chmod(0o664)
    return f"{qemu / 'memory.current'} is owned by root (uid 0), mode 0664"


def _directory_others_can_write(qemu: Path) -> str:
    qemu.parent.chmod(0o777)
    return f"{qemu.parent} is owned by root (uid 0), mode 0777"


@pytest.mark.parametrize(
    "plant", [_chown_all, _chown_pod_limit, _group_writable_usage, _directory_others_can_write]
)
def test_a_host_cgroup_another_user_could_write_is_refused(
    run_cli: Run, tmp_path: Path, plant: Callable[[Path], str]
) -> None:
    qemu = _tree(tmp_path)
    cfg = write_config(tmp_path / "c.toml", kata_mem={"state_dir": str(tmp_path / "state")})
    args = ("preview", "--config", str(cfg), "--limit", "1Gi", *HOST_ARGS)
    assert run_cli(*args, "--host-cgroup", str(qemu)).code == 0  # root's: used
    said = plant(qemu)
    r = run_cli(*args, "--host-cgroup", str(qemu))
    assert r.code == 4, r
    assert r.err.startswith(f"kata-mem: error: --host-cgroup {str(qemu)!r}: "), r.err
    assert said in r.err, r.err


def test_the_shim_and_the_configuration_refuse_it_too(tmp_path: Path) -> None:
    qemu = _tree(tmp_path)
    said = _chown_all(qemu)
    cfg = write_config(tmp_path / "c.toml", kata_mem={"state_dir": str(tmp_path / "state")})
    doc = shim_request_doc(cfg, host={"memory_bytes": 16 << 30, "cpus": 4, "cgroup": str(qemu)})
    r = kata_mem_process("shim", input=json.dumps(doc))
    assert r.returncode == 4, r
    assert said in json.loads(r.stdout)["error"]["message"]
    configured = write_config(
        tmp_path / "d.toml",
        kata_mem={"state_dir": str(tmp_path / "state"), "host_memory_cgroup": str(qemu)},
    )
    doc = shim_request_doc(configured)
    del doc["host"]  # a given host memory replaces the probe, that cgroup's cap included
    r = kata_mem_process("shim", input=json.dumps(doc))
    assert r.returncode == 3, r
    message = json.loads(r.stdout)["error"]["message"]
    assert "host_memory_cgroup" in message and said in message, message
