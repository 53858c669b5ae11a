"""The QMP backend behind the six-method port, on the scripted QMP server: connecting
and reading have no side effects (the balloon's polling interval is set through the
port, by the executor), a DIMM's memory backend comes from the configuration as Kata's
runtime decides it, and an orphan is deleted through begin/poll."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from kata_mem.backends.qmp import QmpBackend
from kata_mem.core.errors import BackendError, KataMemError
from kata_mem.core.model import BackendObject, OwnedDevice, Step
from kata_mem.core.reports import owned_view
from kata_mem.core.values import replace
from tests.support.cli import CliResult
from tests.support.configs import write_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer

Run = Callable[..., CliResult]
MiB = 1 << 20


@dataclass
class RecordingQemu(FakeQemu):
    """Keeps the arguments of every command, not only its name."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def handle(
        self, cmd: str, args: dict[str, Any]
    ) -> tuple[Optional[dict[str, Any]], list[dict[str, Any]]]:
        self.calls.append((cmd, dict(args)))
        return super().handle(cmd, args)


@pytest.fixture
def qemu() -> RecordingQemu:
    return RecordingQemu(balloon=True)


@pytest.fixture
def server(tmp_path: Path, qemu: RecordingQemu) -> Iterator[FakeQmpServer]:
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as srv:
        yield srv


def test_connecting_and_reading_change_nothing_and_the_port_sets_the_polling(
    server: FakeQmpServer, qemu: RecordingQemu
) -> None:
    qemu.stats_interval = 7  # the guest's own
    backend = QmpBackend.connect(str(server.path))
    try:
        backend.observe()
        usage = backend.guest_usage()
        assert usage is not None and usage.total == 512 * MiB
        assert qemu.stats_interval == 7
        assert "qom-set" not in [c for c, _ in qemu.calls]
        # Setting it is the executor's, through the port: it says what the guest had.
        assert backend.set_stats_interval(3) == 7 and qemu.stats_interval == 3
        before = len(qemu.calls)
        assert backend.set_stats_interval(3) == 3
        # Already so, and known from this connection's own setting: nothing is sent.
        assert qemu.calls[before:] == []
    finally:
        backend.close()


def test_without_a_balloon_there_is_no_polling_to_set(tmp_path: Path) -> None:
    qemu = RecordingQemu(balloon=False)
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as server:
        backend = QmpBackend.connect(str(server.path))
        try:
            assert backend.set_stats_interval(3) is None
        finally:
            backend.close()
    assert "qom-set" not in [c for c, _ in qemu.calls]


def test_an_orphan_is_deleted_through_begin_and_poll(
    server: FakeQmpServer, qemu: RecordingQemu
) -> None:
    qemu.objects["kmmem3"] = 128 * MiB
    backend = QmpBackend.connect(str(server.path))
    try:
        # The backend reports the object with its size; the journal's entry makes it an orphan.
        vm = backend.observe()
        assert vm.loose == (BackendObject("kmmem3", 128 * MiB),) and vm.orphans == ()
        entry = OwnedDevice("kmdimm3", "kmmem3", 128 * MiB, confirmed=True)
        assert owned_view(vm, [entry]).orphans == ("kmmem3",)
        step = Step("delete_memdev", "kmmem3", 0, 0, 512 * MiB)
        backend.begin(step)
        assert backend.poll(step, 0.0).state == "done"
        assert ("object-del", {"id": "kmmem3"}) in qemu.calls
        assert backend.observe().loose == ()
    finally:
        backend.close()


def _apply(run_cli: Run, cfg: Path, server: FakeQmpServer) -> tuple[int, dict[str, Any]]:
    r = run_cli(
        "apply",
        *("--config", str(cfg), "--qmp", str(server.path), "--sandbox", "sb"),
        *("--host-memory", "16Gi", "--host-hugepages", "2048x2Mi", "--limit", "256Mi", "--json"),
    )
    return r.code, json.loads(r.out)


