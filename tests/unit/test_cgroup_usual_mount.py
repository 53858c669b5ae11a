"""cgroup_of_pid finds a process's memory cgroup at the usual mount point without
reading mountinfo (which the kernel takes ~12 ms to write on a node with 5000 mounts),
and finds the same cgroup as through mountinfo; a process not listed there still
goes through mountinfo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.model import HostCgroup
from kata_mem.edges.cgroups import cgroup_of_pid, read_proc_cgroup

USUAL_MOUNT = {1: "/sys/fs/cgroup/memory", 2: "/sys/fs/cgroup"}

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh process: which files does cgroup_of_pid open?
PROBE = """
import json, os, sys
opened = []
sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" else None)
from kata_mem.edges.cgroups import cgroup_of_pid
found = cgroup_of_pid(int(sys.argv[1]))
print(json.dumps({"path": found.path, "opened": opened}))
"""


def usual_layout() -> bool:
    v1, v2 = read_proc_cgroup(Path("/proc/self/cgroup").read_text())
    version, path = (1, v1) if v1 is not None else (2, v2)
    return path is not None and os.path.isdir(os.path.join(USUAL_MOUNT[version], path.strip("/")))


pytestmark = pytest.mark.skipif(not usual_layout(), reason="memory cgroup not at the usual mount")


def probe(pid: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(pid)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _shape(found: HostCgroup) -> tuple[object, ...]:
    return (
        found.path,
        found.version,
        found.origin,
        tuple((level.path, level.limit) for level in found.levels),
        found.usage is None,
    )


def test_the_usual_mount_is_used_without_reading_mountinfo() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        result = probe(child.pid)
        assert "/proc/self/mountinfo" not in result["opened"]
        through_mountinfo = cgroup_of_pid(
            child.pid, mountinfo=Path("/proc/self/mountinfo").read_text()
        )
        assert result["path"] == through_mountinfo.path
        # The same cgroup, levels and limits; the charges are read twice and may move.
        assert _shape(cgroup_of_pid(child.pid)) == _shape(through_mountinfo)
    finally:
        child.kill()
        child.wait()


def test_a_process_not_listed_there_goes_through_mountinfo(tmp_path: Path) -> None:
    # A fake /proc naming a cgroup the process is not in: the usual directory exists
    # (it is our own) but does not list the pid, so mountinfo decides.
    pid = os.getpid()
    own = Path(f"/proc/{pid}/cgroup").read_text()
    fake = tmp_path / "proc"
    (fake / "99999999").mkdir(parents=True)
    (fake / "99999999" / "cgroup").write_text(own)
    (fake / "self").mkdir()
    (fake / "self" / "mountinfo").write_text(Path("/proc/self/mountinfo").read_text())
    found = cgroup_of_pid(99999999, proc=str(fake))
    assert found.path == cgroup_of_pid(pid).path
