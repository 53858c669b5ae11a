"""``kata-mem status`` of one sandbox and of the node, and ``reconcile``: ``status
--sandbox ID`` finds a sandbox's VM from its saved request as ``GET /v1/sandboxes/ID`` does
(tests/service/test_endpoints.py compares the two); ``status``, ``status --all`` and
``reconcile`` read the node's configuration and state directory one way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kata_mem.core.record import Record
from kata_mem.edges.journal import SandboxState
from tests.support.cli import Run
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.state_dir import apply, config_for, snapshot


def test_status_finds_a_known_sandbox_from_its_saved_request(run_cli: Run, tmp_path: Path) -> None:
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as server:
        assert apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi").code == 0
        for shown in ((), ("--json",)):
            sandbox = ("--sandbox", "sb")
            named = run_cli(
                "status", "--qmp", str(server.path), *sandbox, "--state-dir", str(state), *shown
            )
            saved = run_cli("status", *sandbox, "--state-dir", str(state), *shown)
            assert (saved.code, saved.out, saved.err) == (0, named.out, named.err)
            # In the state directory the configuration names, as apply used it.
            assert run_cli("status", *sandbox, "--config", str(cfg), *shown).out == named.out
        doc = json.loads(saved.out)
        assert (doc["plugged_mib"], doc["journal"]["observed_mib"]) == (256, 768)
        text = run_cli("status", "--sandbox", "sb", "--state-dir", str(state)).out
        assert "\njournal: idle, pending unplug none\nlast outcome: Resized" in text, text
    # The VM is gone: asked through its saved request, the error names its socket (exit 6).
    r = run_cli("status", "--sandbox", "sb", "--state-dir", str(state))
    assert r.code == 6 and f"QMP socket {server.path}" in r.err, r


def test_status_of_a_sandbox_without_a_known_vm_is_exit_4_and_changes_nothing(
    run_cli: Run, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    r = run_cli("status", "--sandbox", "sb", "--state-dir", str(state))
    assert (r.code, r.out, r.err) == (
        4,
        "",
        f"kata-mem: error: sandbox sb: unknown (kata-mem has no state for it in {state})\n",
    )
    sandbox = SandboxState(state, "sb")
    with sandbox.locked(0):
        sandbox.save(Record("sb"))
    before = snapshot(state)
    r = run_cli("status", "--sandbox", "sb", "--state-dir", str(state), "--json")
    assert r.code == 4 and json.loads(r.out)["error"]["message"] == (
        "sandbox sb: no resize recorded, so its VM is not known"
    )
    assert snapshot(state) == before
    with sandbox.locked(0):
        sandbox.save_request(
            {"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "update"}
        )
    before = snapshot(state)
    r = run_cli("status", "--sandbox", "sb", "--state-dir", str(state))
    assert (r.code, r.err) == (4, "kata-mem: error: sandbox sb: its saved request names no VM\n")
    assert snapshot(state) == before


def test_status_needs_a_vm_or_a_sandbox(run_cli: Run, tmp_path: Path) -> None:
    r = run_cli("status", "--state-dir", str(tmp_path / "state"))
    assert r.code == 2 and (
        "status needs --qmp SOCKET, --libvirt URI --domain NAME, or --sandbox ID" in r.err
    )


def _sandboxes(argv: tuple[str, ...], out: str) -> list[str]:
    """The sandboxes a node command's output names."""
    if argv[:2] == ("status", "--sandbox"):
        return ["sb"] if out.startswith("boot memory") else []
    return [row["sandbox"] for row in json.loads(out)["sandboxes"]]


@pytest.mark.parametrize(
    "argv", [("status", "--sandbox", "sb"), ("status", "--all", "--json"), ("reconcile", "--json")]
)
def test_the_node_commands_read_configuration_and_state_dir_one_way(
    run_cli: Run, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    """``--state-dir``, else the ``--config``'s ``state_dir`` (``serve`` reads them so
    too); a ``--config`` given is read, a broken one is exit 3, with ``--state-dir`` or
    without."""
    state = tmp_path / "state"
    cfg = config_for(tmp_path, state)
    broken = tmp_path / "broken.toml"
    broken.write_text("[hypervisor.qemu\n")
    given = tmp_path / "given"
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as server:
        assert apply(run_cli, cfg, server.path, state, "sb", "--limit", "256Mi").code == 0
        from_config = run_cli(*argv, "--config", str(cfg))
        from_option = run_cli(*argv, "--config", str(cfg), "--state-dir", str(given))
        from_both = run_cli(*argv, "--config", str(broken), "--state-dir", str(state))
    assert from_config.code == 0 and _sandboxes(argv, from_config.out) == ["sb"], from_config
    if argv[1] == "--sandbox":
        assert from_option.code == 4 and f"no state for it in {given})" in from_option.err
    else:
        assert from_option.code == 0 and _sandboxes(argv, from_option.out) == [], from_option
    assert from_both.code == 3 and str(broken) in from_both.err, from_both
    assert not given.exists()
