"""A large plan-only ``POST /v1/shim`` leaves ``kata-mem serve`` answering others."""

from __future__ import annotations

import ctypes
import json
import os
import select
import socket
from pathlib import Path

from tests.support.service import Service, read_response
from tests.support.shim import shim_request_doc

#: inotify(7): an event when a watched file is opened.
IN_OPEN = 0x20


def opened(path: Path) -> int:
    """A descriptor that becomes readable once some process opens ``path`` (inotify)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.inotify_init1(os.O_CLOEXEC))
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(path), IN_OPEN) < 0:
        raise OSError(ctypes.get_errno(), "inotify")
    return fd


def test_healthz_is_answered_while_a_large_plan_is_being_made(
    service: Service, tmp_path: Path
) -> None:
    # 19,000 containers in a body just under the 1 MiB a request may have: about a
    # second of planning, most of it after the configuration is read.
    cfg = tmp_path / "kata.toml"
    cfg.write_text("[hypervisor.qemu]\n")
    containers = [{"id": f"c{i}", "memory_limit_bytes": 1 << 20} for i in range(19000)]
    body = json.dumps(shim_request_doc(cfg, containers=containers)).encode()
    watch = opened(cfg)
    post = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        post.settimeout(60)
        post.connect(str(service.socket))
        post.sendall(
            b"POST /v1/shim HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        # The service has parsed the request and is planning it once it opens the
        # configuration: /healthz is answered before the plan is.
        assert select.select([watch], [], [], 60)[0], "the service never read the configuration"
        health = service.request("GET", "/healthz", timeout=60)
        planned = bool(select.select([post], [], [], 0)[0])
        answer = read_response(post)
    finally:
        post.close()
        os.close(watch)
    assert health.status == 200
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["plan"]["memory"]["requested_mib"] > 19000
    assert not planned, "the plan was answered before /healthz: the loop was busy planning"
