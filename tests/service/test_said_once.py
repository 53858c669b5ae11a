"""What ``kata-mem serve`` says once, not at every pass or answer, decides by values: a
state directory it cannot read by the error's class and fault, a host cgroup it cannot
see by the reason. Words that change with the same value are not said again; two values
in the same words each are. In-process: the loop's pass and the service's bookkeeping."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from kata_mem.core.errors import ConfigError, KataMemError
from kata_mem.core.model import Settings, Unseen
from kata_mem.edges import statedir
from kata_mem.edges.statefiles import StateDirError
from kata_mem.interfaces.reconcile_loop import ReconcileLoop
from kata_mem.interfaces.service import Service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(str(tmp_path / "state"), Settings(), None, {})
    yield svc
    svc.pool.shutdown()


def _said(caplog: pytest.LogCaptureFixture, start: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith(start)]


def test_a_state_dir_refused_for_the_same_fault_in_other_words_is_said_once(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kata_mem")
    state = Path(service.state_dir)
    state.mkdir()
    loop = ReconcileLoop(service)
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
    service: Service, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
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
    loop = ReconcileLoop(service)
    while errors:
        asyncio.run(loop.one_pass())
    assert _said(caplog, "reconcile: ") == [f"reconcile: {words}"] * 3


def test_a_host_cgroup_unseen_for_the_same_reason_in_other_words_is_said_once(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kata_mem")
    service.saw("sb", Unseen("vmm_pid_unknown", "hard_limit is 1 GiB but QEMU's pid ..."))
    service.saw("sb", Unseen("vmm_pid_unknown", "hard_limit is 2 GiB but QEMU's pid ..."))
    assert len(_said(caplog, "sandbox sb: host cgroup unseen")) == 1
    assert service.unseen["sb"].detail.startswith("hard_limit is 2 GiB")  # the newest words

    service.saw("sb", Unseen("unreadable", "hard_limit is 2 GiB but QEMU's pid ..."))
    said = _said(caplog, "sandbox sb: host cgroup unseen")
    assert len(said) == 2 and "(unreadable)" in said[1], said

    service.saw("sb", None)
    service.saw("sb", Unseen("unreadable", "memory.max unreadable"))  # unseen again: said
    assert len(_said(caplog, "sandbox sb: host cgroup unseen")) == 3
    assert service.unseen == {"sb": Unseen("unreadable", "memory.max unreadable")}
