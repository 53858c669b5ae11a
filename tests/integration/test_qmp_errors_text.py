"""What a user reads when the QMP socket is not what it should be: real unix-socket
servers that answer garbage, close at once, never greet, or reply with a QMP error.
Every message is one line that names the socket, says what was wrong and what to do,
and carries no Python artefacts (bytes reprs, empty exception texts, ``None``)."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.cli import CliResult
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST_ARGS
from tests.support.fake_qmp import FakeQemu, FakeQmpServer

Run = Callable[..., CliResult]


class Peer:
    """A unix-socket server that treats every client the same way: sends ``send``
    (if any) on accept, then closes at once or keeps the connection open silently."""

    def __init__(self, path: Path, send: bytes = b"", close: bool = True) -> None:
        self.path = path
        self._send, self._close = send, close
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(8)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            if self._send:
                conn.sendall(self._send)
            if self._close:
                conn.close()
            else:
                self._open.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._open:
            conn.close()
        self._sock.close()


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    peers: list[Peer] = []

    def start(send: bytes = b"", close: bool = True) -> Path:
        p = Peer(tmp_path / f"peer{len(peers)}.sock", send, close)
        peers.append(p)
        return p.path

    yield start
    for p in peers:
        p.close()


def error_line(r: CliResult, code: int = 6) -> str:
    assert r.code == code, r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    line = lines[0]
    assert line.startswith("kata-mem: error: QMP socket "), line
    for artefact in ("b'", 'b"', "\\x", "None", ": )", "()", "Traceback"):
        assert artefact not in line, (artefact, line)
    assert not line.rstrip().endswith(":"), line
    return line


def test_garbage_instead_of_a_greeting(run_cli: Run, peer: Callable[..., Path]) -> None:
    sock = peer(b"\x00\xffHTTP/1.1 400 Bad Request\r\n\r\n\xfe")
    line = error_line(run_cli("status", "--qmp", str(sock)))
    assert str(sock) in line
    assert "not a QMP greeting" in line and "HTTP/1.1 400 Bad Request" in line
    assert "-qmp unix:" in line  # what to do


def test_binary_that_is_not_utf8(run_cli: Run, peer: Callable[..., Path]) -> None:
    line = error_line(run_cli("status", "--qmp", str(peer(b"\x89PNG\r\n\x1a\n" * 8))))
    assert "not a QMP greeting" in line and "binary data" in line
    assert "codec can't decode" not in line


def test_json_that_is_not_a_greeting(run_cli: Run, peer: Callable[..., Path]) -> None:
    line = error_line(run_cli("status", "--qmp", str(peer(b'{"hello": 1}\r\n'))))
    assert "not a QMP greeting (it sent JSON)" in line


def test_closed_at_once(run_cli: Run, peer: Callable[..., Path]) -> None:
    line = error_line(run_cli("status", "--qmp", str(peer())))
    assert "Failed to establish session" not in line
    assert "closed the connection without a QMP greeting" in line


def test_never_greets(run_cli: Run, peer: Callable[..., Path]) -> None:
    line = error_line(run_cli("status", "--qmp", str(peer(close=False))))
    assert "TimeoutError" not in line
    assert "no QMP greeting within 5 s" in line and "QEMU serves one at a time" in line


@pytest.fixture
def qemu(tmp_path: Path) -> Iterator[tuple[FakeQemu, Path]]:
    fake = FakeQemu()
    with FakeQmpServer(tmp_path / "qmp.sock", fake) as srv:
        yield fake, srv.path


def test_error_reply_carries_its_class(run_cli: Run, qemu: tuple[FakeQemu, Path]) -> None:
    fake, sock = qemu
    fake.fail["query-memory-devices"] = ("CommandNotFound", "The command has not been found")
    line = error_line(run_cli("status", "--qmp", str(sock)), code=7)
    assert "query-memory-devices failed: CommandNotFound: The command has not been found" in line


def test_error_reply_without_description(run_cli: Run, qemu: tuple[FakeQemu, Path]) -> None:
    fake, sock = qemu
    fake.fail["query-memory-devices"] = ("GenericError", "")
    line = error_line(run_cli("status", "--qmp", str(sock)), code=7)
    assert "query-memory-devices failed: GenericError: (QEMU gave no description)" in line


def test_error_reply_in_a_step_is_not_doubled(
    run_cli: Run, qemu: tuple[FakeQemu, Path], tmp_path: Path
) -> None:
    from tests.support.configs import write_config

    fake, sock = qemu
    fake.fail["device_add"] = ("GenericError", "no free slots available")
    cfg = write_config(
        tmp_path / "c.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
        kata_mem={"state_dir": str(tmp_path / "state")},
    )
    r = run_cli(
        "apply", "--config", str(cfg), "--qmp", str(sock), "--limit", "256Mi",
        *HOST_ARGS, "--json",
    )  # fmt: skip
    message = json.loads(r.out)["message"]
    assert message.count("GenericError") == 1, message
    assert "device_add failed: GenericError: no free slots available" in message


def test_connection_lost_names_the_command(run_cli: Run, qemu: tuple[FakeQemu, Path]) -> None:
    fake, sock = qemu
    fake.drop_after.add("query-memory-devices")
    line = error_line(run_cli("status", "--qmp", str(sock)))
    assert "the VM went away during query-memory-devices" in line
    # The scripted server runs in this process: QEMU's pid is alive, the connection is gone.
    assert f"QEMU (pid {os.getpid()}) closed its monitor connection" in line
    for qmp_words in ("StateError", "ExecInterruptedError", "disconnect()", "Disconnected"):
        assert qmp_words not in line, line


def test_greeting_without_an_answer_to_capabilities(
    run_cli: Run, peer: Callable[..., Path]
) -> None:
    greeting = {
        "QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}}, "capabilities": []}
    }
    sock = peer(json.dumps(greeting).encode() + b"\r\n", close=False)
    line = error_line(run_cli("status", "--qmp", str(sock)))
    assert "no QMP greeting" not in line, line
    assert (
        "it sent a QMP greeting, then did not answer the capabilities negotiation "
        "(qmp_capabilities) within 5 s" in line
    ), line
