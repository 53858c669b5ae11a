"""One owner of each VM's memory among kata-mem's sandboxes: a sandbox's first request whose
backend leads to a VM another sandbox of the state directory already sizes is refused as bad
input (exit 4, ``InvalidArgument`` for an ``update-sandbox``), before anything is sent to the
VM or written; with a fake QEMU on a real unix socket, and ``kata-mem shim`` as a real process.

Before this rule, an ``update-sandbox`` for a sandbox kata-mem did not know was applied to
another sandbox's VM and reported ``Resized``, leaving two journals that each believed they
sized it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cli import kata_mem_process
from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer

MiB = 1 << 20


def shim(doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    r = kata_mem_process("shim", input=json.dumps(doc))
    assert r.stdout.strip(), r.stderr
    out: dict[str, Any] = json.loads(r.stdout)
    return r.returncode, out


def test_a_new_sandbox_cannot_resize_another_sandboxs_vm(tmp_path: Path) -> None:
    cfg = small_vm_config(tmp_path)
    state = tmp_path / "state"
    with cfg.open("a") as f:
        f.write(f'state_dir = "{state}"\n')
    sock = tmp_path / "qmp.sock"
    qemu = FakeQemu()
    base = {
        "schema": "kata-mem/shim-request/v1",
        "config": str(cfg),
        "backend": {"type": "qmp", "socket": str(sock)},
        "apply": True,
        "host": {"memory_bytes": 16 << 30, "cpus": 4},
    }
    update = {**base, "event": "update", "containers": [{"id": "c", "memory_limit_bytes": 1 << 30}]}
    resize = {
        **base,
        "event": "update-sandbox",
        "containers": [],
        "sandbox_resources": {"memory_limit_bytes": 2 << 30},
        "overhead": {"memory_limit_bytes": 256 << 20},
    }
    with FakeQmpServer(sock, qemu):
        code, doc = shim({**update, "sandbox_id": "sb1"})
        assert (code, doc["outcome"]["status"]) == (0, "Resized"), doc
        plugged = list(qemu.devices)
        for request in (update, resize):
            code, doc = shim({**request, "sandbox_id": "sb2"})
            assert (code, doc["error"]["kind"]) == (4, "input"), doc
            assert doc["error"]["message"] == (
                f"backend: QMP {sock} leads to the VM of sandbox 'sb1' (its saved request), and "
                "this is the first request of sandbox 'sb2': a VM is sized from one sandbox's "
                "requests. Send it as sandbox 'sb1', or, if that sandbox is gone, forget it "
                "first (event delete)"
            )
        assert doc["cri"]["code"] == "InvalidArgument"
        assert list(qemu.devices) == plugged  # nothing was sent to the VM
        assert sorted(p.name for p in state.iterdir() if not p.name.startswith(".")) == ["sb1"]
        # Its owner still sizes it; once that sandbox is forgotten, another may.
        code, doc = shim({**update, "sandbox_id": "sb1"})
        assert (code, doc["outcome"]["status"]) == (0, "NoChange"), doc
        code, doc = shim({**base, "event": "delete", "sandbox_id": "sb1", "containers": []})
        assert code == 0, doc
        code, doc = shim({**update, "sandbox_id": "sb2"})
        assert (code, doc["outcome"]["status"]) == (0, "NoChange"), doc
