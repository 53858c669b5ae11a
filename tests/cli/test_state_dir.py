"""The state directory: kata-mem reads, changes or removes only what it created.

Every command that takes a state directory (apply, apply --dry-run, status,
reconcile, and the shim's delete event) is run against directories holding
unrelated content; nothing there may change. Also: a caller that does not get a
sandbox's lock changes nothing after the one documented wait, and reconcile
reports one sandbox's trouble and goes on.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.core.record import Record
from kata_mem.edges.journal import SandboxState
from kata_mem.edges.statedir import ensure_state_dir
from kata_mem.edges.statefiles import STATE_MARKER
from tests.support.cli import Run, kata_mem_process
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.state_dir import Snapshot, apply, config_for, snapshot, still_locked

# -- helpers --------------------------------------------------------------------------------


def unrelated_content(root: Path) -> None:
    """What a user may have in a directory: files, an empty dir, a dir with a ``lock``
    file, a symlink, a FIFO, odd modes. The directory names are valid sandbox ids."""
    root.mkdir(exist_ok=True)
    (root / "notes.txt").write_text("hello\n")
    (root / "secret").write_text("x")
    os.chmod(root / "secret", 0o000)
    (root / "tool").write_text("#!/bin/sh\n")
    os.chmod(root / "tool", 0o4711)
    (root / "empty").mkdir()
    os.chmod(root / "empty", 0o755)
    (root / "withlock").mkdir()
    (root / "withlock" / "lock").write_text("pid 42\n")
    (root / "withlock" / "data").write_text("keep me")
    os.chmod(root / "withlock", 0o750)
    (root / "open").mkdir()
    (root / "open" / "journal.json").write_text('{"not": "kata-mem"}')
    os.chmod(root / "open", 0o1777)
    (root / "link").symlink_to("notes.txt")
    os.mkfifo(root / "fifo", 0o620)
    # Old timestamps, so that any touch shows.
    for path in [*root.rglob("*"), root]:
        os.utime(path, (1_000_000_000, 1_000_000_000), follow_symlinks=False)


@pytest.fixture
def qemu(tmp_path: Path) -> Iterator[tuple[FakeQemu, FakeQmpServer]]:
    fake = FakeQemu()
    with FakeQmpServer(tmp_path / "qmp.sock", fake) as server:
        yield fake, server


def shim_delete(cfg: Path, sandbox: str) -> tuple[int, dict[str, Any]]:
    request = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": sandbox,
        "event": "delete",
        "config": str(cfg),
    }
    r = kata_mem_process("shim", input=json.dumps(request))
    return r.returncode, json.loads(r.stdout)


def journal_of(state: Path, sandbox: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((state / sandbox / "journal.json").read_text())
    return doc


# -- the acceptance test: unrelated content is never touched -----------------------------------


@pytest.mark.parametrize("kind", ["unrelated directory", "regular file"])
def test_every_command_refuses_a_state_dir_kata_mem_did_not_create(
    run_cli: Run, qemu: tuple[FakeQemu, FakeQmpServer], tmp_path: Path, kind: str
) -> None:
    fake, server = qemu
    target = tmp_path / "theirs"
    if kind == "regular file":
        target.write_text("root:x:0:0:root:/root:/bin/sh\n")  # as --state-dir /etc/passwd
        os.utime(target, (1_000_000_000, 1_000_000_000))
        expected = "is not a directory"
    else:
        unrelated_content(target)
        expected = "kata-mem did not create"
    cfg = config_for(tmp_path, target)
    before = snapshot(target)
    sb = "withlock"
    runs = {
        "apply": apply(run_cli, cfg, server.path, target, sb, "--limit", "256Mi"),
        "apply --dry-run": apply(run_cli, cfg, server.path, target, sb, "--dry-run"),
        "status": run_cli(
            "status", "--qmp", str(server.path), "--sandbox", sb, "--state-dir", str(target)
        ),
        "status (its saved request)": run_cli("status", "--sandbox", sb, "--config", str(cfg)),
        "reconcile": run_cli("reconcile", "--state-dir", str(target)),
        "reconcile (from the config)": run_cli("reconcile", "--config", str(cfg)),
    }
    for what, r in runs.items():
        assert r.code == 3, (what, r)
        assert f"state_dir {target}: " in r.err and expected in r.err, (what, r.err)
        assert snapshot(target) == before, what
    code, doc = shim_delete(cfg, sb)
    assert (code, doc["error"]["kind"]) == (3, "config"), doc
    assert expected in doc["error"]["message"]
    assert snapshot(target) == before
    assert fake.commands == []  # refused before any connection to the VM


def test_inside_kata_mems_state_dir_unrelated_entries_are_skipped_and_kept(
    run_cli: Run, qemu: tuple[FakeQemu, FakeQmpServer], tmp_path: Path
) -> None:
    _fake, server = qemu
    state = tmp_path / "state"
    ensure_state_dir(state)  # kata-mem's, and then someone puts their things in it
    unrelated_content(state)
    cfg = config_for(tmp_path, state)

    def unchanged() -> Snapshot:
        return {k: v for k, v in snapshot(state).items() if k != "." and not k.startswith("sb")}

    before = unchanged()
    assert before.keys() >= {STATE_MARKER, "withlock/lock", "empty", "open/journal.json"}
    r = apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi", "--json")
    assert (r.code, json.loads(r.out)["status"]) == (0, "Resized"), r
    assert (state / "sb" / ".kata-mem-sandbox").is_file()
    r = apply(run_cli, cfg, server.path, state, "withlock", "--limit", "256Mi")
    assert r.code == 3 and f"{state / 'withlock'} exists but kata-mem did not create it" in r.err
    r = apply(run_cli, cfg, server.path, state, "empty", "--dry-run")
    assert r.code == 0, r
    status = {}
    for sb in ("sb", "withlock", "open"):
        r = run_cli(
            "status",
            "--qmp",
            str(server.path),
            "--sandbox",
            sb,
            "--state-dir",
            str(state),
            "--json",
        )
        assert r.code == 0, r
        status[sb] = json.loads(r.out)["journal"]
    assert status["sb"]["observed_mib"] == 768 and status["withlock"] is status["open"] is None
    r = run_cli("reconcile", "--state-dir", str(state))
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert lines[0].startswith("sb: retried: NoChange"), r.out
    skipped = {
        line.split(":")[0] for line in lines if line.endswith(": skipped: not created by kata-mem")
    }
    assert skipped == {"empty", "withlock", "open", "notes.txt", "secret", "tool", "link", "fifo"}
    code, doc = shim_delete(cfg, "withlock")
    assert code == 0 and "was not created by kata-mem" in doc["warnings"][0], doc
    code, doc = shim_delete(cfg, "sb")
    assert (code, doc["warnings"]) == (0, []), doc
    assert not (state / "sb").exists()
    assert unchanged() == before


def test_read_only_commands_create_nothing(
    run_cli: Run, qemu: tuple[FakeQemu, FakeQmpServer], tmp_path: Path
) -> None:
    _fake, server = qemu
    for target in (tmp_path / "absent", tmp_path / "empty"):
        if target.name == "empty":
            target.mkdir()
            os.utime(target, (1_000_000_000, 1_000_000_000))
        before = snapshot(target) if target.exists() else None
        cfg = config_for(tmp_path, target, f"{target.name}.toml")
        assert apply(run_cli, cfg, server.path, target, "sb", "--dry-run").code == 0
        r = run_cli("status", "--qmp", str(server.path), "--state-dir", str(target), "--json")
        assert (r.code, json.loads(r.out)["journal"]) == (0, None)
        r = run_cli("reconcile", "--state-dir", str(target))
        assert (r.code, r.out.strip()) == (0, "no sandboxes")
        assert shim_delete(cfg, "sb")[1]["warnings"] == ["no state for sandbox sb"]
        assert (snapshot(target) if target.exists() else None) == before, target
    # apply adopts the empty directory: it writes its marker there, and its sandbox.
    cfg = config_for(tmp_path, tmp_path / "empty", "empty.toml")
    assert apply(run_cli, cfg, server.path, tmp_path / "empty", "sb", "--limit", "256Mi").code == 0
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == [STATE_MARKER, "sb"]


# -- the lock: one wait, then change nothing ---------------------------------------------------


WAIT_S = 1.0


@pytest.mark.parametrize("first_call", [True, False], ids=["first-call-running", "established"])
def test_apply_that_does_not_get_the_lock_changes_nothing(
    run_cli: Run,
    qemu: tuple[FakeQemu, FakeQmpServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lock_holder: Callable[[Path], subprocess.Popen[str]],
    first_call: bool,
) -> None:
    fake, server = qemu
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    if first_call:  # the other call has just made the directory and holds the lock
        with SandboxState(state, "sb").locked(0):
            pass
    else:
        assert apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi").code == 0
    lock = state / "sb" / "lock"
    lock_holder(lock)
    before, commands = snapshot(state), len(fake.commands)
    monkeypatch.setattr("kata_mem.orchestration.executor.LOCK_WAIT_S", WAIT_S)
    started = time.monotonic()
    r = apply(run_cli, cfg, server.path, state, "sb", "--limit", "1Gi", "--json")
    took = time.monotonic() - started
    doc = json.loads(r.out)
    assert (r.code, doc["status"], doc["reason"]) == (0, "Deferred", "Busy"), r
    assert WAIT_S <= took < WAIT_S + 1.5, took  # the documented wait, once
    assert snapshot(state) == before  # not the lock file, the journal, the saved request
    assert still_locked(lock)  # the holder's lock file is the one at the path, still held
    assert len(fake.commands) == commands  # never connected


def test_shim_delete_that_does_not_get_the_lock_removes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lock_holder: Callable[[Path], subprocess.Popen[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    import io

    from kata_mem.interfaces.shim import run_shim

    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    sandbox = SandboxState(state, "sb")
    with sandbox.locked(0):
        sandbox.save_request({"any": 1})
    lock_holder(state / "sb" / "lock")
    before = snapshot(state)
    monkeypatch.setattr("kata_mem.edges.statedir.LOCK_WAIT_S", WAIT_S)
    request = {"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "delete"}
    out = io.StringIO()
    started = time.monotonic()
    code = run_shim(io.BytesIO(json.dumps({**request, "config": str(cfg)}).encode()), out, {})
    assert time.monotonic() - started < WAIT_S + 1.5
    doc = json.loads(out.getvalue())
    assert code == 0 and "another call held its lock" in doc["warnings"][0], doc
    assert snapshot(state) == before
    assert still_locked(state / "sb" / "lock")


def test_concurrent_calls_and_deletes_hold_the_lock_one_at_a_time(tmp_path: Path) -> None:
    """Processes that lock, write, forget and delete one sandbox at once: never two
    holders (a delete unlinks the lock file), never a refusal, never an unmarked directory."""
    from tests.support.paths import REPO

    state, inside = tmp_path / "state", tmp_path / "inside"
    code = (
        "import os, random, sys\n"
        "from kata_mem.edges.journal import Record, SandboxState\n"
        "state, inside = sys.argv[1], sys.argv[2]\n"
        "for i in range(25):\n"
        "    s = SandboxState(state, 'sb')\n"
        "    if random.random() < 0.3:\n"
        "        s.remove(60)\n"
        "        continue\n"
        "    with s.locked(60) as got:\n"
        "        assert got and s.owned()\n"
        "        os.close(os.open(inside, os.O_CREAT | os.O_EXCL))  # fails if another holds it\n"
        "        s.save(Record('sb'))\n"
        "        os.unlink(inside)\n"
        "        if random.random() < 0.3:\n"
        "            s.clear()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(state), str(inside)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]
    assert [code for code, _ in results] == [0] * 6, [err[-500:] for _, err in results]
    assert {p.name for p in state.iterdir()} <= {STATE_MARKER, "sb"}
    assert not (state / "sb").exists() or SandboxState(state, "sb").owned()


# -- reconcile: one sandbox's trouble is that sandbox's ---------------------------------------


def test_reconcile_reports_each_sandboxs_trouble_and_goes_on(
    run_cli: Run,
    qemu: tuple[FakeQemu, FakeQmpServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake, server = qemu
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    other = config_for(tmp_path, state, "other.toml")
    # Each sandbox its own VM: a VM is sized by one sandbox's requests.
    servers = [server] + [FakeQmpServer(tmp_path / f"vm{i}.sock", FakeQemu()) for i in range(1, 4)]
    for sb, vm in zip(("a-damaged", "b-noconfig", "c-bug", "d-fine"), servers, strict=True):
        config = other if sb == "b-noconfig" else cfg
        assert apply(run_cli, config, vm.path, state, sb, "--limit", "256Mi").code == 0
    # A journal whose retry time is not a number: corrupt, so rebuilt from the VM.
    path = state / "a-damaged" / "journal.json"
    path.write_text(
        json.dumps({**journal_of(state, "a-damaged"), "deferred": {"retry_at": "soon"}})
    )
    other.unlink()  # its VM is still there, its configuration is not
    from kata_mem.core.request import CallOptions, SandboxRequest
    from kata_mem.core.results import Response
    from kata_mem.orchestration.handle import handle as real_handle

    def handle(request: SandboxRequest, env: dict[str, str], options: CallOptions) -> Response:
        if request.sandbox == "c-bug":
            raise ZeroDivisionError("a bug")
        return real_handle(request, env, options)

    monkeypatch.setattr("kata_mem.orchestration.reconcile.handle", handle)
    r = run_cli("reconcile", "--state-dir", str(state))
    lines = r.out.splitlines()
    assert lines[0].startswith("a-damaged: retried: NoChange"), r.out
    assert lines[1].startswith(f"b-noconfig: failed: {other}: no such configuration file"), r.out
    assert lines[2] == "c-bug: failed: internal error: ZeroDivisionError: a bug", r.out
    assert lines[3].startswith("d-fine: retried: NoChange"), r.out
    assert r.code == 3  # the first failure's: a configuration error
    assert "corrupt or truncated (deferred is not a deferral" in r.err
    assert journal_of(state, "a-damaged")["deferred"] is None  # rebuilt
    monkeypatch.setattr("kata_mem.orchestration.reconcile.handle", real_handle)
    (state / "b-noconfig" / "request.json").unlink()
    (state / "b-noconfig" / "journal.json").unlink()
    r = run_cli("reconcile", "--state-dir", str(state), "--json")
    assert r.code == 0, r  # c-bug, unpatched, is fine again
    for vm in servers[1:]:
        vm.close()


def test_reconcile_refuses_a_saved_request_for_another_sandbox(
    run_cli: Run, qemu: tuple[FakeQemu, FakeQmpServer], tmp_path: Path
) -> None:
    _fake, server = qemu
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    assert apply(run_cli, cfg, server.path, state, "x", "--limit", "256Mi").code == 0
    saved = state / "x" / "request.json"
    saved.write_text(saved.read_text().replace('"sandbox_id": "x"', '"sandbox_id": "y"'))
    r = run_cli("reconcile", "--state-dir", str(state))
    assert r.code == 3 and r.out.startswith(f"x: failed: {saved}: is for sandbox 'y'"), r
    assert sorted(p.name for p in state.iterdir()) == [STATE_MARKER, "x"]


@pytest.mark.parametrize("how", ["socket removed", "connection refused"])
def test_reconcile_forgets_a_gone_vm_without_loading_its_configuration(
    run_cli: Run, tmp_path: Path, how: str
) -> None:
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    sock = tmp_path / "qmp.sock"
    with FakeQmpServer(sock, FakeQemu()):
        assert apply(run_cli, cfg, sock, state, "sb", "--limit", "256Mi").code == 0
    if how == "connection refused":  # QEMU killed: its socket file stays, nobody listens
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(sock))
        dead.close()
    cfg.unlink()  # the configuration the request was applied with is gone too
    r = run_cli("reconcile", "--state-dir", str(state))
    assert r.code == 0 and r.out.startswith("sb: cleaned: the VM is gone (QMP socket"), r
    assert not (state / "sb").exists()
    assert sorted(p.name for p in state.iterdir()) == [STATE_MARKER]


def test_reconcile_says_what_it_removed_and_what_it_kept(run_cli: Run, tmp_path: Path) -> None:
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    sock = tmp_path / "qmp.sock"
    with FakeQmpServer(sock, FakeQemu()):
        assert apply(run_cli, cfg, sock, state, "sb", "--limit", "256Mi").code == 0
    (state / "sb" / "notes.txt").write_text("mine\n")  # someone's, in kata-mem's directory
    r = run_cli("reconcile", "--state-dir", str(state))
    assert r.code == 0, r
    assert r.out.startswith("sb: cleaned: the VM is gone (QMP socket"), r
    assert r.out.rstrip().endswith(
        f"; kata-mem's files were removed, but the directory {state / 'sb'} was kept because "
        "it holds entries kata-mem did not create: notes.txt"
    ), r
    assert sorted(p.name for p in (state / "sb").iterdir()) == [
        ".kata-mem-sandbox",
        "lock",
        "notes.txt",
    ]


def test_status_all_says_a_corrupt_journal_is_shown_as_unknown(
    run_cli: Run, qemu: tuple[FakeQemu, FakeQmpServer], tmp_path: Path
) -> None:
    """A listing asks no VM: it says what it shows, and what will rebuild the journal."""
    _fake, server = qemu
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    assert apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi").code == 0
    (state / "sb" / "journal.json").write_text("{")
    before = snapshot(state)
    r = run_cli("status", "--all", "--state-dir", str(state), "--json")
    assert r.code == 0 and json.loads(r.out)["sandboxes"][0]["state"] == "unknown", r
    assert (
        f"journal {state / 'sb' / 'journal.json'} is corrupt or truncated (" in r.err
        and "; shown as unknown; the next apply rebuilds it from the hypervisor" in r.err
        and "rebuilt" not in r.err
    ), r.err
    assert snapshot(state) == before


def test_reconcile_forgets_a_libvirt_domain_that_no_longer_exists(
    run_cli: Run, qemu: tuple[FakeQemu, FakeQmpServer], tmp_path: Path
) -> None:
    pytest.importorskip("libvirt", reason="libvirt-python is part of the test extra")
    from kata_mem.core.endpoint import Endpoint
    from kata_mem.orchestration.connect import vm_gone

    assert vm_gone(Endpoint("libvirt", "test:///default", "test")) is None
    gone = vm_gone(Endpoint("libvirt", "test:///default", "no-such-domain"))
    assert gone is not None and "no-such-domain" in gone
    state = tmp_path / "state"
    sandbox = SandboxState(state, "lv")
    with sandbox.locked(0):
        sandbox.save(Record("lv"))
        sandbox.save_request(
            {
                "schema": "kata-mem/shim-request/v1",
                "sandbox_id": "lv",
                "event": "reconcile",
                "config": str(tmp_path / "missing.toml"),
                "backend": {
                    "type": "libvirt",
                    "uri": "test:///default",
                    "domain": "no-such-domain",
                },
                "apply": True,
            }
        )
    r = run_cli("reconcile", "--state-dir", str(state))
    assert r.code == 0 and r.out.startswith("lv: cleaned: the VM is gone (libvirt"), r
    assert not sandbox.dir.exists()


# -- the journal is kata-mem's own input: damaged means rebuilt -------------------------------


@pytest.mark.parametrize(
    "damage",
    [b"[" * 100_000, b'{"schema": "kata-mem/journal/v1", "observed_mib": "768"}', b"\xff\xfe"],
    ids=["deeply-nested", "wrong-type", "not-utf8"],
)
def test_damaged_journal_is_rebuilt(
    run_cli: Run, qemu: tuple[FakeQemu, FakeQmpServer], tmp_path: Path, damage: bytes
) -> None:
    _fake, server = qemu
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    assert apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi").code == 0
    (state / "sb" / "journal.json").write_bytes(damage)
    r = run_cli("status", "--qmp", str(server.path), "--sandbox", "sb", "--state-dir", str(state))
    # status only reads: it says what it shows, and what rebuilds the journal.
    assert r.code == 0 and "shown as unknown; the next apply rebuilds it" in r.err, r
    r = apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi", "--json")
    doc = json.loads(r.out)
    assert (r.code, doc["status"]) == (0, "NoChange"), r
    assert any("corrupt or truncated" in w for w in doc["warnings"]), doc
    assert journal_of(state, "sb")["observed_mib"] == 768


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for this test (root only; unmounted after), with a kata-mem
    state directory on it, then filled to the last byte: writes fail with ENOSPC."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir(mode=0o755)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "kata-mem-test", str(mount)],
        check=True,
    )
    try:
        state = mount / "state"
        ensure_state_dir(state)
        fd = os.open(mount / "fill", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with pytest.raises(OSError) as full:
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        assert full.value.errno == errno.ENOSPC
        yield state
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_full_state_disk_says_so_and_leaves_no_sandbox_directory(full_disk: Path) -> None:
    """A state disk without room is named as full (not "use another
    state_dir"), and the sandbox directory made for the call is removed again, so that no
    unmarked directory is left for reconcile and status --all to report for good."""
    state = SandboxState(full_disk, "sb-full")
    with pytest.raises(ConfigError) as refused, state.locked(0):
        pass
    message = str(refused.value)
    assert "the file system is full (No space left on device)" in message, message
    assert "Free space on it" in message and "another" not in message
    assert sorted(p.name for p in full_disk.iterdir()) == [STATE_MARKER]


def test_an_apply_shows_its_configuration_as_given_and_saves_it_absolute(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    monkeypatch.chdir(tmp_path)
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as server:
        r = apply(run_cli, Path(cfg.name), server.path, state, "sb", "--limit", "256Mi", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["plan"]["config"]["path"] == cfg.name
    # reconcile re-runs the saved request from another directory.
    assert json.loads((state / "sb" / "request.json").read_text())["config"] == str(cfg)
