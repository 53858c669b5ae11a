"""Finding and reading a process's host memory cgroup: v2 and v1 trees in tmp_path with
the kernel's file names, this machine's real v1 memory cgroup, and a real child cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kata_mem.core.model import CgroupLevel
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.cgroups import (
    CgroupUnreadable,
    cgroup_of_dir,
    cgroup_of_pid,
    parse_limit,
    parse_mountinfo,
    read_proc_cgroup,
)

V1_MOUNT = Path("/sys/fs/cgroup/memory")
#: What v1 reads back for "no limit" with 4 KiB pages (PAGE_COUNTER_MAX pages).
V1_NONE = str(2**63 - 4096)


def _cgroup(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    """A v2 hierarchy like a kubelet's (systemd driver): the root has no memory.max;
    the pod limits, a slice between says max; QEMU's own cgroup under the pod."""
    root = _cgroup(tmp_path / "cg", {"cgroup.controllers": "cpuset cpu io memory pids\n"})
    _cgroup(root / "kubepods.slice", {"memory.max": f"{8 * GiB}\n", "memory.current": "5000\n"})
    _cgroup(root / "kubepods.slice/burst.slice", {"memory.max": "max\n", "memory.current": "400\n"})
    _cgroup(
        root / "kubepods.slice/burst.slice/pod1",
        {"memory.max": f"{900 * MiB}\n", "memory.current": f"{300 * MiB}\n"},
    )
    return _cgroup(
        root / "kubepods.slice/burst.slice/pod1/qemu",
        {"memory.max": "max\n", "memory.current": f"{250 * MiB}\n"},
    )


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    """A v1 memory hierarchy: even its root has memory.limit_in_bytes (the sentinel)."""
    root = _cgroup(
        tmp_path / "memory",
        {"memory.limit_in_bytes": V1_NONE, "memory.usage_in_bytes": f"{20 * GiB}\n"},
    )
    _cgroup(
        root / "kubepods",
        {"memory.limit_in_bytes": f"{6 * GiB}\n", "memory.usage_in_bytes": f"{3 * GiB}\n"},
    )
    return _cgroup(
        root / "kubepods/pod1",
        {"memory.limit_in_bytes": f"{900 * MiB}\n", "memory.usage_in_bytes": f"{100 * MiB}\n"},
    )


def test_v2_every_limit_innermost_first_and_the_smallest_counts(v2: Path) -> None:
    cg = cgroup_of_dir(str(v2), "--host-cgroup")
    pod, kubepods = v2.parent, v2.parent.parent.parent
    assert (cg.path, cg.version, cg.usage, cg.origin) == (str(v2), 2, 250 * MiB, "--host-cgroup")
    assert cg.levels == (
        CgroupLevel(str(pod), 900 * MiB, 300 * MiB),
        CgroupLevel(str(kubepods), 8 * GiB, 5000),
    )
    assert cg.limit == 900 * MiB


def test_v2_a_larger_limit_inside_does_not_hide_a_smaller_one_above(v2: Path) -> None:
    (v2 / "memory.max").write_text(f"{2 * GiB}\n")
    cg = cgroup_of_dir(str(v2) + "/", "host.cgroup")
    assert [lvl.limit for lvl in cg.levels] == [2 * GiB, 900 * MiB, 8 * GiB]
    assert cg.limit == 900 * MiB


def test_v2_max_all_the_way_is_no_limit(v2: Path) -> None:
    for d in (v2.parent, v2.parent.parent.parent):
        (d / "memory.max").write_text("max\n")
    cg = cgroup_of_dir(str(v2), "--host-cgroup")
    assert (cg.levels, cg.limit, cg.usage) == ((), None, 250 * MiB)


def test_v2_usage_missing_or_garbage_is_unknown_not_an_error(v2: Path) -> None:
    (v2 / "memory.current").unlink()
    (v2.parent / "memory.current").write_text("lots\n")
    cg = cgroup_of_dir(str(v2), "--host-cgroup")
    assert cg.usage is None
    assert cg.levels[0] == CgroupLevel(str(v2.parent), 900 * MiB, None)
    # ... but said (a garbage usage file once made usage null without a word).
    assert cg.unread_usage == (
        f"{v2}/memory.current: no such cgroup usage file",
        f"{v2.parent}/memory.current holds 'lots', not a number of bytes",
    )


