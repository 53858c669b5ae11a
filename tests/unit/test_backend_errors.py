"""Every place a backend makes a :class:`~kata_mem.core.errors.BackendError`: what the
CLI prints (``message``) and what a step's outcome says (``with_class``, the error class
once), word for word. The raiser says whether its message names the class
(:meth:`~kata_mem.core.errors.BackendError.naming`); nothing reads it from the text."""

from __future__ import annotations

import asyncio
import queue
import xml.etree.ElementTree as ET
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from kata_mem.backends.fake import FakeBackend
from kata_mem.core.errors import BackendError, BackendUnsupported
from kata_mem.core.model import BackendObject, MemoryDevice, Step, VmState
from kata_mem.core.units import GiB, MiB


def _raised(fn: Callable[[], object]) -> BackendError:
    with pytest.raises(BackendError) as info:
        fn()
    return info.value


def _vm(slots: int = 8, space: int = 15 * GiB) -> VmState:
    dimm = MemoryDevice("kmdimm0", "dimm", 128 * MiB, 128 * MiB, 128 * MiB, slot=0, memdev="kmmem0")
    vmem = MemoryDevice("vm0", "virtio-mem", 0, 0, 2 * GiB, 2 * MiB)
    return VmState(
        512 * MiB,
        (dimm, vmem),
        slots=slots,
        device_space=space,
        loose=(BackendObject("kmmem7", 128 * MiB),),
    )


def _plug(device: str, memdev: str, size: int = 128 * MiB) -> Step:
    return Step("plug_dimm", device, size, size, 0, memdev)


#: Each refusal of the fake backend: the VM, the step, what the CLI and the outcome say.
FAKE = [
    (
        _vm(),
        Step("unplug_dimm", "kmdimm5", 0, 0, 0),
        "DeviceNotFound",
        "Device 'kmdimm5' not found",
    ),
    (
        _vm(),
        Step("delete_memdev", "kmmem0", 0, 0, 0),
        "GenericError",
        "object 'kmmem0' is in use, can not be deleted",
    ),
    (_vm(), Step("delete_memdev", "kmmem9", 0, 0, 0), "GenericError", "object 'kmmem9' not found"),
    (_vm(), Step("resize_virtio_mem", "vm9", 0, 0, 0), "DeviceNotFound", "Device 'vm9' not found"),
    (
        _vm(),
        Step("resize_virtio_mem", "vm0", 3 * MiB, 0, 0),
        "GenericError",
        "'requested-size' has to be multiples of 'block-size' (0x200000)",
    ),
    (
        _vm(),
        Step("resize_virtio_mem", "vm0", 4 * GiB, 0, 0),
        "GenericError",
        "'requested-size' cannot exceed the memory backend size(0x80000000)",
    ),
    (
        _vm(),
        _plug("kmdimm1", "kmmem0"),
        "GenericError",
        "attempt to add duplicate property 'kmmem0' to object (type 'container')",
    ),
    (_vm(), _plug("kmdimm0", "kmmem1"), "GenericError", "Duplicate device ID 'kmdimm0'"),
    (_vm(slots=1), _plug("kmdimm1", "kmmem1"), "GenericError", "no free slots available"),
    (
        _vm(),
        _plug("kmdimm1", "kmmem1", 129 * MiB),
        "GenericError",
        "backend memory size must be multiple of 0x200000",
    ),
    (
        _vm(space=2 * GiB + 256 * MiB),
        _plug("kmdimm1", "kmmem1", 256 * MiB),
        "GenericError",
        "not enough space, currently 0x88000000 in use of total space for memory devices 0x90000000",
    ),
]


@pytest.mark.parametrize(("vm", "step", "error_class", "text"), FAKE, ids=lambda v: "")
def test_the_fake_backends_refusals(vm: VmState, step: Step, error_class: str, text: str) -> None:
    made = _raised(lambda: FakeBackend(vm).begin(step))
    assert (made.error_class, made.message) == (error_class, text)
    assert made.with_class == f"{error_class}: {text}"


def _qmp_backend() -> Any:
    from kata_mem.backends.qmp import QmpBackend

    return QmpBackend


