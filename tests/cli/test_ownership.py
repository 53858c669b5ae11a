"""Root never acts on what another user could have written.

kata-mem runs as root. A state directory, sandbox directory, marker, journal, saved
request or lock is used only when root owns it and no group or other user can write
it, and only when no one else can swap it through a directory or symlink above it.
Anything else is refused, exit 3 with the path, its owner and its mode named, and
nothing is written. A libvirt URI, whatever wrote it, is one of the local ones.

Everything here is real: files and directories owned by the user ``nobody``, written
by processes running as ``nobody``, a unix socket a ``nobody`` process listens on
(it records every connection), a libvirt ``ext`` transport command that would leave
a file behind if libvirt ran it.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.core.record import Record
from kata_mem.edges.journal import SandboxState
from kata_mem.edges.statedir import ensure_state_dir, state_dir_state
from kata_mem.edges.statefiles import STATE_MARKER, temp_name
from tests.support.cli import CliResult, Run, kata_mem_process
from tests.support.configs import write_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
from tests.support.state_dir import apply, config_for, snapshot

NOBODY = pwd.getpwnam("nobody").pw_uid
NOGROUP = grp.getgrnam("nogroup").gr_gid
AS_NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")
OWNER = f"owned by nobody (uid {NOBODY})"
QEMU = tuple[FakeQemu, FakeQmpServer]

#: Run as nobody: make directories and write files, as JSON [[path, content or null], ...].
PLANT = r"""
import json, sys
for path, content in json.loads(sys.argv[1]):
    if content is None:
        import os
        os.mkdir(path, 0o755)
    else:
        with open(path, "w") as f:
            f.write(content)
"""

#: Run as nobody: a QMP-looking socket that reports every connection on stdout. A
#: connection that sends "end" is the test's own, and marks the end of a count.
LISTEN = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(16)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b'{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 8}, '
              b'"package": ""}, "capabilities": []}}\r\n')
    c.settimeout(1.0)
    try:
        data = c.recv(16)
    except OSError:
        data = b""
    print("end" if data == b"end" else "accepted", flush=True)
    c.close()
"""


def as_nobody(*argv: str) -> None:
    subprocess.run([*AS_NOBODY, *argv], check=True, timeout=60)


def plant(*entries: tuple[Path, str | None]) -> None:
    """Make directories (content None) and files, in that order, as nobody."""
    as_nobody(sys.executable, "-c", PLANT, json.dumps([[str(p), c] for p, c in entries]))


class Listener:
    """A unix socket that nobody listens on, counting who connects."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc = subprocess.Popen(
            [*AS_NOBODY, sys.executable, "-c", LISTEN, str(path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "listening\n"

    def connections(self) -> int:
        """Connections so far: the listener accepts in order, so every one made before
        the test's own marker connection is reported before it."""
        assert self.proc.stdout is not None
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(self.path))
            s.recv(4096)
            s.sendall(b"end")
        count = 0
        while (line := self.proc.stdout.readline()) != "end\n":
            assert line == "accepted\n", line
            count += 1
        return count

    def stop(self) -> None:
        self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def qemu(tmp_path: Path) -> Iterator[QEMU]:
    fake = FakeQemu()
    with FakeQmpServer(tmp_path / "qmp.sock", fake) as server:
        yield fake, server