def test_a_relative_directory_walks_up_the_same(v2: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(v2.parent)
    cg = cgroup_of_dir("qemu", "--host-cgroup")
    assert (cg.path, cg.limit, len(cg.levels)) == (str(v2), 900 * MiB, 2)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (
            lambda d: d / "gone",
            r"--host-cgroup '.*/gone': does not exist; expected a memory cgroup",
        ),
        (lambda d: d.parent.parent.parent.parent, r"has neither memory.max \(cgroup v2\) nor"),
        (lambda d: d / "memory.max", r"memory.max': is not a directory"),
    ],
    ids=["missing", "no-limit-file", "a-file"],
)
def test_a_directory_that_is_no_memory_cgroup_is_refused(
    v2: Path, setup: Callable[[Path], Path], message: str
) -> None:
    with pytest.raises(CgroupUnreadable, match=message):
        cgroup_of_dir(str(setup(v2)), "--host-cgroup")


def test_an_unreadable_innermost_limit_names_the_file(v2: Path) -> None:
    # chmod 000 does not stop root: a directory where the file should be does.
    (v2 / "memory.max").unlink()
    (v2 / "memory.max").mkdir()
    with pytest.raises(CgroupUnreadable, match=r"qemu/memory.max: is a directory, expected"):
        cgroup_of_dir(str(v2), "--host-cgroup")


def test_garbage_in_a_limit_above_is_not_skipped(v2: Path) -> None:
    kubepods = v2.parent.parent.parent
    (kubepods / "memory.max").write_text("8G\n")
    with pytest.raises(
        CgroupUnreadable,
        match=r"^--host-cgroup '.*/qemu': .*/kubepods.slice/memory.max holds '8G\\n': "
        r"expected 'max' or a number of bytes$",
    ):
        cgroup_of_dir(str(v2), "--host-cgroup")


def test_an_unreadable_limit_above_is_not_skipped(v2: Path) -> None:
    pod = v2.parent
    (pod / "memory.max").unlink()
    (pod / "memory.max").mkdir()
    with pytest.raises(CgroupUnreadable, match=r"pod1/memory.max: is a directory.*cannot be skip"):
        cgroup_of_dir(str(v2), "--host-cgroup")


def test_v1_tree_the_sentinel_is_no_limit_and_the_walk_stops_at_the_mount(v1: Path) -> None:
    cg = cgroup_of_dir(str(v1), "--host-cgroup")
    assert (cg.version, cg.usage) == (1, 100 * MiB)
    assert cg.levels == (
        CgroupLevel(str(v1), 900 * MiB, 100 * MiB),
        CgroupLevel(str(v1.parent), 6 * GiB, 3 * GiB),
    )
    assert cg.limit == 900 * MiB


def test_v1_unlimited_with_64k_pages_too(v1: Path) -> None:
    for d in (v1, v1.parent):
        (d / "memory.limit_in_bytes").write_text(f"{(2**63 - 1) // 65536 * 65536}\n")
    assert cgroup_of_dir(str(v1), "--host-cgroup").limit is None


def test_v1_max_is_not_a_v1_value(v1: Path) -> None:
    (v1 / "memory.limit_in_bytes").write_text("max\n")
    with pytest.raises(CgroupUnreadable, match=r"holds 'max\\n': expected a number of bytes"):
        cgroup_of_dir(str(v1), "--host-cgroup")


def test_parse_limit_examples() -> None:
    assert parse_limit("max\n", 2) is None
    assert parse_limit("943718400\n", 2) == 900 * MiB
    assert parse_limit(V1_NONE + "\n", 1) is None
    assert parse_limit("943718400\n", 1) == 900 * MiB
    for raw, version in (("-1", 1), ("", 2), ("1e9", 2), ("٣", 2)):
        with pytest.raises(ValueError, match="expected"):
            parse_limit(raw, version)


def test_read_proc_cgroup_examples() -> None:
    assert read_proc_cgroup("0::/kubepods.slice/x\n") == (None, "/kubepods.slice/x")
    hybrid = "9:name=systemd:/\n4:cpu,memory:/kubepods/pod1\n1:cpuset:/\n0::/\n"
    assert read_proc_cgroup(hybrid) == ("/kubepods/pod1", "/")
    assert read_proc_cgroup("5:memory_x:/a\n6:name=memory:/b\n") == (None, None)
    assert read_proc_cgroup("4:memory:/odd:name\n") == ("/odd:name", None)


