"""Never unplug or delete what kata-mem did not create, on the real guest,
behind QEMU's QMP and as a libvirt domain: a DIMM and a backend object that another
tool made with kata-mem's names (``kmdimm3`` on the foreign backend ``foreign0``, and
``kmmem7``) are reported as not kata-mem's and left alone by every apply; new ids
collide with none of them; and kata-mem's own orphan, left between ``object-add`` and
``device_add``, is still deleted."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import pytest

from kata_mem.backends.qmp import QmpBackend
from kata_mem.core.backing import dimm_backend
from kata_mem.core.errors import BackendUnavailable
from kata_mem.core.model import Container, Workload
from kata_mem.edges.config import load_config
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from tests.support.cli import CliResult, apply_qmp
from tests.support.configs import HOST, HOST_ARGS, guest_config
from tests.support.guestvm import BootGuest, GuestSpec, GuestVM
from tests.support.libvirt_guest import LibvirtGuest
from tests.support.qmp_min import QMPClient

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
MiB, KiB_PER_MiB = 1 << 20, 1024
Guest = Union[GuestVM, LibvirtGuest]


def _objects(vm: GuestVM) -> set[str]:
    with QMPClient(vm.qmp_socket) as q:
        listed = q.execute("qom-list", {"path": "/objects"})
        return {o["name"] for o in listed if o["type"].startswith("child<")}


def _dimms(vm: GuestVM) -> dict[str, str]:
    """QEMU's DIMMs: id -> backend object."""
    with QMPClient(vm.qmp_socket) as q:
        return {
            d["data"]["id"]: d["data"]["memdev"].removeprefix("/objects/")
            for d in q.execute("query-memory-devices")
            if d["type"] == "dimm"
        }


@dataclass
class Sandbox:
    guest: Guest
    endpoint: tuple[str, ...]
    tmp: Path
    run_cli: Run

    def __post_init__(self) -> None:
        self.cfg = guest_config(self.tmp, virtio=False)

    def plant_foreign(self) -> None:
        """What another tool plugs, named as kata-mem names its own: the DIMM ``kmdimm3``
        (256 MiB) on its own backend ``foreign0``, and (QEMU) a spare backend ``kmmem7``."""
        base = self.guest.status().total_kb
        if isinstance(self.guest, GuestVM):
            with QMPClient(self.guest.qmp_socket) as q:
                for oid, mib in (("kmmem7", 128), ("foreign0", 256)):
                    q.execute(
                        "object-add",
                        {"qom-type": "memory-backend-ram", "id": oid, "size": mib * MiB},
                    )
                q.execute(
                    "device_add", {"driver": "pc-dimm", "id": "kmdimm3", "memdev": "foreign0"}
                )
        else:
            xml = self.tmp / "foreign-dimm.xml"
            xml.write_text(
                "<memory model='dimm'><target><size unit='MiB'>256</size><node>0</node></target>"
                "<alias name='ua-kmdimm3'/></memory>"
            )
            self.guest.virsh("attach-device", self.guest.name, str(xml), "--live")
        want = base + 256 * KiB_PER_MiB
        assert self.guest.wait_mem(lambda m: m.total_kb >= want, timeout=15).total_kb == want

    def apply(self, *args: str) -> tuple[int, dict[str, Any]]:
        r = self.run_cli(
            "apply", "--config", str(self.cfg), *self.endpoint, "--sandbox", "sb", *HOST_ARGS,
            "--json", *args,
        )  # fmt: skip
        assert r.out.strip(), r.err
        return r.code, json.loads(r.out)

    def status(self) -> dict[str, Any]:
        r = self.run_cli(
            "status", *self.endpoint, "--sandbox", "sb", "--state-dir", str(self.tmp / "state"),
            "--json",
        )  # fmt: skip
        assert r.code == 0, r.err
        doc: dict[str, Any] = json.loads(r.out)
        return doc


@pytest.fixture(params=["qmp", "libvirt"])
def sandbox(request: pytest.FixtureRequest, tmp_path: Path, run_cli: Run) -> Sandbox:
    spec = GuestSpec(virtio_mem_mib=0)
    if request.param == "qmp":
        vm: Guest = request.getfixturevalue("boot_guest")(spec)
        assert isinstance(vm, GuestVM)
        return Sandbox(vm, ("--qmp", str(vm.qmp_socket)), tmp_path, run_cli)
    vm = request.getfixturevalue("boot_libvirt_guest")(spec)
    assert isinstance(vm, LibvirtGuest)
    return Sandbox(vm, ("--libvirt", vm.uri, "--domain", vm.name), tmp_path, run_cli)


