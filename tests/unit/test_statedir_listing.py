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