# -- cgroup_of_pid: a fake /proc and mountinfo in tmp_path -------------------------------


def _proc(tmp_path: Path, pid: int, cgroup: str) -> str:
    (tmp_path / "proc" / str(pid)).mkdir(parents=True)
    (tmp_path / "proc" / str(pid) / "cgroup").write_text(cgroup)
    return str(tmp_path / "proc")


def _mountinfo(root: str, point: Path, fstype: str, options: str) -> str:
    escaped = str(point).replace(" ", "\\040")
    return (
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        f"35 31 0:32 {root} {escaped} rw,nosuid,relatime shared:9 - {fstype} {fstype} {options}\n"
    )


def test_pid_v1_in_a_container_strips_the_mount_root(tmp_path: Path) -> None:
    # Inside a container without a cgroup namespace, /proc/PID/cgroup shows the host's
    # path while the container's mount shows only the subtree from /docker/abc down.
    point = _cgroup(
        tmp_path / "sys fs/memory",
        {"memory.limit_in_bytes": f"{4 * GiB}\n", "memory.usage_in_bytes": "7\n"},
    )
    inner = _cgroup(
        point / "qemu",
        {"memory.limit_in_bytes": V1_NONE, "memory.usage_in_bytes": "5\n"},
    )
    proc = _proc(tmp_path, 42, "4:memory:/docker/abc/qemu\n1:cpu:/docker/abc\n0::/\n")
    mounts = _mountinfo("/docker/abc", point, "cgroup", "rw,memory")
    cg = cgroup_of_pid(42, proc=proc, mountinfo=mounts)
    assert (cg.path, cg.version, cg.usage, cg.origin) == (str(inner), 1, 5, "pid 42")
    assert cg.levels == (CgroupLevel(str(point), 4 * GiB, 7),)


def test_pid_outside_the_mounted_subtree_is_unreadable(tmp_path: Path) -> None:
    point = _cgroup(tmp_path / "memory", {"memory.limit_in_bytes": V1_NONE})
    proc = _proc(tmp_path, 42, "4:memory:/docker/abcdef\n")
    mounts = _mountinfo("/docker/abc", point, "cgroup", "rw,memory")
    with pytest.raises(
        CgroupUnreadable, match=r"outside the mounted part .*mount root /docker/abc"
    ):
        cgroup_of_pid(42, proc=proc, mountinfo=mounts)


def test_pid_outside_the_cgroup_namespace_without_the_hosts_tree_is_not_reachable(
    tmp_path: Path,
) -> None:
    # The container's own cgroup mount shows only its namespace's subtree ("/").
    point = _cgroup(tmp_path / "memory", {"memory.limit_in_bytes": V1_NONE})
    proc = _proc(tmp_path, 42, "4:memory:/../../other\n")
    mounts = _mountinfo("/", point, "cgroup", "rw,memory")
    with pytest.raises(CgroupUnreadable) as err:
        cgroup_of_pid(42, proc=proc, mountinfo=mounts)
    assert err.value.reason == "not_reachable"
    assert err.value.message == (
        "pid 42: memory cgroup /../../other (cgroup v1) is outside this process's cgroup "
        "namespace, and no cgroup filesystem mounted here reaches it (a pod's own cgroup "
        "namespace: mount the host's /sys/fs/cgroup, as the DaemonSet's cgroup volume does) "
        "(mount root /)"
    )


# -- inside a cgroup namespace (a pod's own on cgroup v2 nodes) ---------------------------
#
# Recorded as the kernel shows them to a process whose cgroup namespace is rooted at
# /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podK.slice/cri-containerd-k.scope
# (depth 4), with the host's /sys/fs/cgroup bind-mounted over the runtime's own cgroup2 mount
# (a hostPath volume): both /proc/PID/cgroup and the mount's root climb out with "/.."
# (kernel/cgroup/cgroup.c, proc_cgroup_show and cgroup_show_path; cgroup_namespaces(7)).
NS_QEMU = "/../../../../kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podq.slice"


