"""What ``kata-mem serve`` may create, replace and remove at its socket path: a refusal
changes nothing on disk; a dead socket is replaced only when the lock beside it proves
it kata-mem's; a directory another user could write is refused. Real processes, real
files, and uid ``nobody`` for another user's."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import pytest

from tests.support.paths import REPO
from tests.support.service import serve_argv, start

NOBODY = 65534

LISTENER = """
import socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.bind(sys.argv[1])
sock.listen(8)
print("ready", flush=True)
sys.stdin.read()  # until the test closes our stdin; the socket file stays behind
"""


def _listing(where: Path) -> dict[str, tuple[int, int, int]]:
    """Each entry's inode, mode and mtime, and the directory's own."""
    entries = {".": os.lstat(where)}
    entries.update(
        {p.name: os.lstat(p) for p in where.iterdir() if not p.name.startswith("serve-")}
    )
    return {name: (i.st_ino, i.st_mode, i.st_mtime_ns) for name, i in entries.items()}


def _refused(where: Path, sock: Path, state: Optional[Path] = None) -> str:
    """``serve`` exits 3 and the directory is exactly as it was; its stderr."""
    before = _listing(where)
    argv = serve_argv("--socket", str(sock), "--state-dir", str(state or where / "state"))
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=20, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert _listing(where) == before, proc.stderr
    return proc.stderr


@pytest.fixture
def foreign_listener(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another program listening on tmp_path/kata-mem.sock."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTENER, str(tmp_path / "kata-mem.sock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    with proc:  # closes its pipes
        yield proc
        proc.kill()


def test_a_foreign_listener_is_refused_and_its_socket_survives_the_next_serve(
    tmp_path: Path, foreign_listener: subprocess.Popen[str]
) -> None:
    sock = tmp_path / "kata-mem.sock"
    assert "something is already listening on it" in _refused(tmp_path, sock)
    assert foreign_listener.stdin is not None
    foreign_listener.stdin.close()
    assert foreign_listener.wait(30) == 0
    before = os.lstat(sock)  # dead now, and not kata-mem's
    err = _refused(tmp_path, sock)
    assert "not one kata-mem serve made" in err
    after = os.lstat(sock)
    assert (after.st_ino, after.st_ctime_ns) == (before.st_ino, before.st_ctime_ns)


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_path_that_is_not_a_socket_is_refused_and_nothing_is_made(
    tmp_path: Path, kind: str
) -> None:
    sock = tmp_path / "kata-mem.sock"
    if kind == "file":
        sock.write_text("mine")
    else:
        sock.mkdir()
    assert "exists and is not a socket" in _refused(tmp_path, sock)


def test_a_path_too_long_for_a_unix_socket_is_refused_and_nothing_is_made(tmp_path: Path) -> None:
    sock = tmp_path / ("s" * (108 - len(str(tmp_path)) - 1))
    assert len(str(sock)) == 108
    err = _refused(tmp_path, sock)
    assert "108 bytes" in err and "at most 107" in err
    # 107 bytes is fine.
    svc = start(tmp_path, sock=tmp_path / ("s" * (107 - len(str(tmp_path)) - 1)))
    assert svc.stop() == 0, svc.stderr()


def _dead_socket(path: Path) -> os.stat_result:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(path))  # bound, never listening, closed: what a crashed server leaves
    return os.lstat(path)


def _lock_naming(info: os.stat_result) -> str:
    """What a kata-mem serve writes in its lock: its pid and the socket it made."""
    doc = {
        "schema": "kata-mem/serve-lock/v1",
        "pid": 1,
        "socket": {"dev": info.st_dev, "ino": info.st_ino, "ctime_ns": info.st_ctime_ns},
    }
    return json.dumps(doc) + "\n"


@pytest.mark.parametrize(
    "lock",
    [
        "owned by nobody",
        "group-writable",
        "empty (as kata-mem 0.x left it)",
        "names another socket",
        "a symlink to a real lock",
    ],
)
def test_a_lock_that_does_not_prove_the_dead_socket_is_not_trusted(
    tmp_path: Path, lock: str
) -> None:
    sock = tmp_path / "kata-mem.sock"
    info = _dead_socket(sock)
    path = tmp_path / "kata-mem.sock.lock"
    if lock == "a symlink to a real lock":
        real = tmp_path / "elsewhere.lock"
        real.write_text(_lock_naming(info))
        real.chmod(0o600)
        path.symlink_to(real)
    else:
        path.write_text("" if lock.startswith("empty") else _lock_naming(info))
        path.chmod(0o620 if lock == "group-writable" else 0o600)
    if lock == "owned by nobody":
        os.chown(path, NOBODY, NOBODY)
    if lock == "names another socket":
        other = _dead_socket(tmp_path / "other.sock")
        path.write_text(_lock_naming(other))
    err = _refused(tmp_path, sock)
    assert "nothing was changed" in err
    assert stat.S_ISSOCK(os.lstat(sock).st_mode)
    # A lock another user could have written: the rule and words of kata_mem.edges.ownership.
    why = {
        "owned by nobody": "nobody (uid 65534), mode 0600",
        "group-writable": "root (uid 0), mode 0620",
    }
    if lock in why:
        assert err == (
            f"kata-mem: error: --socket {sock}: {path} is owned by {why[lock]}: not a lock "
            "kata-mem serve made; nothing was changed (remove it, or give another --socket)\n"
        )


@pytest.mark.parametrize("content", ["another program's data", "a lock naming another socket"])
def test_a_lock_without_its_socket_is_neither_adopted_nor_removed(
    tmp_path: Path, content: str
) -> None:
    # Before: serve took over PATH.lock (root's, 0600) when no socket was there, rewrote it,
    # and deleted it at its stop: `--socket /run/xtables` would delete /run/xtables.lock.
    lock = tmp_path / "kata-mem.sock.lock"
    if content.startswith("another"):
        lock.write_text("precious data of another program\n")
    else:
        lock.write_text(_lock_naming(_dead_socket(tmp_path / "other.sock")))
    lock.chmod(0o600)
    kept = lock.read_bytes()
    err = _refused(tmp_path, tmp_path / "kata-mem.sock")
    assert f"{lock} is there without a socket beside it" in err, err
    assert lock.read_bytes() == kept


def test_a_crashed_serve_leaves_a_lock_that_proves_its_socket(tmp_path: Path) -> None:
    first = start(tmp_path)
    first.proc.kill()
    first.proc.wait(30)
    lock = json.loads((tmp_path / "kata-mem.sock.lock").read_text())
    info = os.lstat(tmp_path / "kata-mem.sock")
    assert lock["pid"] == first.proc.pid
    assert lock["socket"] == {"dev": info.st_dev, "ino": info.st_ino, "ctime_ns": info.st_ctime_ns}
    svc = start(tmp_path)
    try:
        assert "replaced a stale socket" in svc.stderr()
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_a_clean_stop_leaves_the_directory_as_it_was_but_for_the_record(tmp_path: Path) -> None:
    """The socket and its lock go; the record of the state directory stays, for the shims
    that answer in their own process meanwhile (docs/design/state.md, "One state per VM")."""
    before = _listing(tmp_path)
    svc = start(tmp_path)
    assert (tmp_path / "kata-mem.sock.lock").exists()
    assert svc.stop() == 0, svc.stderr()
    record = ".kata-mem.sock.service"
    assert _listing(tmp_path).keys() == {*before.keys(), record}
    assert json.loads((tmp_path / record).read_text())["state_dir"] == str(svc.state)


def _way_refused(sock: Path, here: Path, owner: str, mode: int) -> str:
    """serve's refusal of a directory on the way to its socket: the rule and the message
    of every file kata-mem uses as root (kata_mem.edges.ownership.check_way)."""
    return (
        f"kata-mem: error: --socket {sock}: {here} is owned by {owner}, mode {mode:04o}; "
        "another user could replace the socket and its lock through it, so nothing was read "
        "or changed. Every directory above the socket and its lock must be owned by root and "
        "not writable by group or others (unless sticky, as /tmp is)\n"
    )


@pytest.mark.parametrize(
    ("mode", "owner", "who"),
    [
        (0o777, 0, "root (uid 0)"),  # writable by group and others, not sticky
        (0o775, 0, "root (uid 0)"),  # writable by the group
        (0o755, NOBODY, "nobody (uid 65534)"),
    ],
)
def test_a_socket_directory_another_user_could_write_is_refused(
    tmp_path: Path, mode: int, owner: int, who: str
) -> None:
    where = tmp_path / "sockets"
    where.mkdir()
    os.chown(where, owner, owner)
    where.chmod(mode)
    err = _refused(where, where / "kata-mem.sock", tmp_path / "state")
    assert err == _way_refused(where / "kata-mem.sock", where, who, mode)
    assert not (tmp_path / "state").exists()


def test_a_directory_above_the_socket_another_user_could_write_is_refused(tmp_path: Path) -> None:
    (tmp_path / "open").mkdir()
    (tmp_path / "open").chmod(0o777)
    where = tmp_path / "open" / "sockets"
    where.mkdir(mode=0o755)
    err = _refused(where, where / "kata-mem.sock", tmp_path / "state")
    assert err == _way_refused(where / "kata-mem.sock", tmp_path / "open", "root (uid 0)", 0o777)


def test_a_sticky_shared_directory_is_accepted(tmp_path: Path) -> None:
    where = tmp_path / "shared"
    where.mkdir()
    where.chmod(0o1777)  # as /tmp: no one may remove or rename another user's entries
    svc = start(where, "--state-dir", str(tmp_path / "state"))
    assert svc.stop() == 0, svc.stderr()
