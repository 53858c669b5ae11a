"""A sandbox directory another user could have written is refused with the error that
says so, a value (:class:`~kata_mem.edges.statefiles.StateDirError`, fault ``refused``),
kept from where it is found to where it is raised or listed; "no refusal" is None, never
an empty text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kata_mem.edges.journal import SandboxState
from kata_mem.edges.statedir import ensure_state_dir, list_state_dir, sandbox_dir
from kata_mem.edges.statefiles import SANDBOX_MARKER, StateDirError


def _mode_message(state: Path, path: Path, mode: int) -> str:
    return f"state_dir {state}: {path} is owned by root (uid 0), mode {mode:04o}; "


@pytest.fixture
def state(tmp_path: Path) -> Path:
    root = tmp_path / "state"
    ensure_state_dir(root)
    return root


def _ours(state: Path, name: str = "sb") -> Path:
    """A sandbox directory as kata-mem makes it."""
    with SandboxState(state, name).locked(5.0) as got:
        assert got
    return state / name


def test_no_refusal_is_none(state: Path) -> None:
    assert sandbox_dir(state, "sb") == ("absent", None)
    (state / "sb").mkdir(mode=0o700)
    assert sandbox_dir(state, "sb") == ("empty", None)
    _ours(state)
    assert sandbox_dir(state, "sb") == ("ours", None)


@pytest.mark.parametrize("what", ["directory", "marker"])
def test_a_sandbox_others_could_write_is_refused_with_its_error(state: Path, what: str) -> None:
    directory = _ours(state)
    path = directory if what == "directory" else directory / SANDBOX_MARKER
    os.chmod(path, 0o770)
    found, refused = sandbox_dir(state, "sb")
    assert found == "refused" and isinstance(refused, StateDirError)
    assert refused.fault == "refused"
    assert refused.message.startswith(_mode_message(state, path, 0o770))
    sandbox = SandboxState(state, "sb")
    for call in (sandbox.owned, lambda: sandbox.remove(1.0)):
        with pytest.raises(StateDirError) as info:
            call()
        assert (info.value.fault, info.value.message) == ("refused", refused.message)
    listed = list_state_dir(state).refused
    assert [(name, why.fault, why.message) for name, why in listed] == [
        ("sb", "refused", refused.message)
    ]


def test_an_empty_sandbox_dir_others_can_write_is_not_adopted(state: Path) -> None:
    (state / "sb").mkdir()
    os.chmod(state / "sb", 0o777)
    found, refused = sandbox_dir(state, "sb")
    assert found == "foreign" and refused is not None and refused.fault == "refused"
    sandbox = SandboxState(state, "sb")
    assert not sandbox.owned()  # not kata-mem's: no error to read it
    with pytest.raises(StateDirError) as info, sandbox.locked(1.0):
        pass
    assert info.value.message == refused.message
    assert info.value.message.startswith(_mode_message(state, state / "sb", 0o777))
    assert os.listdir(state / "sb") == []


def test_a_sandbox_dir_replaced_while_read_is_said_so(
    state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process than kata-mem moves the directory away while it is read (kata-mem's
    # own calls wait for the node lock): it was made by neither, so not "not created by
    # kata-mem", and nothing is changed.
    from kata_mem.edges import statedir

    directory = _ours(state)
    look = statedir._look

    def moved_while_read(root: Path, sandbox: str, fd: int) -> object:
        found = look(root, sandbox, fd)
        os.rename(directory, state / "elsewhere")
        return found

    monkeypatch.setattr(statedir, "_look", moved_while_read)
    with pytest.raises(StateDirError) as info, SandboxState(state, "sb").locked(1.0):
        pass
    assert info.value.message == (
        f"state_dir {state}: {directory} was removed or replaced while kata-mem read it "
        "(another process than kata-mem: kata-mem's own calls wait for its lock); nothing "
        "was changed. Try again"
    )
    assert not directory.exists() and sorted(os.listdir(state / "elsewhere")) == sorted(
        [SANDBOX_MARKER, "lock"]
    )
