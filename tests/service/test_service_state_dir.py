"""``kata-mem serve`` and its state directory: refused at start-up when it is not
kata-mem's (nothing made), ``/healthz`` 503 while it cannot be used and ok again once
it can, and the default layout (the socket inside the state directory) working."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
from tests.support.service import LAUNCHER, serve_argv, start
from tests.support.shim import ERROR_SCHEMA, request


def _listing(where: Path) -> set[str]:
    return {str(p.relative_to(where)) for p in where.rglob("*")}


@pytest.mark.parametrize("kind", ["regular file", "non-empty directory kata-mem did not make"])
def test_a_state_dir_that_is_not_kata_mems_is_refused_at_start_up(
    tmp_path: Path, kind: str
) -> None:
    state = tmp_path / "state"
    if kind == "regular file":
        state.write_text("someone's")
    else:
        state.mkdir()
        (state / "theirs").write_text("someone's")
    before = _listing(tmp_path)
    argv = serve_argv("--socket", str(tmp_path / "kata-mem.sock"), "--state-dir", str(state))
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=20, check=False)
    assert proc.returncode == 3, proc.stderr
    assert f"state_dir {state}: " in proc.stderr and "Traceback" not in proc.stderr
    assert _listing(tmp_path) == before  # no socket, no lock


def test_healthz_is_503_while_the_state_dir_is_unusable(tmp_path: Path) -> None:
    svc = start(tmp_path)  # its state dir does not exist yet: fine, the first apply makes it
    try:
        assert not svc.state.exists()
        ok = svc.request("GET", "/healthz")
        assert (ok.status, ok.json()) == (200, {"status": "ok"})

        svc.state.write_text("not a directory")
        bad = svc.request("GET", "/healthz")
        doc = bad.json()
        jsonschema.validate(doc, ERROR_SCHEMA)
        assert (bad.status, doc["error"]["exit_code"]) == (503, 3)
        assert f"state_dir {svc.state}: is not a directory" in doc["error"]["message"]
        assert svc.request("GET", "/v1/node").status == 400  # what healthz warns of

        svc.state.unlink()
        svc.state.mkdir()
        (svc.state / "theirs").write_text("")
        assert svc.request("GET", "/healthz").status == 503

        (svc.state / "theirs").unlink()  # empty: kata-mem may adopt it
        assert svc.request("GET", "/healthz").status == 200
    finally:
        assert svc.stop() == 0, svc.stderr()


def _apply_request(tmp_path: Path, qmp: Path) -> dict[str, Any]:
    return request(
        sandbox_id="sb-here",
        config=str(small_vm_config(tmp_path)),
        apply=True,
        backend={"type": "qmp", "socket": str(qmp)},
        host={"memory_bytes": 16 << 30, "cpus": 4},
    )


def test_the_socket_may_live_in_the_state_dir_as_by_default(tmp_path: Path) -> None:
    """The defaults put both in /run/kata-mem: the socket, its lock and serve's record
    are kata-mem's entries of the state directory, neither someone else's nor sandboxes."""
    state = tmp_path / "run"
    state.mkdir(mode=0o755)
    svc = start(tmp_path, "--state-dir", str(state), sock=state / "kata-mem.sock")
    try:
        with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
            answer = svc.post(_apply_request(tmp_path, qmp.path))
        assert answer.status == 200, answer.body
        assert answer.json()["outcome"]["status"] == "Resized"
        assert svc.request("GET", "/healthz").status == 200
        node = svc.request("GET", "/v1/node")
        assert node.status == 200, node.body
        assert [row["sandbox"] for row in node.json()["sandboxes"]] == ["sb-here"]
        assert node.json()["skipped"] == []
    finally:
        assert svc.stop() == 0, svc.stderr()
    assert sorted(os.listdir(state)) == [".kata-mem-state", ".kata-mem.sock.service", "sb-here"]


def test_a_socket_systemd_made_in_the_state_dir_is_served(tmp_path: Path) -> None:
    state = tmp_path / "run"
    state.mkdir(mode=0o755)
    sock = state / "kata-mem.sock"
    argv = [sys.executable, "-c", LAUNCHER, str(sock), *serve_argv("--state-dir", str(state))]
    svc = start(tmp_path, sock=sock, argv=argv)
    try:
        assert svc.request("GET", "/healthz").status == 200
        assert svc.request("GET", "/v1/node").json()["skipped"] == []
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_another_socket_name_in_the_state_dir_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "run"
    state.mkdir(mode=0o755)
    argv = serve_argv("--socket", str(state / "other.sock"), "--state-dir", str(state))
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=20, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "kata-mem.sock" in proc.stderr
    assert os.listdir(state) == []


@pytest.mark.parametrize(
    "planted", ["owned by nobody", "group-writable", "for another sandbox", "a symlink"]
)
def test_a_saved_request_kata_mem_did_not_write_is_never_followed(
    tmp_path: Path, planted: str
) -> None:
    """GET /v1/sandboxes/ID connects to the VM its saved request names: only a request
    of this user's, that no one else may write, for that sandbox."""
    svc = start(tmp_path)
    try:
        with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
            req = _apply_request(tmp_path, qmp.path)
            assert svc.post(req).status == 200
        saved = svc.state / "sb-here" / "request.json"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as lure:
            lure.bind(str(tmp_path / "lure.sock"))
            lure.listen(4)  # a connection would wait in its backlog
            doc = {**req, "backend": {"type": "qmp", "socket": str(tmp_path / "lure.sock")}}
            if planted == "for another sandbox":
                doc["sandbox_id"] = "sb-other"
            if planted == "a symlink":
                (tmp_path / "elsewhere.json").write_text(json.dumps(doc))
                saved.unlink()
                saved.symlink_to(tmp_path / "elsewhere.json")
            else:
                saved.write_text(json.dumps(doc))
            if planted == "owned by nobody":
                os.chown(saved, 65534, 65534)
            if planted == "group-writable":
                saved.chmod(0o620)
            got = svc.request("GET", "/v1/sandboxes/sb-here")
            lure.setblocking(False)
            try:
                lure.accept()[0].close()
                followed = True
            except BlockingIOError:
                followed = False
        assert not followed, "the service connected to the socket the planted request names"
        assert (got.status, got.json()["error"]["exit_code"]) == (400, 3), got.body
        assert str(saved) in got.json()["error"]["message"]
    finally:
        assert svc.stop() == 0, svc.stderr()