#: The ``object-add`` of a DIMM's backend for each configuration, exactly as Kata's runtime
#: sends its own (kata_mem.core.backing ``dimm_backend``; Go govmm qmp.go ``ExecMemdevAdd``).
SHM_FILE = {"qom-type": "memory-backend-file", "mem-path": "/dev/shm", "share": True}
OBJECT_ADD = [
    ({}, {}, SHM_FILE),  # Kata's default shared_fs, virtio-fs
    ({"shared_fs": "virtio-fs"}, {}, SHM_FILE),
    ({"shared_fs": "virtio-fs-nydus"}, {}, SHM_FILE),
    ({"shared_fs": "none"}, {}, {"qom-type": "memory-backend-ram"}),
    ({"shared_fs": "virtio-9p"}, {}, {"qom-type": "memory-backend-ram"}),
    (
        {"enable_hugepages": True},
        {},
        {"qom-type": "memory-backend-file", "mem-path": "/dev/hugepages", "share": True},
    ),
    (
        {"enable_hugepages": True, "shared_fs": "none"},
        {"hugepages_path": "/mnt/huge"},
        {"qom-type": "memory-backend-file", "mem-path": "/mnt/huge", "share": True},
    ),
    (
        {"file_mem_backend": "/var/lib/mem", "shared_fs": "virtio-9p"},
        {},
        {"qom-type": "memory-backend-file", "mem-path": "/var/lib/mem", "share": True},
    ),
    ({"shared_fs": "none"}, {"runtime": "runtime-rs"}, SHM_FILE),
]


@pytest.mark.parametrize(("hypervisor", "setting", "expected"), OBJECT_ADD)
def test_a_dimm_gets_the_memory_backend_kata_would_give_it(
    run_cli: Run,
    server: FakeQmpServer,
    qemu: RecordingQemu,
    tmp_path: Path,
    hypervisor: dict[str, object],
    setting: dict[str, str],
    expected: dict[str, object],
) -> None:
    cfg = write_config(
        tmp_path / "c.toml",
        {"default_memory": 512, "default_maxmemory": 4096, **hypervisor},
        kata_mem={"state_dir": str(tmp_path / "state"), **setting},
    )
    code, doc = _apply(run_cli, cfg, server)
    assert (code, doc["status"]) == (0, "Resized"), doc
    added = [a for c, a in qemu.calls if c == "object-add"]
    assert added == [{**expected, "id": "kmmem0", "size": 256 * MiB}]


def test_a_connection_opened_without_a_dimm_backend_plugs_nothing(
    server: FakeQmpServer, qemu: RecordingQemu
) -> None:
    # A read-only connection (status) gives none: a plug through it is a bug, refused
    # before anything is sent, never a DIMM of memory nobody decided.
    backend = QmpBackend.connect(str(server.path))
    try:
        with pytest.raises(KataMemError, match="without its memory backend; nothing was sent"):
            backend.begin(Step("plug_dimm", "kmdimm0", 256 * MiB, 256 * MiB, 768 * MiB, "kmmem0"))
    finally:
        backend.close()
    assert [c for c, _ in qemu.calls if c in ("object-add", "device_add")] == []


