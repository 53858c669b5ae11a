"""Defects a new user found: each test drives kata-mem as the
user did and pins the new wording; each failed on the code before."""

from __future__ import annotations

import grp
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

from kata_mem.edges.statedir import ensure_state_dir
from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import HOST_ARGS, write_config
from tests.support.service import start

Run = Callable[..., CliResult]


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return write_config(tmp_path / "c.toml", kata_mem={"state_dir": str(tmp_path / "state")})


@pytest.mark.parametrize("cpus", ["1e41", "1e100", "1e400", "9223372036854775.808"])
def test_cpus_beyond_int64_millicores_are_refused(run_cli: Run, cfg: Path, cpus: str) -> None:
    # Before: capped at 10^40 and planned, each shown as "containers = 1e+40", where a
    # memory size above int64 is refused.
    r = run_cli("preview", "--config", str(cfg), "--cpu", cpus, *HOST_ARGS)
    assert r.code == 4, r.err
    assert r.err.strip() == (
        f"kata-mem: error: --cpu {cpus!r}: above 9223372036854775807m (9.223e+15 CPUs); "
        "expected CPUs whose millicores a signed 64-bit integer holds, as the kubelet reads "
        "a CPU limit"
    )


def test_cpus_at_the_bound_are_planned(run_cli: Run, cfg: Path) -> None:
    r = run_cli("preview", "--config", str(cfg), "--cpu", "9223372036854775807m", *HOST_ARGS)
    assert r.code == 0, r.err


@pytest.fixture
def reachable_dir() -> Iterator[Path]:
    """A directory every user can search (pytest's tmp dirs are root's alone)."""
    where = Path(tempfile.mkdtemp(prefix="kata-mem-group-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def test_serve_group_under_a_0700_state_dir_is_refused_naming_it(reachable_dir: Path) -> None:
    # Before: served, with a socket of the group's that its members could not reach
    # through the 0700 state directory, and nothing said so.
    state = reachable_dir / "state"
    ensure_state_dir(state)  # as apply makes it: 0700
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    sock = state / "kata-mem.sock"
    svc = start(reachable_dir, "--group", "users", sock=sock, wait=False)
    try:
        assert svc.proc.wait(30) == 3, svc.stderr()
    finally:
        if svc.proc.poll() is None:  # it served: stop it
            svc.stop()
    assert (
        f"kata-mem: error: --socket {sock}: --group users: {state} is mode 0700 (owner root (uid 0), "
        "group root), which the group cannot search, so its members could not reach the "
        f"socket; nothing was changed (let the group search it: chgrp users {state} && "
        f"chmod g+x {state}; or give a --socket in a directory they can reach)"
    ) in svc.stderr()
    assert sorted(p.name for p in state.iterdir()) == [".kata-mem-state"]


def test_serve_group_under_a_directory_the_group_may_search(reachable_dir: Path) -> None:
    state = reachable_dir / "state"
    ensure_state_dir(state)
    os.chown(state, -1, grp.getgrnam("users").gr_gid)
    state.chmod(0o710)
    svc = start(reachable_dir, "--group", "users", sock=state / "kata-mem.sock")
    assert svc.stop() == 0, svc.stderr()


@pytest.mark.parametrize("memory", ["-1", "0", "1023Ki"])
def test_host_memory_below_the_minimum_says_the_minimum(
    run_cli: Run, cfg: Path, memory: str
) -> None:
    # Before: -1 was refused as "expected a size of 0 or more", where 0 is refused too.
    r = run_cli("preview", "--config", str(cfg), "--host-memory", memory, "--host-cpus", "4")
    assert r.code == 4, r.err
    assert r.err.strip() == f"kata-mem: error: --host-memory {memory!r}: expected at least 1Mi"


def test_a_deeply_nested_request_is_refused_in_kata_mems_words() -> None:
    # Before: "request is not JSON: maximum recursion depth exceeded while decoding a JSON
    # array from a unicode string", Python's words about its interpreter.
    deep = '{"schema": "kata-mem/shim-request/v1", "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    r = kata_mem_process("shim", input=deep)
    assert r.returncode == 4, r.stderr
    message = (
        "request: nested too deeply to read (more than a few hundred levels of arrays and "
        "objects); a shim request is a few levels deep"
    )
    assert r.stderr.strip() == f"kata-mem shim: error: {message}"
    assert json.loads(r.stdout)["error"]["message"] == message


def test_a_drop_in_that_is_a_directory_is_refused_naming_it(run_cli: Run, tmp_path: Path) -> None:
    # Before: skipped silently, where both Kata runtimes fail to start on it.
    path = write_config(tmp_path / "c.toml")
    (tmp_path / "config.d" / "50-box.toml").mkdir(parents=True)
    r = run_cli("config", "check", str(path))
    assert r.code == 3, r.err
    assert r.err.strip() == (
        f"kata-mem: error: {tmp_path}/config.d/50-box.toml: a directory among the drop-ins of "
        f"{path}; Kata refuses to start with it (it reads every entry of config.d as a drop-in "
        "file); expected drop-in files only (move it out of config.d)"
    )