def test_qmp_error_replies_and_timeouts_name_their_class() -> None:
    pytest.importorskip("qemu.qmp")
    from qemu.qmp.message import Message
    from qemu.qmp.models import ErrorResponse
    from qemu.qmp.qmp_client import ExecuteError

    qmp = _qmp_backend()
    at = SimpleNamespace(path="/run/vc/vm/sb/qmp.sock")
    reply = Message({"error": {"class": "GenericError", "desc": "no free slots available"}})
    refused = ExecuteError(ErrorResponse(reply), Message({"execute": "device_add"}), reply)
    made = qmp._failed(at, refused, "device_add")
    text = "QMP socket /run/vc/vm/sb/qmp.sock: device_add failed: GenericError: no free slots available"
    assert (type(made), made.error_class, made.message, made.with_class) == (
        BackendError,
        "GenericError",
        text,
        text,
    )
    made = qmp._failed(at, asyncio.TimeoutError(), "query-memory-devices")
    text = (
        "QMP socket /run/vc/vm/sb/qmp.sock: query-memory-devices: Timeout: no reply within "
        "10 s (the monitor is hung or the VM is paused)"
    )
    assert (made.error_class, made.message, made.with_class) == ("Timeout", text, text)


@pytest.mark.parametrize(
    ("reply", "text"),
    [
        ({}, "unexpected QMP reply: query-memory-devices is not a list"),
        (
            [{"type": "dimm", "data": "ProtocolError"}],
            "unexpected QMP reply: query-memory-devices[0].data: expected an object, got 'ProtocolError'",
        ),
    ],
)
def test_qmp_replies_of_the_wrong_shape(reply: object, text: str) -> None:
    """The second quotes the class's name as QEMU's value: the class is still said once,
    in front, as for any message that does not name it."""
    pytest.importorskip("qemu.qmp")
    made = _raised(lambda: _qmp_backend()._devices(SimpleNamespace(), reply))
    assert (made.error_class, made.message) == ("ProtocolError", text)
    assert made.with_class == f"ProtocolError: {text}"


def test_libvirt_errors() -> None:
    libvirt = pytest.importorskip("libvirt")
    from kata_mem.backends.libvirt import LibvirtBackend, _size, _translate

    def failure(code: int) -> BackendError:
        exc = libvirt.libvirtError("no")
        exc.err = (code, 0, "this function is not supported", 2, 0, None, None, None, None, 0, 0)
        made = _translate(exc, "attachDeviceFlags", "qemu:///system vm0")
        assert isinstance(made, BackendError)
        return made

    made = failure(libvirt.VIR_ERR_NO_SUPPORT)
    text = (
        "qemu:///system vm0: attachDeviceFlags failed: VIR_ERR_NO_SUPPORT: "
        "this function is not supported"
    )
    assert (type(made), made.message, made.with_class) == (BackendUnsupported, text, text)
    made = failure(libvirt.VIR_ERR_OPERATION_FAILED)
    assert (type(made), made.error_class) == (BackendError, "VIR_ERR_OPERATION_FAILED")
    assert made.with_class == made.message == text.replace("NO_SUPPORT", "OPERATION_FAILED")

    stub = SimpleNamespace(
        _events=queue.Queue(), _seen=set(), _where="qemu:///system vm0", _element=lambda _: None
    )
    made = _raised(
        lambda: LibvirtBackend.begin(stub, Step("delete_memdev", "kmmem0", 0, 0, 0))  # type: ignore[arg-type]
    )
    text = (
        "qemu:///system vm0: cannot delete kmmem0: libvirt deletes a DIMM's memory backend "
        "with the device and reports no backend objects"
    )
    assert (type(made), made.message) == (BackendUnsupported, text)
    assert made.with_class == f"VIR_ERR_NO_SUPPORT: {text}"
    made = _raised(
        lambda: LibvirtBackend.begin(stub, Step("resize_virtio_mem", "vm0", 0, 0, 0))  # type: ignore[arg-type]
    )
    assert made.message == "virtio-mem device vm0 not found in the domain"
    assert made.with_class == f"VIR_ERR_DEVICE_MISSING: {made.message}"
    made = _raised(lambda: _size(ET.fromstring("<size unit='furlong'>1</size>")))
    assert made.with_class == "ProtocolError: unexpected libvirt XML: unit 'furlong'"
