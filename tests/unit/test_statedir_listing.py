"""A state directory with its marker is known as kata-mem's without being listed: on a
node with a thousand sandboxes, every apply and status asks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.edges.statedir import ensure_state_dir, state_dir_state
from kata_mem.edges.statefiles import STATE_MARKER


def _count_listings(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The directories listed from now on (each still listed, by the real call)."""
    listed: list[object] = []
    real = os.listdir

    def listdir(path: object = ".") -> list[str]:
        listed.append(path)
        return real(path)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(os, "listdir", listdir)
    return listed


def test_a_marked_state_dir_is_not_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    ensure_state_dir(state)
    for i in range(3):
        (state / f"sb-{i}").mkdir()
    listed = _count_listings(monkeypatch)
    assert state_dir_state(state) == "ours"
    assert listed == []


def test_without_a_marker_it_is_listed_to_tell_empty_from_foreign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    listed = _count_listings(monkeypatch)
    assert state_dir_state(state) == "empty"
    (state / "theirs").write_text("")
    with pytest.raises(ConfigError, match="did not create"):
        state_dir_state(state)
    assert len(listed) == 2
    # A marker that is not kata-mem's (another schema) is no marker: still refused.
    (state / "theirs").unlink()
    (state / STATE_MARKER).write_text('{"schema": "someone-else/v1"}')
    with pytest.raises(ConfigError, match="did not create"):
        state_dir_state(state)


def test_calls_that_set_up_one_state_dir_at_once_all_succeed(tmp_path: Path) -> None:
    """The first requests of a node, in serve's threads, each set up the state directory
    that does not exist yet: none fails (it did: one thread's temporary marker was removed
    by another of the same pid, and a directory made between two looks was taken for a
    symlink to nothing), and the directory is kata-mem's."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    for i in range(30):
        state = tmp_path / f"run{i}" / "state"
        start = threading.Barrier(8)

        def set_up(start: threading.Barrier, state: Path) -> None:
            start.wait()
            ensure_state_dir(state)

        with ThreadPoolExecutor(8) as pool:
            for done in [pool.submit(set_up, start, state) for _ in range(8)]:
                done.result()  # raises what the call raised
        assert state_dir_state(state) == "ours"
        assert sorted(os.listdir(state)) == [STATE_MARKER]  # no temporary file left


def test_two_threads_never_take_one_temporary_name() -> None:
    """A temporary name is its process's and its thread's: a thread that finds one there
    takes it for a crashed call's and removes it, which must never be another live call's."""
    import threading

    from kata_mem.edges.statefiles import TEMP, temp_name

    other: list[str] = []
    thread = threading.Thread(target=lambda: other.append(temp_name("journal.json")))
    thread.start()
    thread.join()
    mine = temp_name("journal.json")
    assert other[0] != mine
    assert TEMP.fullmatch(mine) and TEMP.fullmatch(other[0])
    assert TEMP.fullmatch(".journal.json.42.tmp")  # as an older kata-mem named it


def test_a_state_dir_made_between_two_looks_is_looked_at_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another call makes the state directory just after this one found nothing there: it
    is looked at again (here: empty), not called a symlink to nothing."""
    state = tmp_path / "state"
    real_open = os.open
    made: list[bool] = []

    def open_as_another_call_makes_it(path: object, flags: int, *args: object, **kw: object) -> int:
        if path == state and not made:
            made.append(True)
            try:
                return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]
            finally:
                os.mkdir(state, 0o700)  # the other call, meanwhile
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", open_as_another_call_makes_it)
    assert state_dir_state(state) == "empty"
    assert made == [True]