@pytest.fixture
def shared() -> Iterator[Path]:
    """A root-owned directory (0755) that nobody can reach, unlike pytest's tmp dirs, to
    hold what nobody owns."""
    where = Path(tempfile.mkdtemp(prefix="kata-mem-trust-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def nobody_dir(shared: Path) -> Path:
    """A directory nobody owns (0755), for nobody's socket and files."""
    where = shared / "nobody"
    where.mkdir(mode=0o755)
    os.chown(where, NOBODY, NOGROUP)
    return where


@pytest.fixture
def listener(nobody_dir: Path) -> Iterator[Listener]:
    sock = Listener(nobody_dir / "qmp.sock")
    yield sock
    sock.stop()


def saved_request(sandbox: str, cfg: Path, backend: dict[str, str]) -> str:
    return json.dumps(
        {
            "schema": "kata-mem/shim-request/v1",
            "sandbox_id": sandbox,
            "event": "reconcile",
            "config": str(cfg),
            "containers": [{"id": "c1", "memory_limit_bytes": 256 << 20}],
            "backend": backend,
            "apply": True,
            "host": {"memory_bytes": 16 << 30, "cpus": 4},
        }
    )


RUNNING = json.dumps(
    {
        "schema": "kata-mem/journal/v1",
        "sandbox": "sb",
        "state": "running",
        "step": {
            "action": "plug_dimm",
            "device": "kmdimm0",
            "size": 256 << 20,
            "delta": 256 << 20,
            "total_after": 768 << 20,
        },
        "phase": "issued",
        "observed_mib": 512,
    }
)


def shim(cfg: Path, sandbox: str, sock: Path, event: str) -> tuple[int, Any]:
    request = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": sandbox,
        "event": event,
        "config": str(cfg),
        "containers": [{"id": "c1", "memory_limit_bytes": 256 << 20}],
        "backend": {"type": "qmp", "socket": str(sock)},
        "apply": True,
        "host": {"memory_bytes": 16 << 30, "cpus": 4},
    }
    r = kata_mem_process("shim", input=json.dumps(request))
    return r.returncode, json.loads(r.stdout)


def every_command(
    run_cli: Run, cfg: Path, sock: Path, state: Path, sandbox: str
) -> dict[str, CliResult]:
    """Each command that touches the state, on ``sandbox`` in ``state`` (``cfg`` names it)."""
    runs = {
        "apply": apply(run_cli, cfg, sock, state, sandbox, "--limit", "256Mi"),
        "apply --dry-run": apply(run_cli, cfg, sock, state, sandbox, "--dry-run"),
        "status": run_cli(
            "status", "--qmp", str(sock), "--sandbox", sandbox, "--state-dir", str(state)
        ),
        # The VM from the saved request, as GET /v1/sandboxes/ID finds it.
        "status --sandbox": run_cli("status", "--sandbox", sandbox, "--state-dir", str(state)),
        "status --all": run_cli("status", "--all", "--state-dir", str(state)),
        "reconcile": run_cli("reconcile", "--state-dir", str(state)),
    }
    for event in ("update", "delete"):
        code, doc = shim(cfg, sandbox, sock, event)
        message = doc["error"]["message"] if "error" in doc else json.dumps(doc)
        runs[f"shim {event}"] = CliResult(code, "", message)
    return runs


def assert_refused(runs: dict[str, CliResult], path: Path, mode: str, owner: str = OWNER) -> None:
    """Each run exited 3, naming the path, its owner and its mode (reconcile, which goes
    on after one sandbox's trouble, on that sandbox's line)."""
    for what, r in runs.items():
        assert r.code == 3, (what, r)
        assert f"{path} is {owner}, mode {mode}" in r.err + r.out, (what, r)


# -- the state directory ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "mode"),
    [(NOBODY, 0o777), (NOBODY, 0o755), (0, 0o777), (0, 0o770), (0, 0o757)],
    ids=["nobody-0777", "nobody-0755", "root-0777", "root-0770-group-writable", "root-0757"],
)
def test_a_state_dir_another_user_could_write_is_refused_by_every_command(
    run_cli: Run, qemu: QEMU, shared: Path, owner: int, mode: int
) -> None:
    fake, server = qemu
    state = shared / "state"
    state.mkdir()
    os.chown(state, owner, NOGROUP)
    os.chmod(state, mode)
    cfg = config_for(shared, state)
    before = snapshot(state)
    runs = every_command(run_cli, cfg, server.path, state, "sb")
    who = OWNER if owner == NOBODY else "owned by root (uid 0)"
    assert_refused(runs, state, f"{mode:04o}", who)
    assert snapshot(state) == before  # no marker, no sandbox directory, no lock
    assert fake.commands == []  # refused before any connection
    with pytest.raises(ConfigError, match=re.escape(f"{state} is {who}")):
        state_dir_state(state)  # what `serve` checks at start-up and for /healthz


