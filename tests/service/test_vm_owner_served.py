"""One owner of each VM's memory through ``kata-mem serve``, which answers a sandbox's first
request's check from its node view rather than the files (issue 36): the same refusal as the
one-shot shim's (tests/cli/test_vm_owner.py), for first requests that race each other and for
a request another process saved a moment before, behind the service's back; with a real
``kata-mem serve`` and the fake QEMU monitor on a real unix socket."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.support.cli import kata_mem_process
from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.service import start


def _refusal(sock: Path, owner: str, sandbox: str) -> str:
    return (
        f"backend: QMP {sock} leads to the VM of sandbox {owner!r} (its saved request), and "
        f"this is the first request of sandbox {sandbox!r}: a VM is sized from one sandbox's "
        f"requests. Send it as sandbox {owner!r}, or, if that sandbox is gone, forget it "
        "first (event delete)"
    )


def test_first_requests_for_one_vm_through_the_service_have_one_owner(tmp_path: Path) -> None:
    cfg = small_vm_config(tmp_path)
    svc = start(tmp_path)
    with cfg.open("a") as f:  # the one-shot shim below writes where the service keeps state
        f.write(f'state_dir = "{svc.state}"\n')

    def update(sandbox: str, sock: Path) -> dict[str, Any]:
        return {
            "schema": "kata-mem/shim-request/v1",
            "sandbox_id": sandbox,
            "event": "update",
            "config": str(cfg),
            "containers": [{"id": "c", "memory_limit_bytes": 1 << 30}],
            "backend": {"type": "qmp", "socket": str(sock)},
            "apply": True,
            "host": {"memory_bytes": 16 << 30, "cpus": 4},
        }

    # Both VMs live throughout: a socket file's inode, which pins a VM, is reused once the
    # file is removed.
    second, first = tmp_path / "second.sock", tmp_path / "first.sock"
    qemu = FakeQemu()
    try:
        with FakeQmpServer(second, FakeQemu()), FakeQmpServer(first, qemu):
            # A request the one-shot shim saved in the service's state directory (making
            # it), in its own process a moment ago: the service's answer counts it at once.
            shim = kata_mem_process("shim", input=json.dumps(update("by-shim", second)))
            assert shim.returncode == 0, shim.stderr
            served = svc.post(update("by-service", second))
            assert served.status == 400, served.body
            assert served.json()["error"]["message"] == _refusal(second, "by-shim", "by-service")
            # Forgotten by the shim (event delete): the VM has no owner, and may be sized.
            forget = {**update("by-shim", second), "event": "delete", "containers": []}
            assert kata_mem_process("shim", input=json.dumps(forget)).returncode == 0
            served = svc.post(update("by-service", second))
            assert served.status == 200, served.body
            assert served.json()["outcome"]["status"] == "NoChange"
            # Six first requests of six sandboxes for one VM at once: one is its owner (the
            # VM's monitor serves one call at a time, and the first saves its request before
            # letting go of it), and every other is refused naming it, nothing sent to the VM.
            names = [f"race-{i}" for i in range(6)]
            with ThreadPoolExecutor(6) as pool:
                answers = list(pool.map(lambda n: svc.post(update(n, first), timeout=60), names))
            done = {n: (a.status, a.json()) for n, a in zip(names, answers, strict=True)}
            owners = [n for n, (status, _) in done.items() if status == 200]
            assert len(owners) == 1, done
            owner = owners[0]
            assert done[owner][1]["outcome"]["status"] == "Resized", done
            for name, (status, doc) in done.items():
                if name != owner:
                    assert (status, doc["error"]["kind"]) == (400, "input"), doc
                    assert doc["error"]["message"] == _refusal(first, owner, name)
            plugged = list(qemu.devices)
            again = svc.post(update("late", first))
            assert again.status == 400, again.body
            assert again.json()["error"]["message"] == _refusal(first, owner, "late")
            assert list(qemu.devices) == plugged
    finally:
        assert svc.stop() == 0, svc.stderr()
