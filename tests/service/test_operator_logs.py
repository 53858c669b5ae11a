"""What an operator of ``kata-mem serve`` sees: ``--config`` is the
configuration of every request that names none, a start-up line without ``-v``, and one
line per answered request naming its sandbox, event, caller, outcome and duration (JSON
fields in ``--log-format json``); and what it says once, not at every pass or answer,
decided by values: a state directory it cannot read by the error's class and fault, a host
cgroup it cannot see by the reason. Words that change with the same value are not said
again; two values in the same words each are (in-process: the loop's pass and the
service's bookkeeping)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kata_mem.core.errors import ConfigError, KataMemError
from kata_mem.core.model import Settings, Unseen
from kata_mem.edges import statedir
from kata_mem.edges.statefiles import StateDirError
from kata_mem.interfaces.reconcile_loop import ReconcileLoop
from kata_mem.interfaces.service import Service as Serving
from tests.support.paths import REPO
from tests.support.service import Service, start
from tests.support.waits import wait_until

EXAMPLE = REPO / "examples" / "requests" / "update.json"
BUNDLED = REPO / "configs" / "configuration-qemu.toml"


def env_without_kata() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")}


def quiet_serve(where: Path, *args: str) -> Service:
    """``kata-mem [GLOBAL] serve`` as an operator starts it: no ``-v``."""
    sock, state = where / "kata-mem.sock", where / "state"
    split = args.index("serve")
    argv = [sys.executable, "-m", "kata_mem", *args[:split], "serve", "--socket", str(sock)]
    argv += ["--state-dir", str(state), *args[split + 1 :]]
    return start(where, sock=sock, argv=argv, env=env_without_kata())


def lines_with(svc: Service, needle: str) -> list[str]:
    return wait_until(
        lambda: [line for line in svc.stderr().splitlines() if needle in line],
        lambda: f"serve logs {needle!r}: {svc.stderr()}",
    )


def test_serve_config_is_the_configuration_of_requests_without_one(tmp_path: Path) -> None:
    """The shipped example request names no configuration; there is no Kata installation
    here (the bundled one is given with --config, relative as an operator types it)."""
    assert json.loads(EXAMPLE.read_text()).get("config") is None
    svc = quiet_serve(tmp_path, "serve", "--config", os.path.relpath(BUNDLED, REPO))
    try:
        answer = svc.post(EXAMPLE.read_bytes())
        assert answer.status == 200, answer.body
        assert answer.json()["plan"]["config"]["path"] == str(BUNDLED)
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_serve_logs_its_start_and_each_answer_without_v(tmp_path: Path) -> None:
    svc = quiet_serve(tmp_path, "serve", "--config", str(BUNDLED))
    try:
        (started,) = lines_with(svc, "listening on")
        assert started.startswith("kata-mem: INFO: kata-mem 0.1.0 listening on ")
        assert f"configuration {BUNDLED}" in started
        assert svc.post(EXAMPLE.read_bytes()).status == 200
        bad = json.loads(EXAMPLE.read_text())
        bad.update(sandbox_id="sb-bad", config=str(tmp_path / "missing.toml"))
        assert svc.post(bad).status == 400
        (planned,) = lines_with(svc, "sandbox sb-1: ")
        assert "sandbox sb-1: update (plan) from uid 0 gid 0 pid " in planned
        assert ": planned 2816 MiB, exit 0, " in planned and planned.endswith(" ms")
        (refused,) = lines_with(svc, "sandbox sb-bad: ")
        assert ": error config, exit 3, " in refused
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_in_json_mode_each_answer_is_one_object_with_its_fields(tmp_path: Path) -> None:
    svc = quiet_serve(tmp_path, "--log-format", "json", "serve", "--config", str(BUNDLED))
    try:
        assert svc.post(EXAMPLE.read_bytes()).status == 200
        (line,) = lines_with(svc, '"sandbox": "sb-1"')
        doc = json.loads(line)
        assert doc["level"] == "info" and doc["logger"] == "kata_mem.interfaces.service"
        assert (doc["event"], doc["mode"], doc["exit_code"]) == ("update", "plan", 0)
        assert doc["outcome"] == "planned 2816 MiB"
        assert isinstance(doc["duration_ms"], (int, float)) and doc["duration_ms"] >= 0
        assert isinstance(doc["peer"], str) and doc["peer"]
        started = [json.loads(x) for x in svc.stderr().splitlines() if "listening on" in x]
        assert len(started) == 1 and started[0]["level"] == "info"
    finally:
        assert svc.stop() == 0, svc.stderr()


# -- said once ------------------------------------------------------------------------------


@pytest.fixture
def in_process(tmp_path: Path) -> Iterator[Serving]:
    svc = Serving(str(tmp_path / "state"), Settings(), None, {})
    yield svc
    svc.pool.shutdown()


def _said(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


def test_a_state_dir_refused_for_the_same_fault_in_other_words_is_said_once(
    in_process: Serving, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kata_mem")
    state = Path(in_process.state_dir)
    state.mkdir()
    loop = ReconcileLoop(in_process)
    state.chmod(0o777)  # others may write it: refused
    asyncio.run(loop.one_pass())
    state.chmod(0o775)  # the group still may: refused, its mode in the words changed
    asyncio.run(loop.one_pass())
    said = _said(caplog, "reconcile: ")
    assert len(said) == 1 and "mode 0777" in said[0], said

    state.chmod(0o700)
    state.rmdir()
    state.write_text("not a directory")  # another fault
    asyncio.run(loop.one_pass())
    asyncio.run(loop.one_pass())
    said = _said(caplog, "reconcile: ")
    assert len(said) == 2 and "is not a directory" in said[1], said


def test_state_dir_errors_in_the_same_words_are_each_said(
    in_process: Serving, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="kata_mem")
    words = "state_dir /run/kata-mem: cannot read it (Input/output error)"
    errors: list[KataMemError] = [
        StateDirError(words, "unreadable"),
        StateDirError(words, "unreadable"),  # the same: not said again
        StateDirError(words, "unopenable"),
        ConfigError(words),
        ConfigError(words),
    ]

    def listing(_: object) -> statedir.Listing:
        raise errors.pop(0)

    monkeypatch.setattr(statedir, "list_state_dir", listing)
    loop = ReconcileLoop(in_process)
    while errors:
        asyncio.run(loop.one_pass())
    assert _said(caplog, "reconcile: ") == [f"reconcile: {words}"] * 3


def test_a_host_cgroup_unseen_for_the_same_reason_in_other_words_is_said_once(
    in_process: Serving, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kata_mem")
    in_process.saw("sb", Unseen("vmm_pid_unknown", "hard_limit is 1 GiB but QEMU's pid ..."))
    in_process.saw("sb", Unseen("vmm_pid_unknown", "hard_limit is 2 GiB but QEMU's pid ..."))
    assert len(_said(caplog, "sandbox sb: host cgroup unseen")) == 1
    assert in_process.unseen["sb"].detail.startswith("hard_limit is 2 GiB")  # the newest words

    in_process.saw("sb", Unseen("unreadable", "hard_limit is 2 GiB but QEMU's pid ..."))
    said = _said(caplog, "sandbox sb: host cgroup unseen")
    assert len(said) == 2 and "(unreadable)" in said[1], said

    in_process.saw("sb", None)
    in_process.saw("sb", Unseen("unreadable", "memory.max unreadable"))  # unseen again: said
    assert len(_said(caplog, "sandbox sb: host cgroup unseen")) == 3
    assert in_process.unseen == {"sb": Unseen("unreadable", "memory.max unreadable")}


def test_the_safety_net_reads_a_change_no_event_reported(in_process: Serving) -> None:
    """A full pass after the first reads again what moved though the kernel said nothing (a
    state directory mounted over, a lost event): here the event was read and dropped. The
    view lists the directory itself, so a sandbox made meanwhile is found too."""
    from kata_mem.core.record import Record
    from kata_mem.edges.journal import SandboxState

    mib = 1 << 20
    state = Path(in_process.state_dir)

    def journal(name: str, observed: int) -> None:
        sandbox = SandboxState(state, name)
        with sandbox.locked(0):
            sandbox.save(Record(name, observed=observed * mib))

    journal("sb", 512)
    loop = ReconcileLoop(in_process)

    async def body() -> None:
        loop.view.start(asyncio.get_running_loop(), lambda: None)
        try:
            await loop.one_pass()  # the first: every sandbox read and visited
            journal("sb", 1024)
            journal("new", 256)
            loop.view.drain()
            loop.view.dirty.clear()  # the events, lost
            await loop.step()
            files = loop.view.entries["sb"].files
            assert files is not None and files.record.observed == 512 * mib  # not seen
            await loop.one_pass()
            files = loop.view.entries["sb"].files
            assert files is not None and files.record.observed == 1024 * mib
            assert "new" in loop.view.entries and loop.full_passes == 2
        finally:
            loop.view.close()

    asyncio.run(body())