def test_a_state_marker_nobody_wrote_is_refused(run_cli: Run, qemu: QEMU, shared: Path) -> None:
    fake, server = qemu
    state = shared / "state"
    state.mkdir(mode=0o777)
    state.chmod(0o777)
    marker = json.dumps({"schema": "kata-mem/state-dir/v1"})
    plant((state / STATE_MARKER, marker))
    state.chmod(0o700)  # root's now, and closed; the marker is still nobody's
    cfg = config_for(shared, state)
    before = snapshot(state)
    runs = every_command(run_cli, cfg, server.path, state, "sb")
    assert_refused(runs, state / STATE_MARKER, "0644")
    assert snapshot(state) == before
    assert fake.commands == []


def test_the_planted_attack_reconcile_never_connects_to_nobodys_socket(
    shared: Path, nobody_dir: Path, listener: Listener
) -> None:
    """The attack this file guards against: an empty state dir nobody owns (0777) is given to
    apply, then nobody plants a sandbox that reconcile would re-run against nobody's socket."""
    state = shared / "state"
    state.mkdir()
    os.chown(state, NOBODY, NOGROUP)
    os.chmod(state, 0o777)  # nobody's, open to all
    cfg = config_for(shared, state)
    r = kata_mem_process(
        "apply",
        *("--config", str(cfg), "--qmp", str(listener.path), "--sandbox", "sb"),
        *("--state-dir", str(state), "--limit", "256Mi", "--host-memory", "16Gi"),
    )
    assert r.returncode == 3 and f"{state} is {OWNER}, mode 0777" in r.stderr, r
    assert list(state.iterdir()) == []  # not adopted: no .kata-mem-state
    theirs = nobody_dir / "configuration.toml"
    plant((theirs, cfg.read_text()))
    plant(
        (state / STATE_MARKER, json.dumps({"schema": "kata-mem/state-dir/v1"})),
        (state / "sb", None),
        (
            state / "sb" / ".kata-mem-sandbox",
            json.dumps({"schema": "kata-mem/sandbox-dir/v1", "sandbox": "sb"}),
        ),
        (state / "sb" / "journal.json", RUNNING),
        (
            state / "sb" / "request.json",
            saved_request("sb", theirs, {"type": "qmp", "socket": str(listener.path)}),
        ),
    )
    before = snapshot(state)
    for argv in (("reconcile",), ("status", "--all"), ("reconcile", "--json")):
        r = kata_mem_process(*argv, "--state-dir", str(state))
        assert r.returncode == 3, (argv, r)
        assert f"{state} is {OWNER}, mode 0777" in r.stderr, (argv, r)
    assert listener.connections() == 0
    assert snapshot(state) == before


def test_a_state_dir_under_a_directory_nobody_owns_is_refused_and_not_made(
    run_cli: Run, qemu: QEMU, shared: Path, nobody_dir: Path
) -> None:
    fake, server = qemu
    cfg = config_for(shared, nobody_dir / "state")
    r = apply(run_cli, cfg, server.path, nobody_dir / "state", "sb", "--limit", "256Mi")
    assert r.code == 3 and f"{nobody_dir} is {OWNER}, mode 0755" in r.err, r
    assert "another user could replace the state directory through it" in r.err
    assert list(nobody_dir.iterdir()) == []
    assert fake.commands == []


def test_a_symlink_nobody_owns_on_the_way_is_refused(
    run_cli: Run, qemu: QEMU, shared: Path, tmp_path: Path
) -> None:
    fake, server = qemu
    real = tmp_path / "state"
    ensure_state_dir(real)  # kata-mem's own, and fine by itself
    sticky = shared / "tmp"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: nobody may add a name, not take away root's
    as_nobody("ln", "-s", str(real), str(sticky / "state"))
    cfg = config_for(shared, sticky / "state")
    before = snapshot(real)
    r = apply(run_cli, cfg, server.path, sticky / "state", "sb", "--limit", "256Mi")
    assert r.code == 3 and f"{sticky / 'state'} is a symlink {OWNER}" in r.err, r
    assert snapshot(real) == before and fake.commands == []
    # Root's own symlink in the same sticky directory is fine.
    (sticky / "mine").symlink_to(real)
    cfg = config_for(shared, sticky / "mine")
    r = apply(run_cli, cfg, server.path, sticky / "mine", "sb", "--limit", "256Mi")
    assert r.code == 0, r