def _v2_host(tmp_path: Path, procs: str) -> tuple[Path, Path]:
    """The host's v2 tree (root, QEMU's pod cgroup): kubepods 8 GiB, the pod 1280 MiB,
    QEMU listed in the pod's cgroup.procs as ``procs`` says."""
    root = _cgroup(tmp_path / "host", {"cgroup.controllers": "cpu io memory pids\n"})
    _cgroup(root / "kubepods.slice", {"memory.max": f"{8 * GiB}\n", "memory.current": "9\n"})
    _cgroup(
        root / "kubepods.slice/kubepods-burstable.slice",
        {"memory.max": "max\n", "memory.current": "8\n"},
    )
    pod = _cgroup(
        root / "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podq.slice",
        {
            "memory.max": f"{1280 * MiB}\n",
            "memory.current": f"{600 * MiB}\n",
            "cgroup.procs": procs,
        },
    )
    return root, pod


def _ns_mountinfo(own: Path, host: Path) -> str:
    """The runtime's cgroup2 mount of the namespace (root /), then the host's tree over it."""
    return (
        "1470 1460 0:5 / /proc rw,nosuid - proc proc rw\n"
        f"1480 1470 0:30 / {own} ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate\n"
        f"1500 1480 0:30 /../../../.. {host} ro,relatime master:7 - cgroup2 cgroup2 rw,nsdelegate\n"
    )


def test_v2_inside_a_cgroup_namespace_resolves_through_the_hosts_tree(tmp_path: Path) -> None:
    own = _cgroup(tmp_path / "own", {"cgroup.controllers": "memory\n", "cgroup.procs": "1\n"})
    root, pod = _v2_host(tmp_path, "77\n1234\n")
    proc = _proc(tmp_path, 1234, f"0::{NS_QEMU}\n")
    cg = cgroup_of_pid(1234, proc=proc, mountinfo=_ns_mountinfo(own, root))
    assert (cg.path, cg.version, cg.usage, cg.origin) == (str(pod), 2, 600 * MiB, "pid 1234")
    assert cg.levels == (
        CgroupLevel(str(pod), 1280 * MiB, 600 * MiB),
        CgroupLevel(str(root / "kubepods.slice"), 8 * GiB, 9),
    )


def test_v2_a_directory_whose_cgroup_procs_does_not_list_the_pid_is_not_taken(
    tmp_path: Path,
) -> None:
    # A mount stacked over another shows another cgroup at the path: only the process's
    # own cgroup.procs proves the directory is its cgroup.
    own = _cgroup(tmp_path / "own", {"cgroup.controllers": "memory\n"})
    root, pod = _v2_host(tmp_path, "77\n")
    proc = _proc(tmp_path, 1234, f"0::{NS_QEMU}\n")
    with pytest.raises(CgroupUnreadable) as err:
        cgroup_of_pid(1234, proc=proc, mountinfo=_ns_mountinfo(own, root))
    assert err.value.reason == "unreadable"
    assert err.value.message == (
        f"pid 1234: {pod}/cgroup.procs does not list the process (a mount over another?)"
    )


def test_v2_a_mount_root_above_the_namespace_but_below_the_process_does_not_reach_it(
    tmp_path: Path,
) -> None:
    # The mount's root is one level above the namespace (/..): QEMU is four levels up.
    own = _cgroup(tmp_path / "own", {"cgroup.controllers": "memory\n"})
    point = _cgroup(tmp_path / "parent", {"cgroup.controllers": "memory\n"})
    proc = _proc(tmp_path, 1234, f"0::{NS_QEMU}\n")
    mounts = (
        f"1480 1470 0:30 / {own} ro - cgroup2 cgroup rw\n"
        f"1500 1480 0:30 /.. {point} ro - cgroup2 cgroup2 rw\n"
    )
    with pytest.raises(CgroupUnreadable) as err:
        cgroup_of_pid(1234, proc=proc, mountinfo=mounts)
    assert err.value.reason == "not_reachable"
    assert "(mount root /, /..)" in err.value.message


