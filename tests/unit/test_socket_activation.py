"""systemd socket activation (``kata_mem.interfaces.listener.activated``): the variables
come from the mapping it is given, for the process id it is given, and go from that
mapping on every path, as ``sd_listen_fds(1)`` unsets them (sd_listen_fds(3))."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.interfaces.listener import activated
from tests.support.paths import REPO

LISTEN = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


@pytest.fixture
def environ_untouched(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The process environment holds its own LISTEN_* values, which must stay as they are."""
    mine = {name: f"the process's own {name}" for name in LISTEN}
    for name, value in mine.items():
        monkeypatch.setenv(name, value)
    return mine


def test_a_refused_activation_takes_the_variables_from_the_mapping_given(
    environ_untouched: dict[str, str],
) -> None:
    env = {"LISTEN_PID": "4242", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "a:b", "PATH": "/bin"}
    with pytest.raises(ConfigError, match=r"^LISTEN_FDS=2: expected one socket"):
        activated(env, 4242)  # the pid given, not this process's, says whom they are for
    assert env == {"PATH": "/bin"}
    assert {name: os.environ[name] for name in LISTEN} == environ_untouched


def test_variables_for_another_process_are_not_used_and_still_removed(
    environ_untouched: dict[str, str],
) -> None:
    env = {"LISTEN_PID": "4242", "LISTEN_FDS": "1", "PATH": "/bin"}
    assert activated(env, 4243) is None
    assert env == {"PATH": "/bin"}
    assert {name: os.environ[name] for name in LISTEN} == environ_untouched


def test_no_variables_no_socket() -> None:
    env = {"PATH": "/bin"}
    assert activated(env, os.getpid()) is None
    assert env == {"PATH": "/bin"}


PASSED = """
import os, socket, sys
from kata_mem.interfaces.listener import activated
listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listening.bind(sys.argv[1])
listening.listen(1)
os.dup2(listening.fileno(), 3)
env = {"LISTEN_PID": str(os.getpid()), "LISTEN_FDS": "1", "LISTEN_FDNAMES": "kata-mem.socket"}
sock = activated(env, os.getpid())
print(sock.fileno(), sock.family == socket.AF_UNIX, sorted(env), os.get_inheritable(3))
"""


def test_the_passed_socket_is_taken_and_its_variables_go(tmp_path: os.PathLike[str]) -> None:
    # A process of its own: descriptor 3 is the test runner's here.
    r = subprocess.run(
        [sys.executable, "-c", PASSED, os.path.join(tmp_path, "passed.sock")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert (r.returncode, r.stdout) == (0, "3 True [] False\n"), r.stderr
