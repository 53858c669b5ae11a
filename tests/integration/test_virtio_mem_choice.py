"""A VM with more than one virtio-mem device, on the scripted QMP server: kata-mem
resizes only the sandbox's (the only one, or Kata's ``virtiomem0``) and leaves the
others as they are, saying so; when none can be told to be the sandbox's, it resizes
none, and never shrinks another tool's device."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliResult
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST_ARGS, write_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer

Run = Callable[..., CliResult]
MiB = 1 << 20
Apply = Callable[..., tuple[int, dict[str, Any]]]


@pytest.fixture
def qemu() -> FakeQemu:
    # Another tool's device first, as QEMU lists the devices in the order they were added.
    fake = FakeQemu(balloon=True)
    fake.add_virtio_mem("othervmem", 256 * MiB, 1024 * MiB)
    return fake


@pytest.fixture
def apply(run_cli: Run, tmp_path: Path, qemu: FakeQemu) -> Iterator[Apply]:
    cfg = write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "enable_virtio_mem": True,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
        kata_mem={"step_timeout_s": 2, "state_dir": str(tmp_path / "state")},
    )
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as server:

        def run(*args: str) -> tuple[int, dict[str, Any]]:
            r = run_cli(
                "apply", "--config", str(cfg), "--qmp", str(server.path), "--sandbox", "sb",
                *HOST_ARGS, "--json", *args,
            )  # fmt: skip
            assert r.out.strip(), r.err
            return r.code, json.loads(r.out)

        yield run


def _sizes(qemu: FakeQemu) -> dict[str, tuple[int, int]]:
    return {
        did: (d["data"]["size"] // MiB, d["data"]["requested-size"] // MiB)
        for did, d in qemu.devices.items()
    }


def test_only_katas_device_is_grown_and_shrunk(apply: Apply, qemu: FakeQemu) -> None:
    # Before: resize_virtio_mem othervmem (the first listed), up and then down to 2 MiB.
    qemu.add_virtio_mem("virtiomem0", 0, 2048 * MiB)
    code, doc = apply("--limit", "512Mi")
    assert (code, doc["status"]) == (0, "Resized"), doc
    assert [s["device"] for s in doc["steps"]] == ["virtiomem0"]
    notes = doc["plan"]["warnings"]
    assert any("left alone: virtio-mem othervmem" in w for w in notes), notes
    # 512 + 512 MiB asked; the other device's 256 MiB count as memory the VM has.
    assert _sizes(qemu) == {"othervmem": (256, 256), "virtiomem0": (256, 256)}
    code, doc = apply("--allow-shrink")
    assert (code, doc["status"]) == (0, "Resized"), doc
    assert {s["device"] for s in doc["steps"]} == {"virtiomem0"}
    assert _sizes(qemu) == {"othervmem": (256, 256), "virtiomem0": (0, 0)}


def test_none_is_resized_when_none_is_the_sandboxs(apply: Apply, qemu: FakeQemu) -> None:
    # Before: othervmem grown to 1024 MiB, then shrunk in steps to 0.
    qemu.add_virtio_mem("vm0", 0, 2048 * MiB)
    code, doc = apply("--limit", "512Mi")
    assert (code, doc["status"], doc["reason"]) == (0, "Infeasible", "BackendCannotGrow"), doc
    assert "virtio-mem devices othervmem, vm0, none of them Kata's virtiomem0" in doc["message"]
    code, doc = apply("--allow-shrink")
    assert (code, doc["status"], doc["reason"]) == (0, "Infeasible", "BackendCannotShrink"), doc
    assert _sizes(qemu) == {"othervmem": (256, 256), "vm0": (0, 0)}