def test_the_way_is_walked_as_the_kernel_resolves_it(
    shared: Path, nobody_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative paths, ``..`` after a symlink, symlink chains and loops: each directory
    the kernel would pass through is the one checked."""
    real = tmp_path / "real" / "state"
    ensure_state_dir(real)
    monkeypatch.chdir(tmp_path)
    assert state_dir_state("real/state") == "ours"
    assert state_dir_state("real/../real/./state") == "ours"
    # Root's own symlink, but it leads through nobody's directory.
    (nobody_dir / "state").mkdir()  # root's, inside nobody's: nobody can rename it away
    (shared / "via").symlink_to(nobody_dir / "state")
    with pytest.raises(ConfigError, match=re.escape(f"{nobody_dir} is {OWNER}, mode 0755")):
        state_dir_state(shared / "via")
    # ``..`` is taken from where the symlink led, as the kernel takes it: here, nobody's dir.
    (shared / "up").symlink_to(nobody_dir / "state")
    with pytest.raises(ConfigError, match=re.escape(f"{nobody_dir} is {OWNER}")):
        state_dir_state(shared / "up" / ".." / "state")
    # A chain of root's symlinks to root's directory is fine; a loop is said to be one.
    (shared / "a").symlink_to("b")
    (shared / "b").symlink_to(real)
    assert state_dir_state(shared / "a") == "ours"
    (shared / "loop1").symlink_to("loop2")
    (shared / "loop2").symlink_to("loop1")
    with pytest.raises(
        ConfigError, match=re.escape("cannot use it (Too many levels of symbolic links")
    ):
        state_dir_state(shared / "loop1")
    assert state_dir_state(shared / "nothing" / "here") == "absent"


def test_directories_kata_mem_creates_have_their_modes_whatever_the_umask(
    run_cli: Run, qemu: QEMU, tmp_path: Path
) -> None:
    _fake, server = qemu
    state = tmp_path / "a" / "b" / "state"
    cfg = config_for(tmp_path, state)
    old = os.umask(0)
    try:
        r = apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi")
    finally:
        os.umask(old)
    assert r.code == 0, r
    modes = {
        str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o7777)
        for p in (tmp_path / "a", tmp_path / "a" / "b", state, state / "sb")
    }
    assert modes == {"a": "0o755", "a/b": "0o755", "a/b/state": "0o700", "a/b/state/sb": "0o700"}
    files = {
        p.name: oct(p.stat().st_mode & 0o777)
        for p in (*state.iterdir(), *(state / "sb").iterdir())
        if p.is_file()
    }
    assert set(files.values()) == {"0o600"}, files


# -- inside root's state directory: sandbox directories and their files ------------------------


def _chown_nobody(path: Path) -> None:
    os.chown(path, NOBODY, NOGROUP, follow_symlinks=False)


@pytest.mark.parametrize(
    "what",
    [
        "sandbox dir nobody's",
        "sandbox dir 0777",
        "sandbox dir 0770",
        "marker nobody's",
        "journal nobody's",
        "journal 0666",
        "request nobody's",
        "lock nobody's",
    ],
)
def test_a_sandbox_another_user_could_have_written_is_refused(
    run_cli: Run, qemu: QEMU, tmp_path: Path, listener: Listener, what: str
) -> None:
    fake, server = qemu
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    # Each sandbox its own VM: a VM is sized by one sandbox's requests.
    other_vm = FakeQemu()
    other_server = FakeQmpServer(tmp_path / "other.sock", other_vm)
    assert apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi").code == 0
    assert apply(run_cli, cfg, other_server.path, state, "other", "--limit", "256Mi").code == 0
    sandbox = state / "sb"
    # The saved request names nobody's socket: were it read, reconcile would connect there.
    request = sandbox / "request.json"
    request.write_text(saved_request("sb", cfg, {"type": "qmp", "socket": str(listener.path)}))
    (sandbox / "journal.json").write_text(RUNNING)  # and it asks for a repair
    part, change = what.rsplit(" ", 1)
    path = {
        "sandbox dir": sandbox,
        "marker": sandbox / ".kata-mem-sandbox",
        "journal": sandbox / "journal.json",
        "request": request,
        "lock": sandbox / "lock",
    }[part]
    if change == "nobody's":
        _chown_nobody(path)
    else:
        path.chmod(int(change, 8))
    mode = f"{path.stat().st_mode & 0o7777:04o}"
    owner = OWNER if change == "nobody's" else "owned by root (uid 0)"
    commands_before = list(fake.commands)
    other_before = list(other_vm.commands)
    before = snapshot(state)
    runs = every_command(run_cli, cfg, listener.path, state, "sb")
    assert_refused(runs, path, mode, owner)
    # Reconcile fails that sandbox (exit 3) and goes on with the others.
    assert f"sb: failed: state_dir {state}: {path} is" in runs["reconcile"].out
    assert "other: retried: NoChange" in runs["reconcile"].out, runs["reconcile"]
    assert listener.connections() == 0

    def ours(shot: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in shot.items() if k != "." and not k.startswith("other")}

    assert ours(snapshot(state)) == ours(before)
    assert fake.commands == commands_before  # sb's VM: never reached
    visited = other_vm.commands[len(other_before) :]
    assert visited and "device_add" not in visited  # "other", which had nothing to do
    other_server.close()


def test_an_empty_sandbox_dir_others_can_write_is_not_adopted(
    run_cli: Run, qemu: QEMU, tmp_path: Path
) -> None:
    fake, server = qemu
    state = tmp_path / "state"
    ensure_state_dir(state)
    (state / "sb").mkdir()
    (state / "sb").chmod(0o777)  # left by a crash, say, and open to everyone since
    cfg = config_for(tmp_path, state)
    before = snapshot(state)
    r = apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi")
    assert r.code == 3 and f"{state / 'sb'} is owned by root (uid 0), mode 0777" in r.err, r
    assert snapshot(state) == before and fake.commands == []


def test_a_temporary_file_that_is_a_link_is_not_written_through(
    run_cli: Run, qemu: QEMU, tmp_path: Path
) -> None:
    """A temporary name kata-mem would use, already there as a hard link to another
    file: it is replaced, and the other file keeps its content."""
    _fake, server = qemu
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    assert apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi").code == 0
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    # run_cli runs in this process and thread: the name its journal write takes
    link = state / "sb" / temp_name("journal.json")
    os.link(victim, link)
    r = apply(run_cli, cfg, server.path, state, "sb", "--limit", "512Mi")
    assert r.code == 0, r
    assert victim.read_text() == "precious\n"
    assert not link.exists()  # the name was taken, and the link replaced, not written through
    assert json.loads((state / "sb" / "journal.json").read_text())["observed_mib"] == 1024


# -- libvirt URIs: local transports only, whatever wrote them -----------------------------------

BAD_URIS = [
    "qemu+ext:///system?command={script}",
    "qemu:///system?command={script}",
    "qemu+unix:///system?socket={socket}",
    "qemu+ssh://root@localhost/system?command={script}",
    "qemu+tcp://127.0.0.1/system",
    "qemu+tls://localhost/system?no_verify=1",
    "qemu:///embed?root={shared}",
    "test:///etc/passwd",
    "qemu://localhost/system",
]


@pytest.fixture
def ran(shared: Path) -> Callable[[], bool]:
    """A command for libvirt's ext transport that leaves a file behind if it is run."""
    script = shared / "ext.sh"
    script.write_text(f"#!/bin/sh\ntouch {shared / 'ran'}\n")
    script.chmod(0o755)
    return (shared / "ran").exists


def _uri(template: str, shared: Path, listener: Listener) -> str:
    return template.format(script=shared / "ext.sh", socket=listener.path, shared=shared)


@pytest.mark.parametrize("template", BAD_URIS)
def test_the_command_line_and_the_shim_refuse_a_libvirt_uri_that_is_not_local(
    run_cli: Run,
    shared: Path,
    tmp_path: Path,
    ran: Callable[[], bool],
    listener: Listener,
    template: str,
) -> None:
    uri = _uri(template, shared, listener)
    cfg = config_for(tmp_path, tmp_path / "state")
    for argv in (
        ("apply", "--config", str(cfg), "--limit", "256Mi", "--host-memory", "16Gi"),
        ("apply", "--config", str(cfg), "--dry-run", "--host-memory", "16Gi"),
        ("status", "--state-dir", str(tmp_path / "state")),
    ):
        r = run_cli(*argv, "--libvirt", uri, "--domain", "d", "--sandbox", "sb")
        assert not ran() and listener.connections() == 0, argv  # never opened
        assert r.code == 4, (argv, r)
        assert f"libvirt URI {json.dumps(uri)}: not a local connection; expected one of " in r.err
        assert "qemu:///system, qemu:///session, qemu+unix:///system" in r.err
    doc = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb",
        "event": "update",
        "config": str(cfg),
        "backend": {"type": "libvirt", "uri": uri, "domain": "d"},
        "apply": True,
    }
    shim = kata_mem_process("shim", input=json.dumps(doc))
    answer = json.loads(shim.stdout)
    assert (shim.returncode, answer["error"]["kind"]) == (4, "input"), answer
    assert answer["error"]["message"].startswith(
        f"request backend.uri: libvirt URI {json.dumps(uri)}"
    )
    assert not ran() and listener.connections() == 0
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("template", BAD_URIS[:3])
def test_reconcile_refuses_a_saved_libvirt_uri_that_is_not_local(
    run_cli: Run,
    shared: Path,
    tmp_path: Path,
    ran: Callable[[], bool],
    listener: Listener,
    template: str,
) -> None:
    """A saved request is input from disk: even root's own file in root's own state
    directory is checked before the URI in it is opened."""
    pytest.importorskip("libvirt", reason="libvirt-python is part of the test extra")
    uri = _uri(template, shared, listener)
    state = tmp_path / "state"
    sandbox = SandboxState(state, "lv")
    with sandbox.locked(0):
        sandbox.save(Record("lv", state="running"))
        sandbox.save_request(
            json.loads(
                saved_request(
                    "lv", tmp_path / "missing.toml", {"type": "libvirt", "uri": uri, "domain": "d"}
                )
            )
        )
    before = snapshot(state)
    r = run_cli("reconcile", "--state-dir", str(state))
    assert not ran() and listener.connections() == 0  # libvirt was never asked to open it
    assert r.code == 4, r
    assert r.out.startswith(
        f"lv: failed: {sandbox.request_path}: request backend.uri: libvirt URI {json.dumps(uri)}"
    ), r
    r = run_cli("status", "--all", "--state-dir", str(state), "--json")
    assert r.code == 0 and json.loads(r.out)["sandboxes"][0]["backend"] is None, r
    assert not ran() and listener.connections() == 0
    assert snapshot(state) == before


