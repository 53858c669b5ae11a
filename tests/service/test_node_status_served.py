"""``kata-mem status --all`` asks ``kata-mem serve`` when it keeps the node (issue 36: the
node view answered without reading every sandbox's files), and reads the files when it does
not: the same output either way, as text and as JSON; with real processes (``serve``, the
command, the fake QEMU monitor on a real unix socket)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kata_mem.interfaces import cli_node, shim_client
from tests.support.configs import small_vm_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
from tests.support.service import start

#: ``python -m kata_mem ARGS``, saying on stderr each sandbox file it opens (an audit hook:
#: ``os.open`` raises the ``open`` event, docs.python.org "Audit events table").
_AUDITED = """
import runpy, sys
def hook(event, args):
    if event == "open" and str(args[0]).endswith(("journal.json", "request.json")):
        sys.stderr.write(f"opened {args[0]}\\n")
sys.addaudithook(hook)
sys.argv[0] = "kata-mem"
runpy.run_module("kata_mem", run_name="__main__")
"""


def _status(socket: Path, *args: str) -> tuple[str, list[str]]:
    """``status --all ARGS`` with ``$KATA_MEM_SOCKET`` at ``socket``: its output, and the
    sandbox files it opened."""
    r = subprocess.run(
        [sys.executable, "-c", _AUDITED, "status", "--all", *args],
        env={"KATA_MEM_SOCKET": str(socket), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout, [line for line in r.stderr.splitlines() if line.startswith("opened ")]


def test_status_all_finds_the_service_where_the_shim_does() -> None:
    assert cli_node.SOCKET_ENV == shim_client.SOCKET_ENV


def test_status_all_asks_the_service_that_keeps_the_node_and_says_the_same(
    tmp_path: Path,
) -> None:
    cfg = small_vm_config(tmp_path)
    svc = start(tmp_path, "--config", str(cfg))
    state = str(svc.state)

    def update(sandbox: str, sock: Path, limit: int) -> dict[str, Any]:
        return {
            "schema": "kata-mem/shim-request/v1",
            "sandbox_id": sandbox,
            "event": "update",
            "config": None,
            "containers": [{"id": "c", "memory_limit_bytes": limit}],
            "backend": {"type": "qmp", "socket": str(sock)},
            "apply": True,
            "host": {"memory_bytes": 16 << 30, "cpus": 4},
        }

    asked = ("--state-dir", state, "--config", str(cfg))
    (tmp_path / "other").mkdir()
    other = small_vm_config(tmp_path / "other")
    # The VMs live throughout: the service forgets a sandbox whose VM is gone.
    with (
        FakeQmpServer(tmp_path / "a.sock", FakeQemu()),
        FakeQmpServer(tmp_path / "b.sock", FakeQemu()),
    ):
        try:
            for name, limit in (("sb-a", 256 << 20), ("sb-b", 1 << 30)):
                served = svc.post(update(name, tmp_path / f"{name[-1]}.sock", limit))
                assert served.status == 200, served.body
            (svc.state / "not-ours").mkdir()
            for shown in ((), ("--json",)):
                through, opened = _status(svc.socket, *asked, *shown)
                assert opened == []  # the service answered: no sandbox file read here
                files, opened = _status(tmp_path / "none.sock", *asked, *shown)
                assert opened  # no service there: the files
                assert through == files
            doc = json.loads(through)
            assert [row["sandbox"] for row in doc["sandboxes"]] == ["sb-a", "sb-b"]
            assert doc["skipped"] == ["not-ours"] and doc["budget_mib"] is None
            # Another configuration than the service's (its settings could differ), none,
            # or a host memory of its own: the files.
            for args in (
                ("--state-dir", state, "--config", str(other)),
                ("--state-dir", state),
                (*asked, "--host-memory", "16Gi"),
            ):
                _out, opened = _status(svc.socket, *args, "--json")
                assert opened, args
        finally:
            assert svc.stop() == 0, svc.stderr()
        # Stopped (its record stays beside the socket): the files, the same document.
        files, opened = _status(svc.socket, *asked, "--json")
        assert opened and files == through
