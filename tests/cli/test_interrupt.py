"""SIGINT (Ctrl-C) on a one-shot command: one line on stderr, the shim's error document,
exit 130, never a traceback (Python's KeyboardInterrupt, or asyncio's and qemu.qmp's
complaints about the coroutines it cut); what it leaves is what SIGTERM leaves, and
``kata-mem reconcile`` settles it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Union

import jsonschema
import pytest

from tests.support.cli import kata_mem_process
from tests.support.configs import HOST_ARGS, guest_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
from tests.support.shim import RESPONSE_SCHEMA, request
from tests.support.waits import wait_until

#: What a cut-off coroutine or an uncaught KeyboardInterrupt prints.
NOISE = ("Traceback", "KeyboardInterrupt", "Exception ignored", "never awaited", "destroyed")
#: read(2)'s number, for /proc/PID/syscall.
READ = {"x86_64": 0, "aarch64": 63}


def _start(*args: str, stdin: Union[int, IO[Any]] = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "kata_mem", *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
    )


@pytest.fixture
def silent_qmp(tmp_path: Path) -> Iterator[socket.socket]:
    """A unix socket that accepts and never greets: QEMU's monitor, stuck."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(tmp_path / "qmp.sock"))
        sock.listen(4)
        sock.settimeout(60)
        yield sock


def _interrupt(proc: subprocess.Popen[bytes], silent_qmp: socket.socket) -> tuple[bytes, str]:
    """SIGINT once ``proc`` waits for the monitor's greeting; its stdout and stderr."""
    conn, _ = silent_qmp.accept()  # kata-mem is connected, in qemu.qmp's event loop
    with conn:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    return out, err.decode()


def _one_line(err: str) -> str:
    assert not any(n in err for n in NOISE), err
    lines = err.splitlines()
    assert len(lines) == 1 and "error: interrupted (SIGINT)" in lines[0], err
    return lines[0]


def _shim_error(out: bytes) -> dict[str, object]:
    doc = json.loads(out)
    assert out.count(b"\n") == 1, out  # one document
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    error = doc["error"]
    assert (error["kind"], error["exit_code"]) == ("interrupted", 130), doc
    return dict(error)


def test_sigint_on_a_shim_waiting_for_the_vm_answers_with_a_document(
    tmp_path: Path, silent_qmp: socket.socket
) -> None:
    cfg = guest_config(tmp_path, virtio=False)
    doc = request(
        sandbox_id="hang",
        config=str(cfg),
        apply=True,
        backend={"type": "qmp", "socket": str(tmp_path / "qmp.sock")},
    )
    (tmp_path / "request.json").write_text(json.dumps(doc))
    with (tmp_path / "request.json").open("rb") as stdin:
        proc = _start("shim", stdin=stdin)
    out, err = _interrupt(proc, silent_qmp)
    assert proc.returncode == 130, err
    _shim_error(out)
    assert _one_line(err).startswith("kata-mem shim: error:")


def _reads_stdin(pid: int) -> bool:
    fields = Path(f"/proc/{pid}/syscall").read_text().split()
    return fields[:2] == [str(READ[os.uname().machine]), "0x0"]


@pytest.mark.skipif(os.uname().machine not in READ, reason="read(2)'s number not known here")
def test_sigint_on_a_shim_waiting_for_its_request_answers_with_a_document() -> None:
    proc = _start("--log-format", "json", "shim", stdin=subprocess.PIPE)  # kept open
    try:
        wait_until(lambda: _reads_stdin(proc.pid), "the shim reads its request")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    _shim_error(out)
    line = json.loads(err)  # the one line, in the format asked for
    assert (line["level"], line["kind"], line["exit_code"]) == ("error", "interrupted", 130)


def test_sigint_on_apply_stops_it_as_sigterm_would_and_reconcile_settles_it(
    tmp_path: Path, silent_qmp: socket.socket
) -> None:
    cfg = guest_config(tmp_path, virtio=False)
    qmp = str(tmp_path / "qmp.sock")
    args = ("--config", str(cfg), "--qmp", qmp, "--sandbox", "hang", "--limit", "1Gi")
    proc = _start("apply", *args, *HOST_ARGS)
    out, err = _interrupt(proc, silent_qmp)
    assert (proc.returncode, out) == (130, b""), err
    assert _one_line(err).startswith("kata-mem: error:")
    # Left as a kill leaves it (the call never reached the VM: no journal); the VM's
    # socket is gone, and reconcile forgets the sandbox.
    state = tmp_path / "state"
    silent_qmp.close()
    os.unlink(qmp)
    done = kata_mem_process("reconcile", "--state-dir", str(state))
    assert done.returncode == 0, done.stderr
    assert not (state / "hang").exists(), done.stdout


