"""A sandbox id that names one of kata-mem's own entries in the state directory (serve's
socket and its lock) is refused where it comes in, before anything is made or sent:
such a sandbox would hold memory no listing, ledger check or reconcile counts, and its
directory would keep ``serve`` from starting there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kata_mem.core.errors import InputError
from kata_mem.core.model import SANDBOX_ID, SERVICE_ENTRIES, check_sandbox_id
from kata_mem.edges.statefiles import LEDGER, SANDBOX_MARKER, STATE_MARKER
from tests.support.cli import Run, kata_mem_process
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.state_dir import apply, config_for

#: The two reserved ids: serve's socket and its lock in its default state directory.
RESERVED = ("kata-mem.sock", "kata-mem.sock.lock")


def test_every_entry_the_state_directory_keeps_for_itself_is_no_sandbox_id() -> None:
    # What a listing of the state directory skips as kata-mem's own (statedir.sandboxes):
    # each is refused as an id, or could never be one (a temporary file starts with a dot).
    own = [STATE_MARKER, SANDBOX_MARKER, LEDGER, ".journal.json.42.tmp", *SERVICE_ENTRIES]
    for name in own:
        if SANDBOX_ID.fullmatch(name):
            with pytest.raises(InputError, match=f"sandbox id '{name}': reserved"):
                check_sandbox_id(name)


@pytest.mark.parametrize("sandbox", RESERVED)
def test_apply_refuses_a_reserved_sandbox_id_and_makes_nothing(
    run_cli: Run, tmp_path: Path, sandbox: str
) -> None:
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    qemu = FakeQemu()
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as server:
        r = apply(run_cli, cfg, tmp_path / "qmp.sock", state, sandbox, "--limit", "256Mi")
        assert r.code == 4, r
        assert f"sandbox id '{sandbox}': reserved for kata-mem serve's own entries" in r.err
        assert (server.sessions, qemu.commands) == (0, [])
    assert not state.exists()


@pytest.mark.parametrize("sandbox", RESERVED)
def test_the_shim_refuses_a_reserved_sandbox_id_and_makes_nothing(
    tmp_path: Path, sandbox: str
) -> None:
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    qemu = FakeQemu()
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as server:
        doc = {
            "schema": "kata-mem/shim-request/v1",
            "sandbox_id": sandbox,
            "event": "create",
            "config": str(cfg),
            "containers": [{"id": "c1", "memory_limit_bytes": 256 << 20}],
            "backend": {"type": "qmp", "socket": str(tmp_path / "qmp.sock")},
            "apply": True,
            "host": {"memory_bytes": 16 << 30, "cpus": 4},
        }
        r = kata_mem_process("shim", input=json.dumps(doc))
        assert r.returncode == 4, r
        error = json.loads(r.stdout)["error"]
        assert error["exit_code"] == 4
        assert error["message"].startswith(f"request sandbox_id: sandbox id '{sandbox}': reserved")
        assert (server.sessions, qemu.commands) == (0, [])
    assert not state.exists()
