"""The QMP backend and executor under faults a real QEMU cannot produce on demand,
using a scripted QMP server. After each fault the next ``apply`` converges and
nothing is left half-plugged and unrecorded."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliResult
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST_ARGS, write_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer

Run = Callable[..., CliResult]
MiB = 1 << 20


@pytest.fixture
def qemu() -> FakeQemu:
    return FakeQemu()


@pytest.fixture
def server(tmp_path: Path, qemu: FakeQemu) -> Iterator[FakeQmpServer]:
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as srv:
        yield srv


@pytest.fixture
def apply(
    run_cli: Run, tmp_path: Path, server: FakeQmpServer
) -> Callable[..., tuple[int, dict[str, Any]]]:
    cfg = write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "memory_slots": 4,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
        kata_mem={"step_timeout_s": 1, "state_dir": str(tmp_path / "state")},
    )

    def run(*args: str) -> tuple[int, dict[str, Any]]:
        r = run_cli(
            "apply",
            "--config",
            str(cfg),
            "--qmp",
            str(server.path),
            "--sandbox",
            "sb1",
            *HOST_ARGS,
            "--json",
            *args,
        )
        doc = json.loads(r.out) if r.out.strip() else {}
        return r.code, doc

    return run


def _no_orphans(qemu: FakeQemu) -> None:
    in_use = {d["data"]["memdev"].removeprefix("/objects/") for d in qemu.devices.values()}
    assert set(qemu.objects) == in_use, "a backend object without its DIMM was left behind"


def test_grow_then_no_change(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu
) -> None:
    code, doc = apply("--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768)
    assert list(qemu.devices) == ["kmdimm0"]
    code, doc = apply("--limit", "256Mi")
    assert (code, doc["status"], doc["steps"]) == (0, "NoChange", [])


def test_error_reply_leaves_no_orphan_then_converges(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu
) -> None:
    qemu.fail["device_add"] = (
        "GenericError",
        "not enough space, currently 0x0 in use of total space for memory devices 0x0",
    )
    code, doc = apply("--limit", "256Mi")
    assert code == 7
    assert (doc["status"], doc["reason"]) == ("InProgress", "BackendError")
    assert "device_add failed: GenericError: not enough space" in str(doc["message"])
    assert "object-del" in qemu.commands
    _no_orphans(qemu)
    assert qemu.devices == {}
    del qemu.fail["device_add"]
    code, doc = apply("--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768)


def test_connection_dropped_mid_plan(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu, run_cli: Run
) -> None:
    # The DIMM is added, then the monitor goes away before answering.
    qemu.drop_after.add("device_add")
    code, doc = apply("--limit", "256Mi")
    assert code == 6
    assert doc["error"]["kind"] == "backend-unavailable"
    qemu.drop_after.clear()
    code, doc = apply("--limit", "256Mi")
    # The DIMM from the dropped call is found and counted; nothing is plugged twice.
    assert (code, doc["status"], doc["observed_mib"]) == (0, "NoChange", 768)
    assert list(qemu.devices) == ["kmdimm0"]
    assert any("reconciled" in str(w) for w in doc["warnings"])
    _no_orphans(qemu)


def test_dropped_between_object_add_and_device_add(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu
) -> None:
    qemu.drop_after.add("object-add")
    code, _ = apply("--limit", "256Mi")
    assert code == 6
    assert list(qemu.objects) == ["kmmem0"] and qemu.devices == {}
    qemu.drop_after.clear()
    code, doc = apply("--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768)
    assert any("orphaned backend object kmmem0" in str(w) for w in doc["warnings"])
    _no_orphans(qemu)


def test_guest_never_confirms(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu
) -> None:
    qemu.guest_confirms = False
    code, doc = apply("--limit", "256Mi")
    assert code == 8
    assert (doc["status"], doc["reason"]) == ("InProgress", "PlugTimeout")
    # The hypervisor has the DIMM: it is what is recorded, not the request.
    assert doc["observed_mib"] == 768
    code, doc = apply("--limit", "256Mi")
    assert (code, doc["status"]) == (0, "NoChange")
    _no_orphans(qemu)


def test_guest_refusing_an_unplug(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu
) -> None:
    code, doc = apply("--limit", "256Mi")
    assert doc["status"] == "Resized"
    qemu.guest_refuses = True
    # --force: the scripted server has no balloon, so the checks would defer (usage unknown).
    code, doc = apply("--force")
    assert (code, doc["status"], doc["reason"], doc["observed_mib"]) == (
        0,
        "InProgress",
        "UnplugRejected",
        768,
    ), doc
    assert "0x82" in doc["message"] or "DEVICE_UNPLUG_GUEST_ERROR" in doc["message"]
    # Next call: the DIMM is still there and still counted; its backend was not deleted.
    code, doc = apply("--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "NoChange", 768)
    assert list(qemu.devices) == ["kmdimm0"] and list(qemu.objects) == ["kmmem0"]


def test_stray_event_before_the_greeting(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu
) -> None:
    # QEMU can hand an event meant for the previous client to a new connection first.
    qemu.stray_events_before_greeting = 1
    code, doc = apply("--limit", "256Mi")
    assert (code, doc["status"]) == (0, "Resized"), doc


def test_unknown_command_class_is_kept(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu
) -> None:
    qemu.fail["query-memory-devices"] = (
        "CommandNotFound",
        "The command query-memory-devices has not been found",
    )
    code, doc = apply("--limit", "256Mi")
    assert code == 7
    assert (
        "query-memory-devices failed: CommandNotFound: "
        "The command query-memory-devices has not been found" in doc["error"]["message"]
    )


def test_status_against_fake(
    run_cli: Run, server: FakeQmpServer, qemu: FakeQemu, tmp_path: Path
) -> None:
    qemu.objects["kmmem3"] = 128 * MiB
    r = run_cli(
        "status", "--qmp", str(server.path), "--state-dir", str(tmp_path / "state"), "--json"
    )
    doc = json.loads(r.out)
    # No journal records kmmem3: it only looks like kata-mem's, and is no orphan of its own.
    assert (doc["base_mib"], doc["slots"], doc["device_space_mib"], doc["orphans"]) == (
        512,
        4,
        3584,
        [],
    )
    assert doc["unproven"] == ["kmmem3"]
    assert doc["guest"] is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_text("x"), "is a regular file, not a unix socket"),
        (lambda p: p.mkdir(), "is a directory"),
    ],
)
def test_backend_unavailable(
    run_cli: Run, tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    path = tmp_path / "qmp.sock"
    make(path)
    r = run_cli("status", "--qmp", str(path))
    assert r.code == 6
    assert message in r.err and "Traceback" not in r.err


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal applies to root only")
def test_symlinked_socket_is_refused_as_root(
    run_cli: Run, server: FakeQmpServer, tmp_path: Path
) -> None:
    link = tmp_path / "elsewhere.sock"
    link.symlink_to(server.path)
    r = run_cli("status", "--qmp", str(link))
    assert r.code == 6 and "is a symlink; refused as root" in r.err
    assert (
        run_cli("status", "--qmp", str(server.path), "--state-dir", str(tmp_path / "s")).code == 0
    )


def test_connection_refused(run_cli: Run, tmp_path: Path) -> None:
    import socket

    path = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()  # a socket file nobody listens on
    r = run_cli("status", "--qmp", str(path))
    assert r.code == 6 and "connection refused" in r.err


def test_a_journal_from_before_ownership_leaves_its_dimms_alone(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu, tmp_path: Path
) -> None:
    code, doc = apply("--limit", "256Mi")
    assert (code, doc["status"], list(qemu.devices)) == (0, "Resized", ["kmdimm0"])
    # The journal as a kata-mem before ownership records wrote it: no "owned".
    path = tmp_path / "state" / "sb1" / "journal.json"
    journal = json.loads(path.read_text())
    del journal["owned"]
    path.write_text(json.dumps(journal))
    # --force: the scripted server has no balloon, so the checks would defer (usage unknown).
    code, doc = apply("--force")
    assert (code, doc["status"], doc["reason"]) == (0, "Infeasible", "BackendCannotShrink"), doc
    assert list(qemu.devices) == ["kmdimm0"] and list(qemu.objects) == ["kmmem0"]
    (why,) = [w for w in doc["warnings"] if w.startswith("left alone: kmdimm0")]
    assert "older kata-mem, which did not record the devices it created" in why
    assert "remove them by hand (QMP device_del, then object-del" in why
    # Written back as a current journal: kmdimm0 stays someone else's, and is said to be.
    assert json.loads(path.read_text())["owned"] == []
    code, doc = apply("--force")
    assert (code, doc["status"], list(qemu.devices)) == (0, "Infeasible", ["kmdimm0"])
    assert any(
        w.startswith("left alone: kmdimm0 is named like kata-mem's") for w in doc["warnings"]
    )


def test_a_dry_run_plans_the_shrink_that_apply_runs(
    apply: Callable[..., tuple[int, dict[str, Any]]], qemu: FakeQemu
) -> None:
    # The dry run's copy of the VM needs the journal's record of kata-mem's DIMMs.
    assert apply("--limit", "256Mi")[1]["status"] == "Resized"
    # --force: the scripted server has no balloon, so the checks would defer (usage unknown).
    code, dry = apply("--force", "--dry-run")
    assert (code, dry["status"]) == (0, "Resized"), dry
    assert list(qemu.devices) == ["kmdimm0"]  # a dry run changes nothing
    code, doc = apply("--force")
    assert (code, doc["status"], doc["steps"]) == (0, "Resized", dry["steps"]), doc
    assert [(s["action"], s["device"]) for s in doc["steps"]] == [("unplug_dimm", "kmdimm0")]


@pytest.mark.parametrize(
    ("shared_fs", "qom_type"),
    [("virtio-fs", "memory-backend-file"), ("none", "memory-backend-ram")],
)
def test_a_crash_between_object_add_and_device_add_is_repaired_whatever_the_backend(
    run_cli: Run,
    tmp_path: Path,
    server: FakeQmpServer,
    qemu: FakeQemu,
    shared_fs: str,
    qom_type: str,
) -> None:
    # Ownership is the journal's (id and size recorded before the plug), whatever QOM
    # type the object has: a shared file backend left behind is deleted as RAM is.
    cfg = write_config(
        tmp_path / "c.toml",
        {"default_memory": 512, "default_maxmemory": 4096, "shared_fs": shared_fs},
        kata_mem={"step_timeout_s": 1, "state_dir": str(tmp_path / "state")},
    )

    def apply() -> tuple[int, dict[str, Any]]:
        r = run_cli(
            "apply",
            *("--config", str(cfg), "--qmp", str(server.path), "--sandbox", "sb1"),
            *HOST_ARGS,
            *("--json", "--limit", "256Mi"),
        )
        return r.code, json.loads(r.out)

    qemu.drop_after.add("object-add")
    assert apply()[0] == 6
    assert (list(qemu.objects), qemu.devices) == (["kmmem0"], {})
    assert qemu.qom_type("kmmem0") == qom_type
    status = run_cli(
        "status",
        *("--qmp", str(server.path), "--sandbox", "sb1"),
        *("--state-dir", str(tmp_path / "state"), "--json"),
    )
    assert json.loads(status.out)["orphans"] == ["kmmem0"], status.out + status.err
    qemu.drop_after.clear()
    code, doc = apply()
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768)
    assert any("orphaned backend object kmmem0" in str(w) for w in doc["warnings"])
    _no_orphans(qemu)
    (dimm,) = qemu.dimms()  # plugged again, on a backend of the same kind
    assert qemu.qom_type(dimm["data"]["memdev"].removeprefix("/objects/")) == qom_type