def test_a_relative_hugepages_path_is_a_configuration_error(run_cli: Run, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", {}, kata_mem={"hugepages_path": "hugepages"})
    r = run_cli("config", "check", str(cfg))
    assert r.code == 3
    assert "hugepages_path" in r.err and "'hugepages'" in r.err and "an absolute path" in r.err


def test_a_reply_of_the_wrong_shape_names_the_field(
    server: FakeQmpServer, qemu: RecordingQemu
) -> None:
    # The backend reads replies through the one typed-field reader (kata_mem.core.fields).
    qemu.devices["kmdimm0"] = {"type": "dimm", "data": {"id": "kmdimm0", "size": "1G", "slot": 0}}
    backend = QmpBackend.connect(str(server.path))
    try:
        with pytest.raises(BackendError) as info:
            backend.observe()
    finally:
        backend.close()
    assert info.value.error_class == "ProtocolError"
    assert str(info.value) == (
        "unexpected QMP reply: query-memory-devices[0].data.size: expected an integer from -9223372036854775808 to 9223372036854775807, got '1G'"
    )


def test_a_resize_its_first_poll_and_its_verification_take_one_exchange(
    server: FakeQmpServer, qemu: RecordingQemu
) -> None:
    # The new requested size goes out with a read of the devices: QEMU answers in order, so
    # the size the first poll reads is QEMU's after it took the request. The poll that finds
    # the step done read the devices after the step; the observation that verifies it takes
    # that reply instead of asking again.
    qemu.add_virtio_mem("vm0", 0, 2048 * MiB)
    backend = QmpBackend.connect(str(server.path))
    try:
        backend.observe()
        sent, trips = len(qemu.calls), backend.round_trips
        step = Step("resize_virtio_mem", "vm0", 1024 * MiB, 1024 * MiB, 1536 * MiB)
        backend.begin(step)
        assert backend.poll(step, 1.0).state == "done"
        after = backend.observe()
        assert [c for c, _ in qemu.calls[sent:]] == ["qom-set", "query-memory-devices"]
        assert backend.round_trips == trips + 1
        assert after.total == 1536 * MiB
        # Kept for that observation only: the next one reads afresh.
        polled = len(qemu.calls)
        backend.observe()
        assert [c for c, _ in qemu.calls[polled:]] == ["query-memory-devices"]
        # A refused resize raises where it was sent, and leaves no read for a later poll.
        with pytest.raises(BackendError):
            backend.begin(replace(step, device="nosuch"))
        sent = len(qemu.calls)
        assert backend.poll(step, 0.0).state == "done"
        assert [c for c, _ in qemu.calls[sent:]] == ["query-memory-devices"]
    finally:
        backend.close()


def test_only_loose_objects_named_like_kata_mems_have_their_size_read(
    server: FakeQmpServer, qemu: RecordingQemu
) -> None:
    # No query-memdev; the /objects list tells the memory backends, and only a
    # kmmem* one that no device uses can be an orphan or a look-alike, so only its size
    # is read. The other objects are ids that new ones avoid.
    qemu.objects.update({"pc.ram": 512 * MiB, "kmmem3": 128 * MiB, "kmmem4": 256 * MiB})
    qemu.devices["kmdimm4"] = {
        "type": "dimm",
        "data": {"id": "kmdimm4", "size": 256 * MiB, "slot": 0, "memdev": "/objects/kmmem4"},
    }
    backend = QmpBackend.connect(str(server.path))
    try:
        vm = backend.observe()
        backend.observe()
    finally:
        backend.close()
    assert vm.loose == (BackendObject("kmmem3", 128 * MiB),)
    assert {"pc.ram", "kmmem3", "kmmem4"} <= vm.taken_ids
    assert "query-memdev" not in [c for c, _ in qemu.calls]
    # Read once per connection: an object's size never changes.
    assert [a["path"] for c, a in qemu.calls if a.get("path", "").startswith("/objects/")] == [
        "/objects/kmmem3"
    ]


@pytest.mark.parametrize(
    ("configured", "annotated", "expected"),
    [
        ("virtio-9p", "virtio-fs", SHM_FILE),
        ("virtio-fs", "virtio-9p", {"qom-type": "memory-backend-ram"}),
    ],
)
def test_the_pod_s_shared_fs_annotation_decides_the_dimm_s_memory(
    run_cli: Run,
    server: FakeQmpServer,
    qemu: RecordingQemu,
    tmp_path: Path,
    configured: str,
    annotated: str,
    expected: dict[str, object],
) -> None:
    # Kata's Go runtime applies it before the VM starts (addHypervisorVirtioFsOverrides),
    # so the pod's VM shares (or not) what the annotation says.
    cfg = write_config(
        tmp_path / "c.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "shared_fs": configured,
            "enable_annotations": ["shared_fs"],
        },
        kata_mem={"state_dir": str(tmp_path / "state")},
    )
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n"
        f"    io.katacontainers.config.hypervisor.shared_fs: {annotated}\n"
        "spec:\n  containers:\n  - name: c\n    image: busybox\n"
        "    resources:\n      limits:\n        memory: 256Mi\n"
    )
    r = run_cli(
        "apply",
        *("--config", str(cfg), "--qmp", str(server.path), "--sandbox", "sb"),
        *("--host-memory", "16Gi", "--pod", str(pod), "--json"),
    )
    assert (r.code, json.loads(r.out)["status"]) == (0, "Resized"), r.out + r.err
    added = [a for c, a in qemu.calls if c == "object-add"]
    assert added == [{**expected, "id": "kmmem0", "size": 256 * MiB}]