def test_the_local_libvirt_uris_are_accepted(run_cli: Run, tmp_path: Path) -> None:
    """The allowed forms pass the check (the test driver is opened for real)."""
    pytest.importorskip("libvirt", reason="libvirt-python is part of the test extra")
    r = run_cli(
        "status",
        "--libvirt",
        "test:///default",
        "--domain",
        "test",
        "--state-dir",
        str(tmp_path / "s"),
        "--json",
    )
    assert r.code == 0, r
    from kata_mem.core.endpoint import LIBVIRT_URIS, Endpoint

    for uri in LIBVIRT_URIS:
        assert Endpoint("libvirt", uri, "d").target == uri


def test_the_shipped_schema_allows_the_same_libvirt_uris() -> None:
    from importlib.resources import files

    from kata_mem.core.endpoint import LIBVIRT_URIS

    schema = json.loads(files("kata_mem").joinpath("schemas/shim-request.v1.json").read_text())
    libvirt = schema["properties"]["backend"]["oneOf"][2]["properties"]
    assert tuple(libvirt["uri"]["enum"]) == LIBVIRT_URIS


# -- configuration files ------------------------------------------------------------------


def _dropin_by_nobody(shared: Path, chosen: Path) -> Path:
    """A root configuration whose config.d nobody owns, with nobody's drop-in that turns
    shrink on, the headroom off and picks where root makes its state."""
    cfg = write_config(shared / "configuration.toml", {"default_memory": 512})
    dropins = shared / "config.d"
    dropins.mkdir()
    os.chown(dropins, NOBODY, NOGROUP)
    plant((dropins / "99-nobody.toml", f'[kata_mem]\nallow_shrink = true\nheadroom_min_mib = 0\nstate_dir = "{chosen}"\n'))  # fmt: skip
    return cfg