def _journal_phase(sandbox: Path) -> object:
    """The phase the sandbox's journal records, or None while there is no whole journal."""
    try:
        return json.loads((sandbox / "journal.json").read_text()).get("phase")
    except (OSError, ValueError):
        return None


def test_sigint_mid_step_leaves_a_journal_the_next_apply_settles(tmp_path: Path) -> None:
    """Cut while the guest has not confirmed a DIMM insert: the journal shows the step
    in flight, and the next apply settles it from the VM and completes the resize."""
    qemu = FakeQemu(guest_confirms=False)
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as server:
        cfg = guest_config(tmp_path, virtio=False, timeout=60)
        args = ("--config", str(cfg), "--qmp", str(server.path), "--sandbox", "sb")
        proc = _start("apply", *args, "--limit", "256Mi", *HOST_ARGS)
        try:
            # Cut once the journal says the DIMM's device_add was answered: QEMU having
            # received it is earlier, while kata-mem may still hold the step as an intent.
            wait_until(
                lambda: _journal_phase(tmp_path / "state" / "sb") == "issued",
                "apply records the DIMM's device_add as issued",
                timeout=60,
            )
            assert "device_add" in qemu.commands
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert (proc.returncode, out) == (130, b""), err
        _one_line(err.decode())
        journal = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
        assert (journal["state"], journal["phase"], journal["step"]["action"]) == (
            "running",
            "issued",
            "plug_dimm",
        ), journal
        qemu.guest_confirms = True
        done = kata_mem_process("apply", *args, "--limit", "256Mi", *HOST_ARGS, "--json")
        assert done.returncode == 0, done.stderr
        outcome = json.loads(done.stdout)
        assert (outcome["status"], outcome["observed_mib"]) == ("NoChange", 768), outcome
        settled = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
        assert (settled["state"], settled["step"]) != ("running", journal["step"]), settled


def _terminate(proc: subprocess.Popen[bytes], silent_qmp: socket.socket) -> tuple[bytes, str]:
    """SIGTERM once ``proc`` waits for the monitor's greeting; its stdout and stderr."""
    conn, _ = silent_qmp.accept()
    with conn:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    return out, err.decode()


def _terminated_line(err: str) -> str:
    assert not any(n in err for n in NOISE), err
    lines = err.splitlines()
    assert len(lines) == 1 and "error: terminated (SIGTERM): stopped where it was" in lines[0], err
    return lines[0]


def test_sigterm_on_a_shim_answers_with_a_document_as_sigint_does(
    tmp_path: Path, silent_qmp: socket.socket
) -> None:
    # What orchestrators send: before, the shim ended silently with 143 and no document,
    # so its runtime had no answer to return.
    cfg = guest_config(tmp_path, virtio=False)
    doc = request(
        sandbox_id="hang",
        config=str(cfg),
        apply=True,
        backend={"type": "qmp", "socket": str(tmp_path / "qmp.sock")},
    )
    (tmp_path / "request.json").write_text(json.dumps(doc))
    with (tmp_path / "request.json").open("rb") as stdin:
        proc = _start("shim", stdin=stdin)
    out, err = _terminate(proc, silent_qmp)
    assert proc.returncode == 143, err
    answer = json.loads(out)
    assert out.count(b"\n") == 1, out
    jsonschema.validate(answer, RESPONSE_SCHEMA)
    assert (answer["error"]["kind"], answer["error"]["exit_code"]) == ("terminated", 143)
    assert _terminated_line(err).startswith("kata-mem shim: error:")


def test_sigterm_on_apply_is_one_line_and_143(tmp_path: Path, silent_qmp: socket.socket) -> None:
    cfg = guest_config(tmp_path, virtio=False)
    qmp = str(tmp_path / "qmp.sock")
    args = ("--config", str(cfg), "--qmp", qmp, "--sandbox", "hang", "--limit", "1Gi")
    proc = _start("--log-format", "json", "apply", *args, *HOST_ARGS)
    out, err = _terminate(proc, silent_qmp)
    assert (proc.returncode, out) == (143, b""), err
    line = json.loads(err)
    assert (line["level"], line["kind"], line["exit_code"]) == ("error", "terminated", 143)
