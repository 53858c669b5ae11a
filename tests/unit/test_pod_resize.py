"""The runtime's answer to a pod resize: the pure decision
(:func:`kata_mem.core.podresize.settle`) and the gRPC status a shim returns, then the
executor on the fake backend against a real cgroup directory (files the test writes): a
shrink to the new pod limit, refused while the guest holds memory or while QEMU is still
charged above it, and a grow held back by the limit in force until it is raised.

Sources: kubernetes PR #137555 (pkg/kubelet/kuberuntime/kuberuntime_manager.go,
``doPodResizeAction``: ``UpdatePodSandboxResources`` before the pod cgroup write, an error
rejects the resize, a failed write sends the old resources again)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any, Optional

import jsonschema
import pytest

from kata_mem.backends.fake import FakeBackend, FakeGuest, VirtualTime
from kata_mem.core.errors import InputError
from kata_mem.core.model import CgroupLevel, MemoryDevice, Outcome, SizingConfig, Step, VmState
from kata_mem.core.podresize import cri_answer, cri_refused, settle
from kata_mem.core.record import PendingGrow, Record
from kata_mem.core.request import SandboxRequest
from kata_mem.core.sandbox_resources import SandboxResize, SandboxResources
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from kata_mem.orchestration.guards import HostSide
from kata_mem.orchestration.reconcile import _grow_unblocked
from tests.support.configs import HOST
from tests.support.shim import REQUEST_SCHEMA

POD = CgroupLevel("/sys/fs/cgroup/kubepods/pod1", 1024 * MiB, 700 * MiB)


def outcome(status: Any, observed_mib: int, steps: int = 0, reason: Any = "") -> Outcome:
    step = Step("resize_virtio_mem", "vm0", 0, -256 * MiB, 0)
    return Outcome(status, reason, "done", observed_mib * MiB, 768 * MiB, (step,) * steps)


SETTLE_CASES = [
    # (id, outcome, before MiB, allowed MiB, charge MiB, expected status, reason, in message)
    ("fits", outcome("Resized", 768, 5), 2048, 857, 600, "Resized", "", "may be set"),
    ("already-small", outcome("NoChange", 768), 768, 857, 600, "NoChange", "", "unchanged"),
    (
        "charge-above",
        outcome("Resized", 768, 5),
        2048,
        857,
        1000,
        "Deferred",
        "ChargeAboveLimit",
        "could OOM-kill QEMU",
    ),
    ("charge-unknown", outcome("NoChange", 768), 768, 857, None, "NoChange", "", "may be set"),
    (
        "below-boot",
        outcome("NoChange", 512),
        512,
        400,
        300,
        "Infeasible",
        "BelowBaseMemory",
        "below its boot memory",
    ),
    (
        "dimms-cannot-reach",
        outcome("NoChange", 1024),
        1024,
        857,
        600,
        "Infeasible",
        "BackendCannotShrink",
        "cannot be taken lower",
    ),
    (
        "guest-holds",
        outcome("Deferred", 2048, 0, "UsageAboveTarget"),
        2048,
        857,
        1900,
        "Deferred",
        "UsageAboveTarget",
        "the VM is unchanged at 2048 MiB",
    ),
    (
        # An Infeasible outcome (FailedPrecondition) said "the pod cgroup
        # is to wait for a retry".
        "infeasible-promises-no-retry",
        outcome("Infeasible", 2048, 0, "ShrinkNotAllowed"),
        2048,
        857,
        1900,
        "Infeasible",
        "ShrinkNotAllowed",
        "the pod cgroup must not be set to it; retrying this resize will not change that",
    ),
    (
        "deferred-waits-for-a-retry",
        outcome("Deferred", 2048, 0, "UsageAboveTarget"),
        2048,
        857,
        1900,
        "Deferred",
        "UsageAboveTarget",
        "the pod cgroup is to wait for a retry",
    ),
    (
        "partly-shrunk",
        outcome("InProgress", 1536, 2, "PartialShrink"),
        2048,
        857,
        1500,
        "InProgress",
        "PartialShrink",
        "from 2048 MiB to 1536 MiB in 2 verified steps",
    ),
]


@pytest.mark.parametrize(
    ("got", "before", "allowed", "charge", "status", "reason", "says"),
    [pytest.param(*c[1:], id=c[0]) for c in SETTLE_CASES],
)
def test_settle(
    got: Outcome,
    before: int,
    allowed: int,
    charge: Optional[int],
    status: str,
    reason: str,
    says: str,
) -> None:
    done = settle(
        got,
        before=before * MiB,
        pod=POD,
        allowed=allowed * MiB,
        base=512 * MiB,
        charge=None if charge is None else charge * MiB,
        margin=32 * MiB,
    )
    assert (done.status, done.reason) == (status, reason)
    assert says in done.message and POD.path in done.message, done.message
    assert done.observed == got.observed  # never claims a size the VM does not have


@pytest.mark.parametrize(
    ("status", "reason", "code", "number"),
    [
        ("Resized", "", "OK", 0),
        ("NoChange", "", "OK", 0),
        ("Deferred", "UsageAboveTarget", "Unavailable", 14),
        ("InProgress", "PartialShrink", "Unavailable", 14),
        ("Infeasible", "BelowBaseMemory", "FailedPrecondition", 9),
    ],
)
def test_the_grpc_code_of_each_status(status: Any, reason: Any, code: str, number: int) -> None:
    answer = cri_answer(Outcome(status, reason, "why", 0, 0)).to_json()
    assert (answer["code"], answer["grpc_code"]) == (code, number)
    assert answer["message"] == f"kata-mem: {status}{' ' + reason if reason else ''}: why"


@pytest.mark.parametrize(
    ("exit_code", "code"),
    [(4, "InvalidArgument"), (3, "FailedPrecondition"), (6, "Unavailable"), (1, "Internal")],
)
def test_a_refused_request_is_never_unimplemented(exit_code: int, code: str) -> None:
    """The kubelet goes on with the resize on Unimplemented, or Unknown with "not
    implemented" (containerd 2.2): kata-mem answers neither."""
    assert cri_refused(exit_code, "no").code == code