def test_v1_inside_a_cgroup_namespace_one_level_deep(tmp_path: Path, v1: Path) -> None:
    # What this machine shows (cgroup v1): the namespace one level below the root, the
    # host's memory hierarchy seen through a mount whose root is "/..".
    root = v1.parent
    (v1 / "cgroup.procs").write_text("4321\n")
    proc = _proc(tmp_path, 4321, f"9:name=systemd:/..\n4:memory:/../{v1.name}\n0::/\n")
    mounts = f"54 50 0:32 /.. {root} ro,relatime - cgroup cgroup rw,memory\n"
    cg = cgroup_of_pid(4321, proc=proc, mountinfo=mounts)
    assert (cg.path, cg.limit) == (str(v1), 900 * MiB)


def test_pid_v2_from_the_proc_and_mountinfo_files(tmp_path: Path, v2: Path) -> None:
    root = v2.parent.parent.parent.parent
    proc = _proc(tmp_path, 7, "0::/kubepods.slice/burst.slice/pod1/qemu\n")
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "self" / "mountinfo").write_text(
        _mountinfo("/", root, "cgroup2", "rw,nsdelegate")
    )
    cg = cgroup_of_pid(7, proc=proc)
    assert (cg.path, cg.version, cg.limit, len(cg.levels)) == (str(v2), 2, 900 * MiB, 2)


def test_pid_in_the_v2_root_cgroup_has_no_limit(tmp_path: Path, v2: Path) -> None:
    root = v2.parent.parent.parent.parent
    proc = _proc(tmp_path, 7, "0::/\n")
    cg = cgroup_of_pid(7, proc=proc, mountinfo=_mountinfo("/", root, "cgroup2", "rw"))
    assert (cg.path, cg.version, cg.levels, cg.usage) == (str(root), 2, (), None)


def test_pid_v2_without_the_memory_controller_is_unreadable(tmp_path: Path, v2: Path) -> None:
    root = v2.parent.parent.parent.parent
    (root / "cgroup.controllers").write_text("cpu hugetlb\n")
    proc = _proc(tmp_path, 7, "0::/kubepods.slice\n")
    with pytest.raises(CgroupUnreadable, match=r"no cgroup2 mount has the memory controller"):
        cgroup_of_pid(7, proc=proc, mountinfo=_mountinfo("/", root, "cgroup2", "rw"))


def test_pid_hybrid_v1_memory_wins(tmp_path: Path, v1: Path, v2: Path) -> None:
    proc = _proc(tmp_path, 9, "4:memory:/kubepods/pod1\n0::/kubepods.slice\n")
    mounts = _mountinfo("/", v1.parent.parent, "cgroup", "rw,memory") + _mountinfo(
        "/", v2.parent.parent.parent.parent, "cgroup2", "rw"
    )
    cg = cgroup_of_pid(9, proc=proc, mountinfo=mounts)
    assert (cg.path, cg.version, cg.limit) == (str(v1), 1, 900 * MiB)


def test_pid_v1_memory_line_without_a_memory_mount(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 9, "4:memory:/kubepods/pod1\n")
    with pytest.raises(CgroupUnreadable, match=r"no cgroup v1 hierarchy with the memory"):
        cgroup_of_pid(9, proc=proc, mountinfo=_mountinfo("/", tmp_path, "cgroup", "rw,cpu"))


def test_pid_gone(tmp_path: Path) -> None:
    with pytest.raises(
        CgroupUnreadable, match=r"^pid 5: no such process \(.*/5/cgroup does not exist\)$"
    ):
        cgroup_of_pid(5, proc=str(tmp_path), mountinfo="")


def test_mountinfo_parsing() -> None:
    text = (
        "35 31 0:32 /docker/a\\040b /sys/fs/cgroup/memory rw,relatime shared:7 master:1 - "
        "cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "garbage line - cgroup\n"
    )
    assert [(m.root, m.point, m.fstype, m.options) for m in parse_mountinfo(text)] == [
        ("/docker/a b", "/sys/fs/cgroup/memory", "cgroup", ("rw", "memory")),
        ("/", "/sys/fs/cgroup/unified", "cgroup2", ("rw", "nsdelegate")),
    ]


# -- this machine's real v1 memory cgroup --------------------------------------------------


