"""The host side at its edge: the guard's cgroup (given, or from the VMM's pid, with
libvirt's hard limit), the node's budget, and the node-wide admission over real state
directories, its lock held against a second real process."""

from __future__ import annotations

import select
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from kata_mem.core.errors import InputError
from kata_mem.core.model import CgroupLevel, HostFacts, Origin, Settings, VmState
from kata_mem.core.record import Record
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.journal import SandboxState
from kata_mem.edges.ledger import node_admission
from kata_mem.edges.statefiles import STATE_MARKER
from kata_mem.orchestration.guards import HARD_LIMIT, HostSide, node_budget, read_cgroup
from tests.support.configs import HOST
from tests.support.paths import REPO
from tests.support.state_dir import lock_waiters
from tests.support.waits import wait_until


def _cgroup(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


@pytest.fixture
def pod(tmp_path: Path) -> Path:
    """A v2 tree: a root without memory.max, kubepods at 8 GiB, the pod at 900 MiB, and
    QEMU's own cgroup (max) under the pod."""
    root = _cgroup(tmp_path / "cg", {"cgroup.controllers": "memory\n"})
    _cgroup(root / "kubepods", {"memory.max": f"{8 * GiB}\n", "memory.current": f"{GiB}\n"})
    _cgroup(
        root / "kubepods/pod1",
        {"memory.max": f"{900 * MiB}\n", "memory.current": f"{600 * MiB}\n"},
    )
    return _cgroup(
        root / "kubepods/pod1/qemu", {"memory.max": "max\n", "memory.current": f"{590 * MiB}\n"}
    )


VM = VmState(base=512 * MiB)


def test_given_v2_directory_is_read_with_every_limit(pod: Path) -> None:
    cg, unseen, notes = read_cgroup(VM, str(pod), Origin("option", "--host-cgroup"))
    assert (unseen, notes) == (None, ())
    assert cg is not None
    assert (cg.path, cg.version, cg.usage, cg.origin) == (str(pod), 2, 590 * MiB, "--host-cgroup")
    assert cg.levels == (
        CgroupLevel(str(pod.parent), 900 * MiB, 600 * MiB),
        CgroupLevel(str(pod.parent.parent), 8 * GiB, GiB),
    )


def test_given_directory_missing_is_an_input_error_naming_the_flag(tmp_path: Path) -> None:
    missing = tmp_path / "gone"
    with pytest.raises(InputError) as err:
        read_cgroup(VM, str(missing), Origin("option", "--host-cgroup"))
    # Named once, as given: the flag, the path, what is wrong and what was expected.
    assert err.value.message.startswith(
        f"--host-cgroup {str(missing)!r}: does not exist; expected a "
    )
    assert err.value.message.count("--host-cgroup") == 1


def test_given_directory_unreadable_limit_is_an_input_error(pod: Path) -> None:
    # A limit "file" that cannot be read (here: a directory; root reads any mode).
    (pod.parent / "memory.max").unlink()
    (pod.parent / "memory.max").mkdir()
    with pytest.raises(InputError) as err:
        read_cgroup(VM, str(pod), Origin("request", "host.cgroup"))
    text = err.value.message
    assert text.startswith(f"request host.cgroup {str(pod)!r}: ") and text.count("host.cgroup") == 1
    assert "memory.max" in text and "cannot be skipped" in text


def test_given_directory_without_memory_files_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        read_cgroup(VM, str(tmp_path), Origin("option", "--host-cgroup"))
    assert "has neither memory.max" in err.value.message


def test_vanished_vmm_pid_is_unseen_never_no_limit() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    cg, unseen, _ = read_cgroup(
        VmState(base=512 * MiB, vmm_pid=child.pid), None, Origin("option", "--host-cgroup")
    )
    assert cg is None and unseen is not None
    assert unseen.reason == "unreadable"
    assert (
        unseen.detail
        == f"pid {child.pid}: no such process (/proc/{child.pid}/cgroup does not exist)"
    )


def test_no_host_process_and_nothing_given_is_no_guard_and_no_warning() -> None:
    # The fake backend: no QEMU runs on this host, so there is no cgroup to see.
    assert read_cgroup(VM, None, Origin("option", "--host-cgroup")) == (None, None, ())


def test_a_pid_the_backend_could_not_tell_is_unseen() -> None:
    # A QMP peer in another pid namespace: SO_PEERCRED gives 0.
    vm = VmState(base=512 * MiB, vmm_pid_hidden=True)
    cg, unseen, _ = read_cgroup(vm, None, Origin("option", "--host-cgroup"))
    assert cg is None and unseen is not None and unseen.reason == "vmm_pid_unknown"
    assert "hostPID" in unseen.detail


def test_guard_off_by_name_does_not_look(pod: Path) -> None:
    vm = VmState(base=512 * MiB, vmm_pid_hidden=True)
    assert read_cgroup(vm, None, Origin("option", "--host-cgroup"), "off") == (None, None, ())
    # A cgroup named by hand is still read.
    cg, unseen, _ = read_cgroup(vm, str(pod), Origin("option", "--host-cgroup"), "off")
    assert cg is not None and cg.limit == 900 * MiB and unseen is None


def test_libvirt_hard_limit_is_one_more_level_and_binds_when_smaller(pod: Path) -> None:
    vm = VmState(base=512 * MiB, vmm_hard_limit=700 * MiB)
    cg, unseen, notes = read_cgroup(vm, str(pod), Origin("option", "--host-cgroup"))
    assert (unseen, notes) == (None, ()) and cg is not None
    assert cg.levels[0] == CgroupLevel(HARD_LIMIT, 700 * MiB, 590 * MiB)
    assert len(cg.levels) == 3 and cg.limit == 700 * MiB


def test_libvirt_hard_limit_without_a_cgroup_is_unseen() -> None:
    vm = VmState(base=512 * MiB, vmm_hard_limit=700 * MiB)
    cg, unseen, _ = read_cgroup(vm, None, Origin("option", "--host-cgroup"))
    assert cg is None and unseen is not None
    assert (unseen.reason, unseen.detail) == (
        "vmm_pid_unknown",
        f"{HARD_LIMIT} is 700 MiB but QEMU's pid (and so its cgroup) was not found",
    )


@pytest.mark.parametrize(
    ("host_mib", "reserved_mib", "overcommit", "budget"),
    [
        (16384, 0, None, None),  # report only
        (16384, 0, Fraction(1), 16384 * MiB),
        (16384, 1024, Fraction(3, 2), 23040 * MiB),  # (16384 - 1024) * 1.5
        (16384, 1024, Fraction(11, 10), 16896 * MiB),  # 15360 * 1.1, exact
        (1000, 0, Fraction(1, 3), 333 * MiB),  # floored to whole MiB
        (1024, 2048, Fraction(2), 0),  # reserved above the host: nothing, never negative
    ],
)
def test_node_budget_arithmetic(
    host_mib: int, reserved_mib: int, overcommit: Fraction | None, budget: int | None
) -> None:
    settings = Settings(node_reserved=reserved_mib * MiB, node_overcommit=overcommit)
    host = HostFacts(memory=host_mib * MiB, cpus=4, arch="amd64")
    assert node_budget(settings, host) == budget


def _journal(state_dir: Path, sandbox: str, observed: int | None, target: int | None) -> None:
    """A sandbox's journal as the executor leaves it (its own lock held while it writes)."""
    state = SandboxState(state_dir, sandbox)
    with state.locked(5) as got:
        assert got
        state.save(
            Record(
                sandbox,
                observed=None if observed is None else observed * MiB,
                target=None if target is None else target * MiB,
            )
        )


def test_commitment_is_the_target_while_a_grow_is_in_flight() -> None:
    assert Record("a", observed=2048 * MiB, target=4096 * MiB).commitment == 4096 * MiB
    assert Record("a", observed=3072 * MiB).commitment == 3072 * MiB
    # A shrink in flight has no target journaled; what it holds is what was observed.
    assert Record("a", observed=3072 * MiB, target=None).commitment == 3072 * MiB
    assert Record("a").commitment == 0


def test_node_admission_sums_the_other_sandboxes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _journal(state, "a", 2048, 4096)  # growing: its target counts
    _journal(state, "b", 3072, None)  # idle: what was observed counts
    (state / "not-ours").mkdir()  # no marker: not a sandbox, not counted
    with node_admission(state, HOST.memory) as ledger:
        assert ledger is not None
        assert ledger.others("a") == 3072 * MiB
        assert ledger.others("b") == 4096 * MiB
        assert ledger.others("new") == 7168 * MiB


def test_node_admission_on_a_state_dir_not_made_yet_has_no_commitments(tmp_path: Path) -> None:
    with node_admission(tmp_path / "absent", HOST.memory) as ledger:
        assert ledger is None
    assert not (tmp_path / "absent").exists()


def test_host_side_read_gives_the_node_view(pod: Path) -> None:
    cfg_settings = Settings(node_reserved=1024 * MiB, node_overcommit=Fraction(1))
    from kata_mem.edges.config import load_config
    from tests.support.configs import write_config

    cfg = load_config(
        write_config(
            pod.parent.parent.parent.parent / "c.toml",
            kata_mem={"node_reserved_mib": 1024, "node_overcommit": 1.0},
        )
    )
    assert cfg.settings.node_reserved == cfg_settings.node_reserved
    guards = HostSide(cfg, HOST, str(pod)).read(VM, lambda: 5 * GiB, lambda: 3 * GiB)
    assert guards.node is not None and guards.cgroup is not None
    assert (guards.node.host, guards.node.reserved, guards.node.budget) == (
        HOST.memory,
        1024 * MiB,
        HOST.memory - 1024 * MiB,
    )
    assert guards.node.committed_others == 5 * GiB
    # The host's MemAvailable as the caller read it (the executor passes /proc's).
    assert guards.node.available == 3 * GiB
    # Without the node's total (a preview): no node view at all.
    assert HostSide(cfg, HOST, str(pod)).read(VM).node is None


HOLD = """
import sys
from kata_mem.edges.ledger import node_admission
with node_admission(sys.argv[1], 1 << 40) as ledger:
    print("held", ledger.others("x"), flush=True)
    sys.stdin.readline()
print("released", flush=True)
"""


def test_the_node_lock_excludes_a_second_process(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _journal(state, "a", 1024, None)

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", HOLD, str(state)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )

    first = start()
    second = None
    try:
        assert first.stdout is not None and first.stdin is not None
        assert first.stdout.readline().split() == ["held", str(1024 * MiB)]
        second = start()
        assert second.stdout is not None and second.stdin is not None
        wait_until(
            lambda: lock_waiters(state / STATE_MARKER) == 1, "the second process waits for the lock"
        )
        assert second.poll() is None
        # Still waiting for the lock: it has printed nothing, so a read would block.
        assert select.select([second.stdout], [], [], 0)[0] == []
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "released"
        assert second.stdout.readline().split() == ["held", str(1024 * MiB)]
        second.stdin.write("\n")
        second.stdin.flush()
        assert second.wait(10) == 0 and first.wait(10) == 0
    finally:
        for proc in (first, second):
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.communicate()  # waits, and closes its pipes


def test_reconcile_says_when_a_retried_resize_could_not_see_qemus_cgroup() -> None:
    from kata_mem.core.model import Unseen
    from kata_mem.core.results import Visit
    from kata_mem.interfaces.render_node import reconcile_json, reconcile_text

    unseen = Unseen("not_reachable", "pid 7: memory cgroup /../x is outside ...")
    visits = [Visit("sb", "retried", "Resized"), Visit("sb2", "retried", "NoChange", unseen=unseen)]
    assert reconcile_text(visits) == (
        "sb: retried: Resized\n"
        "sb2: retried: NoChange; host cgroup unseen (not_reachable): grows held"
    )
    doc = reconcile_json(visits)["sandboxes"]
    assert doc[0]["host_cgroup_unseen"] is None
    assert doc[1]["host_cgroup_unseen"] == {"reason": "not_reachable", "detail": unseen.detail}