def test_the_request_carries_the_new_resources_and_the_overhead() -> None:
    doc = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb",
        "event": "update-sandbox",
        "sandbox_resources": {
            "memory_limit_bytes": 768 * MiB,
            "cpu_quota": 150000,
            "cpu_period": 100000,
        },
        "overhead": {"memory_limit_bytes": 256 * MiB},
    }
    request = SandboxRequest.from_json(doc)
    assert request.resize is not None and request.resize.pod_limit == 1024 * MiB
    sizing = request.workload.sizing
    assert sizing is not None and (sizing.memory, sizing.cpu) == (768 * MiB, Fraction(3, 2))
    assert request.workload.overhead == 256 * MiB
    assert SandboxRequest.from_json(request.to_json()) == request
    # No limit (memory_limit_in_bytes 0, as the kubelet sends a pod without one): none.
    assert SandboxResize(SandboxResources(0)).pod_limit is None


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"event": "update-sandbox"}, "update-sandbox needs sandbox_resources"),
        ({"sandbox_resources": {}}, "with event update: expected event update-sandbox"),
        ({"event": "update-sandbox", "sandbox_resources": {"memory": 1}}, "memory"),
        (
            {"event": "update-sandbox", "sandbox_resources": {}, "containers": [{"id": "c"}]},
            "expected no containers",
        ),
        (
            {"event": "update-sandbox", "sandbox_resources": {}, "pod_resources": {}},
            "no pod_resources",
        ),
        ({"overhead": {}}, "only with sandbox_resources"),
        (
            {"event": "update-sandbox", "sandbox_resources": {"memory_limit_bytes": "1Gi"}},
            "sandbox_resources.memory_limit_bytes",
        ),
    ],
)
def test_bad_resources_are_refused_naming_the_field(fields: dict[str, Any], needle: str) -> None:
    doc = {"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "update", **fields}
    with pytest.raises(InputError, match=needle):
        SandboxRequest.from_json(doc)


_REQUEST_SCHEMA = jsonschema.Draft202012Validator(REQUEST_SCHEMA)
_BASE = {"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb"}
_RESOURCES = {"memory_limit_bytes": GiB}


@pytest.mark.parametrize(
    ("fields", "accepted"),
    [
        ({"event": "update-sandbox", "sandbox_resources": _RESOURCES}, True),
        ({"event": "reconcile", "sandbox_resources": _RESOURCES, "overhead": None}, True),
        ({"event": "update-sandbox", "sandbox_resources": {}, "containers": []}, True),
        ({"event": "update-sandbox", "sandbox_resources": {}, "annotations": {}}, True),
        ({"event": "update-sandbox"}, False),
        ({"event": "update-sandbox", "sandbox_resources": None}, False),
        ({"event": "update", "sandbox_resources": _RESOURCES}, False),
        ({"event": "update", "overhead": _RESOURCES}, False),
        (
            {"event": "update-sandbox", "sandbox_resources": {}, "containers": [{"id": "c"}]},
            False,
        ),
        (
            {"event": "update-sandbox", "sandbox_resources": {}, "annotations": {"x": "1"}},
            False,
        ),
        (
            {
                "event": "update-sandbox",
                "sandbox_resources": {},
                "annotations": {"io.katacontainers.config.hypervisor.memory_slots": "4"},
            },
            True,
        ),
        ({"event": "update-sandbox", "sandbox_resources": {"cpu_period": -1}}, False),
        # The new resources are the pod's: pod-level limits beside them would be a second say.
        ({"event": "update-sandbox", "sandbox_resources": {}, "pod_resources": None}, True),
        ({"event": "update-sandbox", "sandbox_resources": {}, "pod_resources": {}}, False),
    ],
)
def test_the_reader_and_the_schema_agree_on_sandbox_resources(
    fields: dict[str, Any], accepted: bool
) -> None:
    doc = {**_BASE, **fields}
    assert _REQUEST_SCHEMA.is_valid(doc) == accepted
    if accepted:
        SandboxRequest.from_json(doc)
    else:
        with pytest.raises(InputError):
            SandboxRequest.from_json(doc)


# --- the executor, on the fake backend, with a real cgroup directory -----------------


def vm_virtio(plugged_mib: int) -> VmState:
    dev = MemoryDevice(
        "vm0", "virtio-mem", plugged_mib * MiB, plugged_mib * MiB, 2048 * MiB, 2 * MiB
    )
    return VmState(512 * MiB, (dev,), slots=8, device_space=15 * GiB)


def pod_cgroup(tmp_path: Path, limit_mib: int, usage_mib: int) -> Path:
    """A v2 pod cgroup with QEMU's cgroup (no limit) below it."""
    root = tmp_path / "cg"
    pod = root / "pod1"
    qemu = pod / "qemu"
    qemu.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("memory\n")
    (pod / "memory.max").write_text(f"{limit_mib * MiB}\n")
    (pod / "memory.current").write_text(f"{usage_mib * MiB}\n")
    (qemu / "memory.max").write_text("max\n")
    (qemu / "memory.current").write_text(f"{usage_mib * MiB}\n")
    return qemu


@pytest.fixture
def cfg(make_config: Callable[..., SizingConfig]) -> SizingConfig:
    return make_config(
        default_memory=512,
        default_maxmemory=8192,
        enable_virtio_mem=True,
        kata_mem={"sizing": "pod-limit", "vmm_overhead_mib": 128},
    )


def resize(
    tmp_path: Path,
    cfg: SizingConfig,
    backend: FakeBackend,
    cgroup: Path,
    resources_mib: int,
    overhead_mib: int = 256,
) -> tuple[Outcome, Record]:
    t = VirtualTime()
    backend.clock, backend.sleep = t.clock, t.sleep
    ask = SandboxResize(SandboxResources(resources_mib * MiB), SandboxResources(overhead_mib * MiB))
    state = SandboxState(tmp_path / "state", "sb")
    host_side = HostSide(cfg, HOST, str(cgroup), pod_limit=ask.pod_limit)
    result = run_locked(
        state,
        lambda: backend,
        cfg,
        HOST,
        ask.workload(),
        Options(allow_shrink=True),
        t.clock,
        t.sleep,
        host_side=host_side,
    )
    return result.outcome, state.load()


def test_a_shrink_to_the_new_limit_runs_the_safe_shrink(tmp_path: Path, cfg: SizingConfig) -> None:
    backend = FakeBackend(vm_virtio(1536), FakeGuest(used=300 * MiB))
    cgroup = pod_cgroup(tmp_path, 2304, 700)
    got, record = resize(tmp_path, cfg, backend, cgroup, 768)
    assert (got.status, got.observed) == ("Resized", 768 * MiB), got.message
    assert len(got.steps) > 1  # stepwise, each verified
    assert "so the pod cgroup may be set" in got.message
    assert cri_answer(got).code == "OK"
    assert record.pending_grow is None


def test_a_shrink_the_guest_cannot_give_is_deferred_and_changes_nothing(
    tmp_path: Path, cfg: SizingConfig
) -> None:
    backend = FakeBackend(vm_virtio(1536), FakeGuest(used=1500 * MiB))
    got, _ = resize(tmp_path, cfg, backend, pod_cgroup(tmp_path, 2304, 1700), 768)
    assert (got.status, got.reason) == ("Deferred", "UsageAboveTarget")
    assert "the VM is unchanged at 2048 MiB" in got.message
    assert backend.state.total == 2048 * MiB and cri_answer(got).code == "Unavailable"


def test_qemu_charged_above_the_new_limit_is_deferred(tmp_path: Path, cfg: SizingConfig) -> None:
    """The VM fits, but what the pod cgroup is charged does not (the fake VM's unplug
    does not lower the file this test wrote): the kubelet must not write the limit."""
    backend = FakeBackend(vm_virtio(256), FakeGuest(used=300 * MiB))
    got, record = resize(tmp_path, cfg, backend, pod_cgroup(tmp_path, 2304, 1010), 768)
    assert (got.status, got.reason) == ("Deferred", "ChargeAboveLimit"), got.message
    assert record.deferred is not None and record.deferred.reason == "ChargeAboveLimit"
    assert cri_answer(got).code == "Unavailable"


def test_a_grow_stops_at_the_limit_in_force_and_is_pending_until_it_is_raised(
    tmp_path: Path, cfg: SizingConfig
) -> None:
    backend = FakeBackend(vm_virtio(256), FakeGuest(used=300 * MiB))
    cgroup = pod_cgroup(tmp_path, 1024, 700)
    got, record = resize(tmp_path, cfg, backend, cgroup, 1536)
    # Within the old 1024 MiB: (1024 - 32 margin - 128) * 1024 / (1024 + 8) MiB.
    assert (got.status, got.observed) == ("Resized", 856 * MiB), got.message
    assert cri_answer(got).code == "OK"
    assert record.pending_grow == PendingGrow(1536 * MiB, str(cgroup), 1024 * MiB)
    assert not _grow_unblocked(record)
    (cgroup.parent / "memory.max").write_text(f"{1792 * MiB}\n")  # the kubelet's write
    assert _grow_unblocked(record)
    got, record = resize(tmp_path, cfg, backend, cgroup, 1536)
    assert (got.status, got.observed) == ("Resized", 1536 * MiB), got.message
    assert record.pending_grow is None


def test_kata_sizing_is_taken_down_to_what_the_new_limit_allows(
    tmp_path: Path, make_config: Callable[..., SizingConfig]
) -> None:
    """Kata's own sizing asks for default_memory + the resources (512 + 768 MiB), more than a
    1024 MiB pod cgroup holds with QEMU: the new limit caps the VM, and the shrink to that
    cap is what the answer is about."""
    kata = make_config(
        default_memory=512,
        default_maxmemory=8192,
        enable_virtio_mem=True,
        kata_mem={"vmm_overhead_mib": 128},
    )
    backend = FakeBackend(vm_virtio(1536), FakeGuest(used=300 * MiB))
    got, _ = resize(tmp_path, kata, backend, pod_cgroup(tmp_path, 2304, 700), 768)
    # (1024 - 32 - 128) * 1024 / 1032 MiB, in whole 2 MiB blocks.
    assert (got.status, got.observed) == ("Resized", 856 * MiB), got.message
    assert cri_answer(got).code == "OK"


def test_a_revert_of_a_grow_gives_back_what_it_took_and_leaves_nothing_pending(
    tmp_path: Path, cfg: SizingConfig
) -> None:
    """The kubelet's cgroup write failed after a grow was answered: it sends the old
    resources again, and the VM goes back with nothing left to grow later."""
    backend = FakeBackend(vm_virtio(256), FakeGuest(used=300 * MiB))
    cgroup = pod_cgroup(tmp_path, 1024, 700)
    got, record = resize(tmp_path, cfg, backend, cgroup, 1536)
    assert got.observed == 856 * MiB and record.pending_grow is not None
    got, record = resize(tmp_path, cfg, backend, cgroup, 768)  # the old resources
    assert (got.status, got.observed, cri_answer(got).code) == ("Resized", 768 * MiB, "OK")
    assert record.pending_grow is None and record.deferred is None
