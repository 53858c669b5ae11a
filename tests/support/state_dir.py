"""State directories in the tests: what is in one (to show that nothing changed), a
configuration that names one, ``kata-mem apply`` with one, and another process that holds
a sandbox's lock."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.cli import CliResult, Run
from tests.support.configs import HOST_ARGS, write_config

Snapshot = dict[str, tuple[Any, ...]]
#: The ``lock_holder`` fixture: ``lock_holder(lock)`` is a process that holds its flock.
LockHolder = Callable[[Path], "subprocess.Popen[str]"]


def snapshot(root: Path) -> Snapshot:
    """Mode, inode, mtime, size and content of everything under ``root`` (not following links)."""
    shot: Snapshot = {}
    paths = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
    for path in paths:
        info = os.lstat(path)
        content: Any = None
        if stat.S_ISREG(info.st_mode) and os.access(path, os.R_OK):
            content = path.read_bytes()
        elif stat.S_ISLNK(info.st_mode):
            content = os.readlink(path)
        shot[str(path.relative_to(root)) if path != root else "."] = (
            stat.filemode(info.st_mode),
            info.st_ino,
            info.st_mtime_ns,
            info.st_size,
            content,
        )
    return shot


def config_for(tmp_path: Path, state_dir: Path, name: str = "configuration.toml") -> Path:
    return write_config(
        tmp_path / name,
        {"default_memory": 512, "default_maxmemory": 4096, "memory_slots": 4},
        kata_mem={"state_dir": str(state_dir), "step_timeout_s": 1},
    )


def apply(run_cli: Run, cfg: Path, sock: Path, state: Path, sandbox: str, *args: str) -> CliResult:
    return run_cli(
        "apply",
        "--config",
        str(cfg),
        "--qmp",
        str(sock),
        "--sandbox",
        sandbox,
        "--state-dir",
        str(state),
        *HOST_ARGS,
        *args,
    )


@contextmanager
def lock_holders() -> Iterator[LockHolder]:
    """Processes that hold the flock on a sandbox's lock file, until the block ends."""
    procs: list[subprocess.Popen[str]] = []

    def hold(lock: Path) -> subprocess.Popen[str]:
        code = (
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(lock)!r}, os.O_RDWR)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n"  # holds the lock until killed
        )
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        return proc

    try:
        yield hold
    finally:
        for proc in procs:
            proc.kill()
            proc.communicate()


def still_locked(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def lock_waiters(path: Path) -> int:
    """How many processes are blocked waiting for a lock on ``path``: the ``->`` lines of
    /proc/locks (proc(5)) for its device and inode."""
    info = os.stat(path)
    node = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines if line.split()[1:2] == ["->"] and node in line.split())