def _own_v1_dir() -> Path:
    if not (V1_MOUNT / "memory.limit_in_bytes").is_file():
        pytest.skip(f"no cgroup v1 memory hierarchy at {V1_MOUNT}")
    path, _ = read_proc_cgroup(Path("/proc/self/cgroup").read_text())
    if path is None:
        pytest.skip("this process has no cgroup v1 memory line in /proc/self/cgroup")
    return V1_MOUNT / path.lstrip("/")


def test_this_process_real_v1_cgroup() -> None:
    own = _own_v1_dir()
    cg = cgroup_of_pid(os.getpid())
    assert (cg.path, cg.version, cg.origin) == (str(own), 1, f"pid {os.getpid()}")
    assert cg.usage is not None and cg.usage > 0
    own_limit = parse_limit((own / "memory.limit_in_bytes").read_text(), 1)
    assert [lvl.limit for lvl in cg.levels if lvl.path == str(own)] == (
        [] if own_limit is None else [own_limit]
    )


@pytest.fixture
def child_v1(tmp_path: Path) -> Iterator[Path]:
    own = _own_v1_dir()
    child = own / f"kata-mem-test-{os.getpid()}-{tmp_path.name}"
    try:
        child.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup under {own}: {exc.strerror}")
    try:
        (child / "memory.limit_in_bytes").write_text(str(900 * MiB))
        yield child
    finally:
        child.rmdir()


def test_a_real_child_v1_cgroup_with_900_mib(child_v1: Path) -> None:
    cg = cgroup_of_dir(str(child_v1), "--host-cgroup")
    assert cg.levels[0] == CgroupLevel(str(child_v1), 900 * MiB, 0)
    assert (cg.limit, cg.usage) == (900 * MiB, 0)


def test_a_real_process_in_the_child_v1_cgroup(child_v1: Path) -> None:
    # v1 leaves what a process had charged where it was; it touches 64 MiB once moved.
    script = "import sys; sys.stdin.readline(); b = bytearray(64 << 20); print(1, flush=True); sys.stdin.readline()"
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        (child_v1 / "cgroup.procs").write_text(str(child.pid))
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "1\n"
        cg = cgroup_of_pid(child.pid)
        assert (cg.path, cg.limit, cg.origin) == (str(child_v1), 900 * MiB, f"pid {child.pid}")
        assert cg.usage is not None and 64 * MiB <= cg.usage < 900 * MiB
        assert cg.levels[0].usage == cg.usage
    finally:
        child.kill()
        child.communicate()


def test_v2_a_path_leaving_by_a_nearer_ancestor_is_found_below_the_mount_root(
    tmp_path: Path,
) -> None:
    # QEMU's pod shares kubepods.slice with the namespace: its path climbs 3 levels
    # (/../../../kubepods-burstable.slice/...), the host tree's root 4 (/../../../..). The
    # ancestor it leaves from is one level below the mount's root, unnamed: every directory
    # there is tried, and only the one whose cgroup.procs lists QEMU is taken.
    own = _cgroup(tmp_path / "own", {"cgroup.controllers": "memory\n"})
    root, pod = _v2_host(tmp_path, "1234\n")
    # A decoy with the same names under another top-level slice, QEMU not in it.
    decoy = _cgroup(
        root / "system.slice/kubepods-burstable.slice/kubepods-burstable-podq.slice",
        {"memory.max": f"{GiB}\n", "memory.current": "1\n", "cgroup.procs": "99\n"},
    )
    proc = _proc(
        tmp_path, 1234, "0::/../../../kubepods-burstable.slice/kubepods-burstable-podq.slice\n"
    )
    cg = cgroup_of_pid(1234, proc=proc, mountinfo=_ns_mountinfo(own, root))
    assert cg.path == str(pod) != str(decoy)
    assert cg.limit == 1280 * MiB


def test_v2_a_path_leaving_by_a_nearer_ancestor_not_found_is_not_reachable(
    tmp_path: Path,
) -> None:
    own = _cgroup(tmp_path / "own", {"cgroup.controllers": "memory\n"})
    root, _ = _v2_host(tmp_path, "77\n")
    proc = _proc(
        tmp_path, 1234, "0::/../../../kubepods-burstable.slice/kubepods-burstable-podq.slice\n"
    )
    with pytest.raises(CgroupUnreadable) as err:
        cgroup_of_pid(1234, proc=proc, mountinfo=_ns_mountinfo(own, root))
    assert err.value.reason == "not_reachable"