def test_look_alikes_are_reported_and_never_unplugged_or_deleted(sandbox: Sandbox) -> None:
    qmp = isinstance(sandbox.guest, GuestVM)
    look_alikes = ["kmdimm3", "kmmem7"] if qmp else ["kmdimm3"]
    base_kb = sandbox.guest.status().total_kb
    sandbox.plant_foreign()

    st = sandbox.status()
    assert [(d["id"], d["ours"]) for d in st["devices"]] == [("kmdimm3", False)], st
    assert (st["unproven"], st["orphans"]) == (look_alikes, [])

    # Grow: a new DIMM whose ids collide with nothing in the VM; kmmem7 stays.
    code, doc = sandbox.apply("--limit", "512Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 1024), doc
    ((action, mine),) = [(s["action"], s["device"]) for s in doc["steps"]]
    assert action == "plug_dimm" and mine not in ("kmdimm3", "kmdimm7"), mine
    assert any(w.startswith(f"left alone: {', '.join(look_alikes)}") for w in doc["warnings"])
    if qmp:
        assert isinstance(sandbox.guest, GuestVM)
        dimms = _dimms(sandbox.guest)
        assert dimms["kmdimm3"] == "foreign0" and dimms[mine] not in ("kmmem7", "foreign0")
        assert {"kmmem7", "foreign0"} <= _objects(sandbox.guest)
    st = sandbox.status()
    assert sorted((d["id"], d["ours"]) for d in st["devices"]) == sorted(
        [("kmdimm3", False), (mine, True)]
    ), st

    # Shrink to the boot memory: only kata-mem's own DIMM comes out.
    code, doc = sandbox.apply("--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768), doc
    assert [(s["action"], s["device"]) for s in doc["steps"]] == [("unplug_dimm", mine)]
    want = base_kb + 256 * KiB_PER_MiB
    assert sandbox.guest.wait_mem(lambda m: m.total_kb <= want, timeout=30).total_kb == want
    code, doc = sandbox.apply("--allow-shrink")
    assert (code, doc["status"], doc["reason"], doc["steps"]) == (
        0,
        "Infeasible",
        "BackendCannotShrink",
        [],
    ), doc
    st = sandbox.status()
    assert [(d["id"], d["ours"]) for d in st["devices"]] == [("kmdimm3", False)], st
    assert st["unproven"] == look_alikes
    if qmp:
        assert isinstance(sandbox.guest, GuestVM)
        assert _dimms(sandbox.guest) == {"kmdimm3": "foreign0"}
        assert {"kmmem7", "foreign0"} <= _objects(sandbox.guest)
    assert sandbox.guest.status().total_kb == want


class LostAfterObjectAdd(QmpBackend):
    """The real backend; the connection is lost right after ``object-add`` (as when
    kata-mem dies there): QEMU has the backend object, and no DIMM uses it."""

    def _execute(self, cmd: str, args: Optional[dict[str, object]] = None) -> object:
        reply = super()._execute(cmd, args)
        if cmd == "object-add":
            raise BackendUnavailable("QMP socket: connection lost after object-add")
        return reply


def test_own_orphan_left_between_object_add_and_device_add_is_deleted(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    with QMPClient(vm.qmp_socket) as q:  # someone else's, named like kata-mem's
        q.execute(
            "object-add", {"qom-type": "memory-backend-ram", "id": "kmmem7", "size": 128 * MiB}
        )
    state = SandboxState(tmp_path / "state", "sb")
    with pytest.raises(BackendUnavailable):
        run_locked(
            state,
            lambda: LostAfterObjectAdd.connect(
                str(vm.qmp_socket), dimm_backend=dimm_backend(load_config(cfg))
            ),
            load_config(cfg),
            HOST,
            Workload((Container("c", 256 * MiB),)),
            Options(),
        )
    journal = json.loads(state.path.read_text())
    (entry,) = journal["owned"]
    assert (entry["id"], entry["memdev"], entry["confirmed"]) == ("kmdimm8", "kmmem8", False)
    assert "kmmem8" in _objects(vm) and _dimms(vm) == {}

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768), doc
    assert any(
        "deleting orphaned backend object kmmem8 (kata-mem created it for kmdimm8, whose plug "
        "did not finish)" in w
        for w in doc["warnings"]
    ), doc["warnings"]
    # Of the backend objects no DIMM uses, kmmem7 stays and kata-mem's orphan is gone.
    dimms = _dimms(vm)
    assert _objects(vm) - set(dimms.values()) == {"kmmem7", "pc.ram"}
    ((dimm, memdev),) = dimms.items()
    (entry,) = json.loads(state.path.read_text())["owned"]
    assert (entry["id"], entry["memdev"], entry["confirmed"]) == (dimm, memdev, True)