def test_a_reading_and_the_ask_for_the_next_go_out_in_one_exchange(
    server: FakeQmpServer, qemu: RecordingQemu
) -> None:
    # The count and the statistics first, then the ask (interval 0 and back): QEMU answers
    # in order, so the count read is from before the ask, and the next reading is counted
    # after it. One round trip for the four.
    qemu.stats_count, qemu.stats_interval = 5, 1
    backend = QmpBackend.connect(str(server.path))
    try:
        backend.observe()
        sent, trips = len(qemu.calls), backend.round_trips
        usage = backend.read_and_ask(1)
        assert usage is not None and usage.sequence == 5
        assert backend.round_trips == trips + 1
        assert [(c, a.get("value")) for c, a in qemu.calls[sent:]] == [
            ("x-query-virtio-queue-status", None),
            ("qom-get", None),
            ("qom-set", 0),
            ("qom-set", 1),
        ]
        assert qemu.stats_interval == 1  # put back
        after = backend.guest_usage()
        assert after is not None and after.sequence == 6  # the reading asked for
        # The ask left the interval known: setting it again sends nothing.
        sent = len(qemu.calls)
        assert backend.set_stats_interval(1) == 1 and qemu.calls[sent:] == []
    finally:
        backend.close()


def test_a_grow_sends_only_the_commands_that_carry_it_or_prove_it(
    server: FakeQmpServer, qemu: RecordingQemu, tmp_path: Path
) -> None:
    # apply +1 GiB by a DIMM on a guest whose readings QEMU counts: the reads made once and
    # the observation, one reading the plan and the grow are measured from (asked for with
    # the latest), the plug, its verification, and the guest's reading that shows it. The
    # polling interval is not read: the first ask set it.
    from kata_mem.core.backing import dimm_backend
    from kata_mem.core.model import Container, Workload
    from kata_mem.edges.config import load_config
    from kata_mem.edges.journal import SandboxState
    from kata_mem.orchestration.executor import Options, run_locked
    from tests.support.configs import HOST

    qemu.stats_count, qemu.stats_interval = 5, 1
    cfg = load_config(
        write_config(
            tmp_path / "configuration.toml",
            {"default_memory": 512, "default_maxmemory": 4096, "shared_fs": "none"},
        )
    )
    backends: list[QmpBackend] = []

    def connect() -> QmpBackend:
        backends.append(QmpBackend.connect(str(server.path), dimm_backend=dimm_backend(cfg)))
        return backends[-1]

    result = run_locked(
        SandboxState(tmp_path / "state", "sb"),
        connect,
        cfg,
        HOST,
        Workload((Container("c", 1024 * MiB),)),
        Options(),
    )
    assert result.outcome.status == "Resized", result.outcome
    reading, ask = ["x-query-virtio-queue-status", "qom-get"], ["qom-set", "qom-set"]
    assert [c for c, _ in qemu.calls] == [
        "qmp_capabilities",
        *["qom-list", "qom-list", "qom-get", "query-memory-devices"],
        *reading,
        *ask,
        *reading,
        "object-add",
        "device_add",
        # The step's verification goes with the ask for the reading that shows it.
        "query-memory-devices",
        *reading,
        *ask,
    ]
    # Round trips after the capabilities: the reads made once with the observation, the
    # reading and its ask, the reading asked for, object-add, device_add, and the
    # verification with the next ask (whose reading this scripted guest has at once).
    assert [b.round_trips for b in backends] == [6]
