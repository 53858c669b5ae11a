"""A large plan-only ``POST /v1/shim`` leaves ``kata-mem serve`` answering others.

The service here is the real one with one change (:mod:`tests.support.held_answers`): the
answer to sandbox ``held`` waits until the test releases it. Whether others are answered
meanwhile is then a fact, not a race: a plan made on the event loop would leave
``/healthz`` unanswered until the release, which comes only after it."""

from __future__ import annotations

import json
import os
import select
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kata_mem.interfaces.service import INLINE_BODY_BYTES
from tests.support.held_answers import HELD
from tests.support.service import Service, read_response, serve_argv, start
from tests.support.shim import shim_request_doc
from tests.support.waits import wait_until


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Service, Path]]:
    """A service holding the answers of sandbox ``held`` at the gate directory it yields."""
    gate = tmp_path / "gate"
    gate.mkdir()
    where = tmp_path / "serve"
    where.mkdir()
    argv = serve_argv("--socket", str(where / "kata-mem.sock"), "--state-dir", str(where / "state"))
    argv[1:3] = ["-m", "tests.support.held_answers", str(gate)]
    env = {k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")}
    svc = start(where, argv=argv, env=env)
    yield svc, gate
    (gate / "release").touch()
    assert svc.stop() == 0, svc.stderr()


def test_others_are_answered_while_a_large_plan_is_being_made(
    held: tuple[Service, Path], tmp_path: Path
) -> None:
    service, gate = held
    # 19,000 containers in a body just under the 1 MiB a request may have: parsed and
    # planned in a worker thread, as any body larger than a shim's is.
    cfg = tmp_path / "kata.toml"
    cfg.write_text("[hypervisor.qemu]\n")
    containers = [{"id": f"c{i}", "memory_limit_bytes": 1 << 20} for i in range(19000)]
    body = json.dumps(shim_request_doc(cfg, sandbox_id=HELD, containers=containers)).encode()
    assert len(body) > INLINE_BODY_BYTES
    post = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        post.settimeout(60)
        post.connect(str(service.socket))
        post.sendall(
            b"POST /v1/shim HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_until((gate / "started").exists, "the large request's answer began", 60)
        try:
            health = service.request("GET", "/healthz", timeout=20)
            small = service.post(shim_request_doc(cfg), timeout=20)
        except OSError as exc:  # the loop is busy with the held answer
            pytest.fail(f"the service answered nothing while the large plan was made: {exc!r}")
        assert not select.select([post], [], [], 0)[0], "the held plan was answered"
        (gate / "release").touch()
        answer = read_response(post)
    finally:
        post.close()
    assert health.status == 200
    assert small.status == 200, small.body
    assert small.json()["plan"]["memory"]["requested_mib"] > 1024
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["plan"]["memory"]["requested_mib"] > 19000