def test_a_drop_in_directory_nobody_owns_is_refused(run_cli: Run, shared: Path) -> None:
    # Before: config check exit 0 showing nobody's settings, and a shim request made root
    # create the state directory nobody chose.
    chosen = shared / "chosen-by-nobody" / "state"
    cfg = _dropin_by_nobody(shared, chosen)
    r = run_cli("config", "check", str(cfg))
    assert r.code == 3, r.out
    assert f"{cfg}: {shared}/config.d is {OWNER}, mode 0755; another user could" in r.err, r.err
    request = {
        "schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "update",
        "config": str(cfg), "backend": {"type": "qmp", "socket": "/nonexistent"}, "apply": True,
    }  # fmt: skip
    done = kata_mem_process("shim", input=json.dumps(request))
    assert (done.returncode, json.loads(done.stdout)["error"]["exit_code"]) == (3, 3)
    assert not chosen.parent.exists()


@pytest.mark.parametrize("how", ["owned by nobody", "writable by others", "in a directory others can write"])  # fmt: skip
@pytest.mark.parametrize("which", ["configuration", "drop-in"])
def test_a_configuration_file_another_user_could_write_is_refused(
    run_cli: Run, shared: Path, how: str, which: str
) -> None:
    where = shared / "etc"
    where.mkdir(mode=0o755)
    cfg = write_config(where / "configuration.toml", {"default_memory": 512})
    target = cfg
    if which == "drop-in":
        (where / "config.d").mkdir(mode=0o755)
        target = write_config(where / "config.d" / "50-max.toml", {"default_maxmemory": 4096})
    target.chmod(0o644)
    if how == "owned by nobody":
        os.chown(target, NOBODY, NOGROUP)
        why = f"{target}: {OWNER}, mode 0644; kata-mem runs as root"
    elif how == "writable by others":
        target.chmod(0o646)
        why = f"{target}: owned by root (uid 0), mode 0646; kata-mem runs as root"
    else:
        target.parent.chmod(0o777)
        named = cfg if which == "drop-in" else target  # the drop-ins' directory is the file's
        why = f"{named}: {target.parent} is owned by root (uid 0), mode 0777; another user"
    r = run_cli("preview", "--config", str(cfg), "--limit", "1Gi")
    assert r.code == 3 and why in r.err, r.err
    assert run_cli("config", "check", str(cfg)).code == 3


