"""What ``kata-mem status`` and the service's GET endpoints are made of, as values: a
sandbox's endpoint from its saved request (an :class:`Endpoint`, or a :class:`NoEndpoint`
saying why there is none), the node's status against overridden host facts, and a
sandbox's status with its typed journal record, rendered once."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest

from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import ConfigError
from kata_mem.core.model import Settings, VmState
from kata_mem.core.record import LastOutcome, Record
from kata_mem.core.request import HostOverrides
from kata_mem.edges.journal import SandboxState
from kata_mem.interfaces import render_node
from kata_mem.orchestration.status import NoEndpoint, SandboxStatus, node_status, saved_endpoint

MiB = 1 << 20
REQUEST = {"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "update"}


def test_a_sandbox_without_a_known_vm_is_a_typed_value_saying_why(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert saved_endpoint(str(state), "sb") == NoEndpoint("sb", "no-state", str(state))
    sandbox = SandboxState(state, "sb")
    with sandbox.locked(0):
        sandbox.save(Record("sb"))
    assert saved_endpoint(str(state), "sb") == NoEndpoint("sb", "no-request", str(state))
    with sandbox.locked(0):
        sandbox.save_request(REQUEST)
    found = saved_endpoint(str(state), "sb")
    assert found == NoEndpoint("sb", "no-backend", str(state))
    assert isinstance(found, NoEndpoint)
    assert found.describe() == "sandbox sb: its saved request names no VM"


def test_a_saved_endpoint_is_marked_saved(tmp_path: Path) -> None:
    sock = str(tmp_path / "qmp.sock")
    sandbox = SandboxState(tmp_path / "state", "sb")
    with sandbox.locked(0):
        sandbox.save(Record("sb"))
        sandbox.save_request({**REQUEST, "backend": {"type": "qmp", "socket": sock}, "apply": True})
    found = saved_endpoint(str(tmp_path / "state"), "sb")
    # Read from disk, unpinned: it may lead only to root's or the caller's VMM.
    assert isinstance(found, Endpoint) and found.saved and found.unpinned
    assert (found.kind, found.target) == ("qmp", sock)


def test_a_state_dir_kata_mem_did_not_create_is_refused_before_a_sandbox_is_looked_for(
    tmp_path: Path,
) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "sb").mkdir(parents=True)
    (theirs / "sb" / "request.json").write_text(json.dumps(REQUEST))
    with pytest.raises(ConfigError, match="kata-mem did not create"):
        saved_endpoint(str(theirs), "sb")


def test_the_node_status_is_read_against_the_host_facts_given(tmp_path: Path) -> None:
    settings = Settings(node_overcommit=Fraction(3, 2), node_reserved=1024 * MiB)
    node = node_status(settings, str(tmp_path / "none"), HostOverrides(memory=8192 * MiB))
    assert (node.host, node.budget, node.found) == (8192 * MiB, 10752 * MiB, False)
    assert node.state_dir == str(tmp_path / "none") and node.sandboxes == ()


def test_a_sandbox_status_renders_its_typed_journal_record_once() -> None:
    record = Record(
        "sb",
        state="running",
        pending_unplug=("kmdimm1", "kmdimm0", "kmdimm1"),
        observed=768 * MiB,
        last_outcome=LastOutcome("Deferred", "GuestPressure", "the guest is short", 1.0),
    )
    status = SandboxStatus(VmState(base=512 * MiB, slots=4), None, record)
    assert render_node.status_json(status)["journal"] == record.to_json()
    assert render_node.status_text(status).splitlines()[-2:] == [
        "journal: running, pending unplug kmdimm0, kmdimm1",
        "last outcome: Deferred GuestPressure the guest is short",
    ]
    done = Record("sb", last_outcome=LastOutcome("Resized", "", "", 1.0))
    text = render_node.status_text(SandboxStatus(VmState(base=512 * MiB), None, done))
    assert text.splitlines()[-2:] == ["journal: idle, pending unplug none", "last outcome: Resized"]
    assert (
        render_node.status_json(SandboxStatus(VmState(base=512 * MiB), None, None))["journal"]
        is None
    )
