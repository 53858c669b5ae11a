"""``kata_mem.edges.locks.same_file``: whether a path is still the file open as a
descriptor, the proof behind the sandbox lock, the state directory's listing and serve's
socket lock."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kata_mem.edges.locks import same_file


@pytest.fixture
def held(tmp_path: Path) -> Iterator[int]:
    fd = os.open(tmp_path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)


def test_the_file_at_the_path_is_the_one_held(tmp_path: Path, held: int) -> None:
    assert same_file(held, tmp_path / "lock")
    assert same_file(held, str(tmp_path / "lock"))  # serve's paths are strings


def test_a_file_moved_away_or_replaced_is_not(tmp_path: Path, held: int) -> None:
    os.rename(tmp_path / "lock", tmp_path / "moved")
    assert not same_file(held, tmp_path / "lock")
    (tmp_path / "lock").write_text("")
    assert not same_file(held, tmp_path / "lock")


def test_a_path_that_cannot_be_looked_at_is_not(tmp_path: Path, held: int) -> None:
    # A directory on the way replaced by a file (ENOTDIR): not shown to be the file held.
    (tmp_path / "dir").write_text("")
    assert not same_file(held, tmp_path / "dir" / "lock")