def test_another_user_reads_root_configuration_as_it_is(shared: Path) -> None:
    """The rule is root's: a user's own kata-mem reads root's files, and its own."""
    cfg = write_config(shared / "configuration.toml", {"default_memory": 512})
    cfg.chmod(0o644)
    r = subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "kata_mem", "config", "check", str(cfg)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr


def test_a_state_dir_refused_to_another_user_says_run_as_root(tmp_path: Path) -> None:
    # The usual cause of "Permission denied" on the node's root-owned state directory is a
    # command run without root: said so, rather than only "set another state_dir".
    tmp_path.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    before = sorted(os.listdir(state))
    done = subprocess.run(
        [
            *AS_NOBODY,
            sys.executable,
            "-m",
            "kata_mem",
            "status",
            "--all",
            "--state-dir",
            str(state),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    assert done.stderr == (
        f"kata-mem: error: state_dir {state}: cannot use it (Permission denied); nothing was "
        f"changed. kata-mem runs as root on a node, and this is uid {NOBODY}: run it as root "
        "(preview, host, config check and runtimeclass need no root), or set [kata_mem] "
        "state_dir (or the command's --state-dir) to a directory kata-mem created, an empty "
        "directory, or a path that does not exist yet\n"
    )
    assert sorted(os.listdir(state)) == before
