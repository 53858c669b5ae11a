"""What the kernel reports to ``kata-mem serve`` (:mod:`kata_mem.edges.watch`): inotify
events on a directory and a file, each with its watch's key, and a pidfd that becomes
readable when its process exits, on real files and a real process."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kata_mem.edges import watch


@pytest.fixture
def inotify() -> Iterator[watch.Inotify]:
    found = watch.Inotify()
    yield found
    found.close()


def _events(inotify: watch.Inotify) -> list[watch.Event]:
    assert select.select([inotify.fd], [], [], 5)[0], "no event within 5 s"
    return inotify.read()


def test_a_file_renamed_into_a_watched_directory_is_reported_with_its_key(
    inotify: watch.Inotify, tmp_path: Path
) -> None:
    inotify.add(str(tmp_path), watch.DIR_CHANGES, ("sandbox", "sb"))
    assert inotify.read() == []  # nothing yet, and the descriptor does not block
    tmp = tmp_path / ".journal.json.1.tmp"
    tmp.write_text("{}")
    tmp.rename(tmp_path / "journal.json")
    events = _events(inotify)
    assert {e.key for e in events} == {("sandbox", "sb")}
    moved = [e for e in events if e.mask & watch.IN_MOVED_TO]
    assert [e.name for e in moved] == ["journal.json"]
    (tmp_path / "journal.json").chmod(0o644)  # its mode: what a reader checks
    assert any(e.name == "journal.json" and e.mask & watch.IN_ATTRIB for e in _events(inotify))


def test_a_watched_file_removed_is_reported_and_its_watch_goes(
    inotify: watch.Inotify, tmp_path: Path
) -> None:
    sock = tmp_path / "qmp.sock"
    sock.write_text("")
    wd = inotify.add(str(sock), watch.FILE_GONE, ("socket", "sb"))
    sock.unlink()
    events = _events(inotify)
    assert any(e.key == ("socket", "sb") and e.mask & watch.IN_DELETE_SELF for e in events)
    assert any(e.mask & watch.IN_IGNORED for e in events)  # the kernel removed the watch
    inotify.remove(wd)  # removing it again is no error
    with pytest.raises(watch.WatchFailed):
        inotify.add(str(sock), watch.FILE_GONE, ("socket", "sb"))  # gone: ENOENT


def test_a_removed_watch_reports_nothing_more(inotify: watch.Inotify, tmp_path: Path) -> None:
    wd = inotify.add(str(tmp_path), watch.DIR_CHANGES, ("state", ""))
    inotify.remove(wd)
    (tmp_path / "x").write_text("")
    events = inotify.read()
    assert all(e.key is None for e in events), events  # at most its IN_IGNORED, keyless


def test_a_pidfd_is_readable_once_its_process_exits() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    try:
        fd = watch.pidfd(child.pid)
        if fd is None:
            pytest.skip("no pidfd_open here (Linux before 5.3, or not Linux)")
        try:
            assert select.select([fd], [], [], 0.2)[0] == []  # running: not readable
            assert child.stdin is not None
            child.stdin.close()  # it exits
            assert select.select([fd], [], [], 10)[0] == [fd]
        finally:
            os.close(fd)
    finally:
        child.wait(10)


def test_no_pidfd_for_a_process_that_is_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(10)  # reaped: its pid names no process
    assert watch.pidfd(child.pid) is None
