"""The QEMU backend, over QMP with QEMU's own client library ``qemu.qmp``.

``qemu.qmp`` is asynchronous; this module keeps one private event loop per
connection and drives it from a synchronous facade, so nothing above the
backend knows about asyncio. Events (``ACPI_DEVICE_OST``, ``DEVICE_DELETED``,
``DEVICE_UNPLUG_GUEST_ERROR``, ``MEMORY_DEVICE_SIZE_CHANGE``) are collected by a
listener while commands run and read by :meth:`QmpBackend.poll`. Every QMP failure
becomes a kata-mem error here, with the QMP error class and text kept.

The session only: which socket is talked to, and whether the process listening there is
the VMM a saved request was applied to, is decided before it begins, in
:mod:`kata_mem.backends.qmp_socket`. One module (about 850 lines) because it is one
session's state: :class:`QmpBackend` holds one connection's event loop, the events
collected, the replies read ahead and what the connection already knows (the QOM lists,
the machine's memory, the balloon's polling interval), which its commands read and keep
up to date. What reads QMP's replies into values is pure and shared with libvirt
(:mod:`kata_mem.core.reports`).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Coroutine
from typing import Any, Optional, TypeVar

from kata_mem.core.errors import (
    BackendError,
    BackendUnavailable,
    KataMemError,
    MissingDependency,
)
from kata_mem.core.fields import Fields, is_bool, python_value
from kata_mem.core.values import replace

try:
    from qemu.qmp import (
        ConnectError,
        EventListener,
        ExecuteError,
        QMPClient,
        QMPError,
    )
    from qemu.qmp.qmp_client import GreetingError
except ImportError as exc:  # a dependency of kata-mem: missing only from a broken install
    raise MissingDependency(
        f"the QMP backend needs qemu.qmp, which cannot be imported ({exc}); "
        "install it with: pip install 'qemu.qmp>=0.0.3' (or reinstall kata-mem)"
    ) from exc
from kata_mem.backends.qmp_socket import check_socket, dial, identify, not_dialed, refused
from kata_mem.core.backing import MemoryBackend
from kata_mem.core.endpoint import VmmIdentity
from kata_mem.core.model import MEMDEV_PREFIX, GuestUsage, MemoryDevice, Step, VmState
from kata_mem.core.reports import StepProgress, UsageField, balloon_usage, resize_progress, vm_state
from kata_mem.edges.logs import describe, get_logger

log = get_logger(__name__)
T = TypeVar("T")

#: A QMP command that takes longer than this is treated as a hung monitor.
COMMAND_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
CONNECT_ATTEMPTS = 3
#: QEMU rate-limits MEMORY_DEVICE_SIZE_CHANGE to about one a second, so a pending
#: virtio-mem resize is read again this soon instead of waited for.
VIRTIO_MEM_POLL_S = 0.02
#: The balloon's guest-stats names for each GuestUsage field (sizes in bytes).
_STATS: dict[UsageField, str] = {
    "total": "stat-total-memory",
    "available": "stat-available-memory",
    "free": "stat-free-memory",
    "disk_caches": "stat-disk-caches",
    "major_faults": "stat-major-faults",
}
#: ACPI _OST: 0 = success, 0x84 = ejection in progress; anything else on an eject is a refusal.
_OST_EJECT_OK = (0x0, 0x84)
_OST_INSERT, _OST_EJECT = 0x1, 0x3
#: virtio-balloon's queues are inflate, deflate, statistics (virtio spec 1.2, 5.5.2).
_BALLOON_STATS_QUEUE = 2


#: A QMP command and its arguments.
_Command = tuple[str, Optional[dict[str, object]]]


def _key(cmd: str, args: Optional[dict[str, object]]) -> str:
    return json.dumps([cmd, args], sort_keys=True)


def _exited(pid: int) -> bool:
    """Whether process ``pid`` is gone (or a zombie: it has exited, not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read(4096)
    except OSError:
        return True
    # The state follows the command name, which is in parentheses and may hold any byte.
    return stat_line.rpartition(b")")[2].split()[:1] in ([b"Z"], [b"X"])


def _printable(raw: bytes, limit: int = 40) -> str:
    """The start of what a peer sent, as text a terminal shows safely."""
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in raw[:limit])
    return f'"{text}"' + (" ..." if len(raw) > limit else "")


def _no_session(cause: BaseException) -> str:
    """Why a connection gave no QMP session, for a user: what happened and what to do."""
    said = refused(cause)
    if said is not None:
        return said
    not_qmp = (
        "this is not a QEMU QMP monitor; pass the socket QEMU was started with "
        "(-qmp unix:PATH,server=on,wait=off)"
    )
    if isinstance(cause, GreetingError):
        raw = getattr(cause.exc, "raw", None)
        sent = f"it sent {_printable(raw)}" if isinstance(raw, bytes) else "it sent JSON"
        return f"the first message is not a QMP greeting ({sent}): {not_qmp}"
    if isinstance(cause, UnicodeDecodeError):
        return (
            f"the first message is not a QMP greeting (it sent binary data "
            f"{_printable(cause.object)}): {not_qmp}"
        )
    if isinstance(cause, (EOFError, ConnectionResetError, BrokenPipeError)):
        return (
            "the peer closed the connection without a QMP greeting: the VM may be shutting "
            f"down, or {not_qmp}"
        )
    return f"no QMP session: {describe(cause)}"


async def _open(
    path: str,
    sock: socket.socket,
    st: os.stat_result,
    expect: Optional[VmmIdentity],
    made: list[QMPClient],
    unpinned: bool = False,
) -> tuple[QMPClient, EventListener, VmmIdentity]:
    """A client on ``sock``, a socket of our own connected to ``path``
    (:func:`~kata_mem.backends.qmp_socket.dial`), so that its peer can be asked who it is
    (:func:`~kata_mem.backends.qmp_socket.identify`) before the QMP session starts; with
    its event listener, and the VMM it reached. The client is put in ``made`` as soon as it exists, so that a
    caller whose wait ran out can ask how far it got.

    The client and the listener are made here, on the loop that runs them: on Python 3.9
    an ``asyncio.Queue`` (both hold one) takes ``asyncio.get_event_loop()`` when it is
    created (CPython 3.9 Lib/asyncio/queues.py, ``Queue.__init__``), which outside a
    running loop is another loop than ours, or an error in a thread that has none (the
    service's workers). 3.10 binds it to the running loop at first use instead
    (Lib/asyncio/mixins.py, ``_LoopBoundMixin``: python/cpython#23420, bpo-42392).

    :raises BackendUnavailable: another VMM than ``expect`` listens.
    """
    client = QMPClient("kata-mem")
    made.append(client)
    events = EventListener()
    client.register_listener(events)
    try:
        vmm = identify(path, st, sock, expect, unpinned)
        await client.connect(sock)
    except BaseException:
        sock.close()
        raise
    return client, events, vmm


def _object_add_args(backend: Optional[MemoryBackend], memdev: str, size: int) -> dict[str, object]:
    """The ``object-add`` arguments of a DIMM's backend object ``memdev`` of ``size`` bytes,
    as Kata's Go runtime sends them (src/runtime/pkg/govmm/qemu/qmp.go ``ExecMemdevAdd``:
    ``mem-path`` only for a file, ``share`` only when true; runtime-rs sends the same for
    its file). A directory as ``mem-path`` makes QEMU create a file in it and unlink it
    at once (softmmu/physmem.c ``file_ram_open``), so nothing is left on the host when
    the object goes.

    :raises KataMemError: no backend was given when connecting (a bug: see
        :meth:`QmpBackend.connect`); nothing is sent.
    """
    if backend is None:
        raise KataMemError(
            f"internal error: a DIMM ({memdev}) was to be plugged over a QMP connection opened "
            "without its memory backend; nothing was sent"
        )
    args: dict[str, object] = {"qom-type": backend.qom_type, "id": memdev, "size": size}
    if backend.kind == "file":
        args["mem-path"] = backend.mem_path
    if backend.share:
        args["share"] = True
    return args


#: Typed reads of QEMU's replies: a reply of the wrong shape is a protocol error.
_REPLY = Fields(
    "unexpected QMP reply:", lambda message: BackendError(message, "ProtocolError"), python_value
)


#: The ``query-memory-devices`` fields a device's size, requested size, maximum size and
#: start are read from (qapi/machine.json: ``PCDIMMDeviceInfo``, ``VirtioMEMDeviceInfo``): a
#: DIMM's one size is all three.
_DEVICE_FIELDS: dict[str, tuple[str, str, str, str]] = {
    "dimm": ("size", "size", "size", "addr"),
    "virtio-mem": ("size", "requested-size", "max-size", "memaddr"),
}


def _device(kind: str, data: dict[str, Any], at: str) -> MemoryDevice:
    """A DIMM or virtio-mem device from its entry's ``data`` (at ``at`` in the reply)."""
    size, requested, max_size, addr = _DEVICE_FIELDS[kind]
    dimm = kind == "dimm"
    return MemoryDevice(
        id=str(data.get("id") or ""),
        kind="dimm" if dimm else "virtio-mem",
        size=_REPLY.required_integer(data, size, at),
        requested=_REPLY.required_integer(data, requested, at),
        max_size=_REPLY.required_integer(data, max_size, at),
        block=0 if dimm else _REPLY.required_integer(data, "block-size", at),
        slot=_REPLY.required_integer(data, "slot", at) if dimm else None,
        memdev=str(data.get("memdev", "")).removeprefix("/objects/"),
        hotplugged=bool(data.get("hotplugged", False)) if dimm else True,
        addr=_REPLY.integer(data, addr, at, minimum=0),
    )


class QmpBackend:
    """Implements :class:`~kata_mem.backends.Backend` for QEMU."""

    def __init__(
        self,
        path: str,
        client: QMPClient,
        events: EventListener,
        loop: asyncio.AbstractEventLoop,
        vmm: VmmIdentity,
        dimm_backend: Optional[MemoryBackend] = None,
    ) -> None:
        self.path = path
        #: The VMM this connection reached (its socket file and its process).
        self.vmm = vmm
        self.vmm_pid = vmm.peer_pid
        self._client = client
        self._events = events
        self._loop = loop
        #: What backs each DIMM this connection plugs (None: it plugs none).
        self._dimm_backend = dimm_backend
        self._seen: list[dict[str, Any]] = []
        self._balloon: Optional[str] = None
        self._machine: Optional[tuple[int, int, Optional[int]]] = None
        self._listed: dict[str, list[tuple[str, str]]] = {}
        #: The sizes of the backend objects read so far (an object's size never changes).
        self._sizes: dict[str, int] = {}
        self._stats_queue: Optional[bool] = None
        self._interval: Optional[int] = None
        #: The virtio-mem step polled last, since the last begin.
        self._resizing: Optional[Step] = None
        #: Replies of commands sent ahead (:meth:`_read_ahead`), until they are asked for.
        self._ahead: dict[str, tuple[object]] = {}
        #: The devices read with a virtio-mem resize, for its first poll.
        self._read_with_change: Optional[tuple[object]] = None
        #: A DIMM's plug was found done from its event, and QEMU has not been read since:
        #: the observation that verifies it is the executor's next read of the devices.
        self._verify_due = False
        #: Commands sent, and round trips waited for (commands sent together count once).
        self.commands = 0
        self.round_trips = 0

    @classmethod
    def connect(
        cls,
        path: str,
        *,
        dimm_backend: Optional[MemoryBackend] = None,
        vmm: Optional[VmmIdentity] = None,
        unpinned: bool = False,
    ) -> QmpBackend:
        """Connect and negotiate capabilities; nothing else is sent, so connecting changes
        nothing on the VM. DIMMs it plugs get ``dimm_backend``
        (:func:`kata_mem.core.backing.dimm_backend`); without one it plugs none, so that
        no caller can plug a DIMM whose memory it did not decide. With ``vmm`` (a saved
        request's), only to that VMM: another
        socket at ``path``, or another process listening on it, is never talked to.
        ``unpinned`` (a saved request without ``vmm``): only to a socket and a listener
        of root's or the caller's (:mod:`kata_mem.backends.qmp_socket`: ``check_socket``,
        ``identify``).

        :raises BackendUnavailable: missing socket, not a socket, another VMM than ``vmm``
            (these three, and a refused connection, with ``gone``), an unpinned VMM not
            proven, or no greeting.
        """
        st = check_socket(path, vmm, unpinned=unpinned)
        for attempt in range(CONNECT_ATTEMPTS):
            ends = time.monotonic() + CONNECT_TIMEOUT_S
            try:
                sock = dial(path, CONNECT_TIMEOUT_S)
            except BlockingIOError as exc:
                raise BackendUnavailable(
                    f"QMP socket {path}: its backlog stayed full for {CONNECT_TIMEOUT_S:g} s: "
                    "other clients wait for the monitor (QEMU serves one at a time); retry later"
                ) from exc
            except OSError as exc:
                raise not_dialed(path, exc) from exc
            loop = asyncio.new_event_loop()
            made: list[QMPClient] = []
            try:
                left = max(ends - time.monotonic(), 0.0)
                try:
                    client, events, reached = loop.run_until_complete(
                        asyncio.wait_for(_open(path, sock, st, vmm, made, unpinned), left)
                    )
                except BaseException:
                    sock.close()  # also when the wait ran out before _open began
                    raise
                break
            except asyncio.TimeoutError as exc:  # an OSError too: caught first
                loop.close()
                if made and made[0].greeting is not None:
                    raise BackendUnavailable(
                        f"QMP socket {path}: it sent a QMP greeting, then did not answer the "
                        f"capabilities negotiation (qmp_capabilities) within "
                        f"{CONNECT_TIMEOUT_S:g} s: the monitor is hung, or this is not QEMU "
                        "itself but something that only looks like its monitor; retry later, or "
                        "check what listens on it"
                    ) from exc
                raise BackendUnavailable(
                    f"QMP socket {path}: no QMP greeting within {CONNECT_TIMEOUT_S:g} s: another "
                    "client may hold the monitor (QEMU serves one at a time), or this is not a "
                    "QEMU monitor socket; retry later, or check what listens on it"
                ) from exc
            except BackendUnavailable:
                loop.close()
                raise
            except (ConnectError, OSError) as exc:
                loop.close()
                cause = exc.exc if isinstance(exc, ConnectError) else exc
                if isinstance(cause, GreetingError) and attempt + 1 < CONNECT_ATTEMPTS:
                    # QEMU can hand an event meant for the previous client to a new connection
                    # before the greeting (a race in its monitor); a new connection is clean.
                    time.sleep(0.05)
                    continue
                raise BackendUnavailable(f"QMP socket {path}: {_no_session(cause)}") from exc
            except QMPError as exc:
                loop.close()
                raise BackendUnavailable(
                    f"QMP socket {path}: no QMP session: {describe(exc)}"
                ) from exc
        return cls(path, client, events, loop, reached, dimm_backend)

    # -- plumbing -----------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T], what: str) -> T:
        try:
            return self._loop.run_until_complete(asyncio.wait_for(coro, COMMAND_TIMEOUT_S))
        except (ExecuteError, asyncio.TimeoutError, QMPError, OSError, EOFError) as exc:
            raise self._failed(exc, what) from exc

    def _failed(self, exc: BaseException, what: str) -> KataMemError:
        """The kata-mem error for a QMP failure during ``what``."""
        if isinstance(exc, ExecuteError):
            # The QMP error class is part of what the user reads (docs, exit 7).
            return BackendError.naming(
                f"QMP socket {self.path}: {what} failed",
                exc.error_class,
                str(exc).strip() or "(QEMU gave no description)",
            )
        if isinstance(exc, asyncio.TimeoutError):
            return BackendError.naming(
                f"QMP socket {self.path}: {what}",
                "Timeout",
                f"no reply within {COMMAND_TIMEOUT_S:g} s (the monitor is hung or the VM is paused)",
            )
        # qemu.qmp's own words ("StateError: QMPClient is disconnecting. Call
        # disconnect() ...") are about its state machine, not about the VM: debug only.
        log.debug("QMP socket %s: %s: %s", self.path, what, describe(exc))
        return BackendUnavailable(
            f"QMP socket {self.path}: the VM went away during {what}: {self._gone_text()}; "
            "the next call reconciles what was done"
        )

    def _gone_text(self) -> str:
        """What became of QEMU, when the connection ended under a command."""
        pid = self.vmm_pid
        if pid is None:
            return "QEMU closed its monitor connection (it exited, was killed, or is shutting down)"
        if _exited(pid):
            return f"QEMU (pid {pid}) has exited"
        return f"QEMU (pid {pid}) closed its monitor connection (it may be shutting down)"

    def _execute(self, cmd: str, args: Optional[dict[str, object]] = None) -> object:
        ahead = self._ahead.pop(_key(cmd, args), None)
        if ahead is not None:
            if isinstance(ahead[0], KataMemError):
                raise ahead[0]
            return ahead[0]
        self.round_trips += 1
        self.commands += 1
        return self._run(self._client.execute(cmd, args), cmd)

    def _read_ahead(self, commands: list[tuple[str, Optional[dict[str, object]]]]) -> None:
        """Send ``commands`` at once and keep their replies (or errors) for the
        :meth:`_execute` calls that ask for them: one round trip instead of one each. Read-only
        commands, or a change followed by the reads that must come after it (its caller
        asks for the change's reply first, so that its error is raised where it was sent).
        QEMU answers a client's commands in order (docs/interop/qmp-spec.rst,
        "Commands Responses"), and ``qemu.qmp`` matches replies by id."""
        todo = [(c, a) for c, a in commands if _key(c, a) not in self._ahead]
        if len(todo) < 2:
            return

        async def batch() -> list[object]:
            return list(
                await asyncio.gather(
                    *(self._client.execute(c, a) for c, a in todo), return_exceptions=True
                )
            )

        self.round_trips += 1
        self.commands += len(todo)
        replies = self._run(batch(), todo[0][0])
        for (cmd, args), reply in zip(todo, replies, strict=True):
            if isinstance(reply, BaseException) and not isinstance(reply, ExecuteError):
                self._ahead.clear()
                raise self._failed(reply, cmd) from reply
            failed = self._failed(reply, cmd) if isinstance(reply, ExecuteError) else None
            self._ahead[_key(cmd, args)] = (reply if failed is None else failed,)

    def _per_connection(self) -> list[tuple[str, Optional[dict[str, object]]]]:
        """The reads that are made once per connection and not made yet.

        What each proves (an apply sends no command that neither carries the change nor
        proves something its rules stand on): ``qom-list /machine/peripheral``, the
        balloon (the guest's readings) and the device ids a new DIMM must not take;
        ``qom-list /objects``, the object ids a new backend must not take and the
        ``kmmem*`` objects no device uses (the ownership proof: orphans and look-alikes);
        ``qom-get /machine memory``, the boot memory, slots and ``maxmem`` the plan is
        bounded by."""
        wanted: list[tuple[str, Optional[dict[str, object]]]] = [
            ("qom-list", {"path": p})
            for p in ("/machine/peripheral", "/objects")
            if p not in self._listed
        ]
        if self._machine is None:
            wanted.append(("qom-get", {"path": "/machine", "property": "memory"}))
        return wanted

    def _drain_events(self, wait_s: float = 0.0) -> None:
        """Collect the events QEMU has sent; with ``wait_s``, first wait that long for one."""
        if wait_s > 0:
            try:
                event = self._loop.run_until_complete(asyncio.wait_for(self._events.get(), wait_s))
                self._seen.append(dict(event))
            except asyncio.TimeoutError:
                pass
        for _ in range(3):  # let the reader task take in what is already on the socket
            self._run(asyncio.sleep(0), "event read")
        for event in self._events.clear():
            self._seen.append(dict(event))

    def _event(
        self, name: str, device: str, source: Optional[int] = None
    ) -> Optional[dict[str, Any]]:
        """The latest event ``name`` about ``device`` (for ACPI_DEVICE_OST, of ``source``)."""
        for event in reversed(self._seen):
            if event.get("event") != name:
                continue
            data = event.get("data") or {}
            info = data.get("info") if name == "ACPI_DEVICE_OST" else data
            if not isinstance(info, dict) or info.get("device") != device:
                continue
            if source is None or info.get("source") == source:
                return dict(data)
        return None

    # -- the Backend protocol ---------------------------------------------------------

    def _query_devices(self) -> tuple[list[MemoryDevice], list[int], list[tuple[str, int, int]]]:
        """The DIMM and virtio-mem devices, the sizes of the other memory devices, and the
        regions of those in the device-memory area (nvdimm, virtio-pmem: sgx-epc has its own)."""
        return self._devices(self._execute("query-memory-devices"))

    def _keep_for_verifying(self, raw: object) -> None:
        """Keep a ``query-memory-devices`` reply read after a step was done for the
        observation that verifies the step, which the executor makes next: it is QEMU's
        answer after the step, and asking again would only repeat it. A later step's
        :meth:`begin` drops it, and so does that observation."""
        self._ahead[_key("query-memory-devices", None)] = (raw,)

    def _devices(
        self, raw: object
    ) -> tuple[list[MemoryDevice], list[int], list[tuple[str, int, int]]]:
        """:meth:`_query_devices` from its reply."""
        if not isinstance(raw, list):
            raise BackendError(
                "unexpected QMP reply: query-memory-devices is not a list", "ProtocolError"
            )
        devices: list[MemoryDevice] = []
        others: list[int] = []
        regions: list[tuple[str, int, int]] = []
        for i, item in enumerate(raw):
            at = f"query-memory-devices[{i}]"
            entry = _REPLY.object(item, at)
            kind = entry.get("type")
            data = _REPLY.object(entry.get("data"), f"{at}.data")
            if kind in _DEVICE_FIELDS:
                devices.append(_device(kind, data, f"{at}.data"))
            elif isinstance(data.get("size"), int):
                others.append(int(data["size"]))  # nvdimm, virtio-pmem, sgx-epc
                start = data.get("addr", data.get("memaddr"))
                if kind in ("nvdimm", "virtio-pmem") and isinstance(start, int):
                    regions.append((f"{kind} {data.get('id') or ''}".strip(), start, data["size"]))
        return devices, others, regions

    def _machine_memory(self) -> tuple[int, int, Optional[int]]:
        """Boot memory, DIMM slots and ``maxmem``: fixed for the VM's life, so asked once."""
        if self._machine is None:
            try:
                at = "qom-get /machine memory"
                machine = _REPLY.object(
                    self._execute("qom-get", {"path": "/machine", "property": "memory"}), at
                )
                self._machine = (
                    _REPLY.required_integer(machine, "size", at),
                    _REPLY.integer(machine, "slots", at) or 0,
                    _REPLY.required_integer(machine, "max-size", at),
                )
            except BackendError:  # QEMU before 7.1 has no such property
                at = "query-memory-size-summary"
                summary = _REPLY.object(self._execute(at), at)
                self._machine = (_REPLY.required_integer(summary, "base-memory", at), 0, None)
        return self._machine

    def _children(self, path: str) -> list[tuple[str, str]]:
        """The QOM children of ``path``, with their types (``/objects``: every object;
        ``/machine/peripheral``: every device with an id), not its properties.

        Listed once per connection: they serve to find the balloon and to give new ids
        that collide with nothing, which kata-mem picks once per call, from its first
        observation. What is plugged is read afresh on every observation."""
        if path not in self._listed:
            listed = self._execute("qom-list", {"path": path})
            self._listed[path] = [
                (str(o.get("name")), str(o.get("type")))
                for o in (listed if isinstance(listed, list) else [])
                if isinstance(o, dict) and str(o.get("type", "")).startswith("child<")
            ]
        return self._listed[path]

    def _loose_backends(self, devices: list[MemoryDevice]) -> dict[str, int]:
        """The memory backend objects named like kata-mem's (``kmmem*``) that no device
        uses, and their sizes: the only ones that can be orphans or look-alikes, since
        kata-mem names every object it creates so (``plan.steps._new_ids``). Any other object
        is only an id that new ones avoid, which the list of ``/objects`` gives.

        Found from that list, whose types tell memory backends (QEMU's are all
        ``memory-backend-*``: backends/hostmem-ram.c, hostmem-file.c, hostmem-memfd.c,
        hostmem-epc.c), so that no ``query-memdev`` is needed; a size, which only the
        ownership proof uses, is read only for these objects, usually none."""
        in_use = {d.memdev for d in devices}
        names = [
            n
            for n, kind in self._children("/objects")
            if kind.startswith("child<memory-backend-")
            and n.startswith(MEMDEV_PREFIX)
            and n not in in_use
        ]
        size: dict[str, tuple[str, Optional[dict[str, object]]]] = {
            n: ("qom-get", {"path": f"/objects/{n}", "property": "size"}) for n in names
        }
        self._read_ahead([size[n] for n in names if n not in self._sizes])
        for n in names:
            if n not in self._sizes:
                reply = {"size": self._execute(*size[n])}
                self._sizes[n] = _REPLY.required_integer(reply, "size", f"qom-get /objects/{n}")
        return {n: self._sizes[n] for n in names}

    def _object_add(self, memdev: str, props: dict[str, object]) -> None:
        self._execute("object-add", props)
        # Kept up to date, as QEMU serves one client at a time on a monitor (as for
        # :meth:`_children`): a re-read after a step would only say what the call knows.
        if "/objects" in self._listed:
            self._listed["/objects"].append((memdev, f"child<{props['qom-type']}>"))

    def _object_del(self, memdev: str) -> None:
        self._execute("object-del", {"id": memdev})
        if "/objects" in self._listed:
            self._listed["/objects"] = [o for o in self._listed["/objects"] if o[0] != memdev]

    def observe(self) -> VmState:
        # query-memory-devices: what is plugged now, the plan's input and, after a step,
        # its verification from the hypervisor. The first observation of a connection
        # sends it with the reads made once (one round trip).
        self._read_ahead([*self._per_connection(), ("query-memory-devices", None)])
        try:
            base, slots, maxmem = self._machine_memory()
            devices, others, regions = self._query_devices()
        finally:
            # Never a later observation's: what is plugged is read afresh every time.
            self._ahead.pop(_key("query-memory-devices", None), None)
            self._verify_due = False
        state = vm_state(
            base=base,
            maxmem=maxmem,
            slots=slots,
            devices=devices,
            unmanaged=others,
            unmanaged_regions=regions,
            memory_backends=self._loose_backends(devices),
            other_ids=[
                n for n, _ in self._children("/objects") + self._children("/machine/peripheral")
            ],
        )
        # QEMU runs on this host: a pid SO_PEERCRED could not give hides its cgroup.
        return replace(state, vmm_pid=self.vmm_pid, vmm_pid_hidden=self.vmm_pid is None)

    def begin(self, step: Step) -> None:
        # The commands that carry the change. Only events that follow them are about this
        # step, and only devices read after them.
        self._events.clear()
        self._seen.clear()
        self._ahead.pop(_key("query-memory-devices", None), None)
        self._read_with_change = None
        self._verify_due = False
        self._resizing = None
        if step.action == "plug_dimm":
            memdev = step.memdev
            self._object_add(memdev, _object_add_args(self._dimm_backend, memdev, step.size))
            try:
                self._execute(
                    "device_add", {"driver": "pc-dimm", "id": step.device, "memdev": memdev}
                )
            except BackendError:
                # No orphan backend object: the DIMM never existed.
                try:
                    self._object_del(memdev)
                except BackendError as exc:
                    log.warning("could not delete %s after a failed device_add: %s", memdev, exc)
                raise
        elif step.action == "unplug_dimm":
            self._execute("device_del", {"id": step.device})
        elif step.action == "delete_memdev":
            self._object_del(step.device)
        else:
            resize: _Command = (
                "qom-set",
                {
                    "path": f"/machine/peripheral/{step.device}",
                    "property": "requested-size",
                    "value": step.size,
                },
            )
            # The size the step's first poll reads goes out with the change: QEMU answers in
            # order, so it is read after QEMU took the new requested size, one round trip
            # for both. Kept for that poll only (:meth:`poll`); an observation reads afresh.
            self._read_ahead([resize, ("query-memory-devices", None)])
            try:
                self._execute(*resize)
            finally:
                read = self._ahead.pop(_key("query-memory-devices", None), None)
            self._read_with_change = read

    def poll(self, step: Step, wait_s: float = 0.0) -> StepProgress:
        if step.action == "resize_virtio_mem":
            # Waited on QEMU's MEMORY_DEVICE_SIZE_CHANGE with a bounded wait and a fallback
            # reading of the size: QEMU sends a device's first such event at once but holds
            # the later ones for up to a second (monitor/monitor.c, ``monitor_qapi_event_conf``:
            # 1000 ms), so the event of the last block the guest plugs can come a second late.
            # One read per poll: the first poll of a step answers at once (from the size
            # read with the change, :meth:`begin`), a later one (the step was pending) waits
            # for an event or VIRTIO_MEM_POLL_S, then reads.
            if self._resizing == step and wait_s > 0:
                self._drain_events(min(wait_s, VIRTIO_MEM_POLL_S))
            self._resizing = step
            return self._check(step, query=True)
        self._drain_events()
        progress = self._check(step, query=True)
        if progress.state == "pending" and wait_s > 0:
            self._drain_events(wait_s)
            progress = self._check(step, query=False)
        return progress

    def _check(self, step: Step, query: bool) -> StepProgress:
        """Progress from the events seen, and (``query``, or for virtio-mem) from QEMU."""
        if step.action == "plug_dimm":
            ost = self._event("ACPI_DEVICE_OST", step.device, source=_OST_INSERT)
            if ost is None:
                return StepProgress("pending", "waiting for the guest's ACPI_DEVICE_OST")
            status = ost["info"].get("status")
            self._verify_due = status == 0
            return (
                StepProgress("done")
                if status == 0
                else StepProgress("rejected", f"ACPI _OST status {status!r}")
            )
        if step.action == "unplug_dimm":
            deleted = self._event("DEVICE_DELETED", step.device) is not None
            raw = None if deleted or not query else self._execute("query-memory-devices")
            if deleted or (
                raw is not None and all(d.id != step.device for d in self._devices(raw)[0])
            ):
                self._delete_after_unplug(step.memdev)
                if raw is not None:
                    self._keep_for_verifying(raw)
                return StepProgress("done")
            if self._event("DEVICE_UNPLUG_GUEST_ERROR", step.device) is not None:
                return StepProgress("rejected", "DEVICE_UNPLUG_GUEST_ERROR")
            ost = self._event("ACPI_DEVICE_OST", step.device, source=_OST_EJECT)
            if ost is not None and ost["info"].get("status") not in _OST_EJECT_OK:
                return StepProgress(
                    "rejected", f"ACPI _OST eject status {ost['info'].get('status')!r}"
                )
            return StepProgress("pending", "waiting for DEVICE_DELETED")
        if step.action == "delete_memdev":
            # Read again: the step is verified from QEMU, not from what was sent.
            self._listed.pop("/objects", None)
            if any(n == step.device for n, _ in self._children("/objects")):
                return StepProgress("pending", f"{step.device} is still in /objects")
            return StepProgress("done")
        read, self._read_with_change = self._read_with_change, None
        raw = self._execute("query-memory-devices") if read is None else read[0]
        if isinstance(raw, KataMemError):
            raise raw
        progress = resize_progress(
            step, next((d for d in self._devices(raw)[0] if d.id == step.device), None)
        )
        if progress.state == "done":
            self._keep_for_verifying(raw)
        return progress

    def _delete_after_unplug(self, memdev: str) -> None:
        """Delete the unplugged DIMM's backend object: the one kata-mem recorded creating."""
        try:
            self._object_del(memdev)
        except BackendError as exc:
            # Left as an orphan; the next call deletes it (a delete_memdev step).
            log.warning("object-del %s after DEVICE_DELETED failed: %s", memdev, exc)

    def guest_usage(self) -> Optional[GuestUsage]:
        path = self._balloon_path()
        if path is None:
            return None
        # The count first: a reading counted in it is in the statistics read after it
        # (QEMU handles both commands and the guest's report under one lock, and answers a
        # client's commands in order), so both go out in one round trip.
        stats: _Command = ("qom-get", {"path": path, "property": "guest-stats"})
        if self._stats_queue is not False:
            self._read_ahead([self._stats_count(path), stats])
        try:
            sequence = self._stats_received(path)
            raw = _REPLY.object(self._execute(*stats), "guest-stats")
        finally:
            self._ahead.pop(_key(*stats), None)  # never a later reading's
        return balloon_usage(
            _REPLY.mapping(raw, "stats", "guest-stats", "an object") or {},
            names=_STATS,
            unit=1,
            last_update=raw.get("last-update"),
            observed_at=time.time(),
            sequence=sequence,
        )

    def read_and_ask(self, seconds: int) -> Optional[GuestUsage]:
        path = self._balloon_path()
        if path is None:
            return None
        if self._stats_queue is False:
            return self.guest_usage()  # not counted: an ask could not be told apart

        # One exchange: the count and the statistics (what the freshness proof compares
        # against), then the ask (interval 0, then back: QEMU creates a timer that fires at
        # once, hw/virtio/virtio-balloon.c ``balloon_stats_set_poll_interval``). QEMU
        # answers in order, so the count is read before the guest is asked.
        def interval(value: int) -> _Command:
            return (
                "qom-set",
                {"path": path, "property": "guest-stats-polling-interval", "value": value},
            )

        stop, restart = interval(0), interval(seconds)
        self._interval = None  # unknown until QEMU has taken both
        # A DIMM just plugged, not verified yet: its verifying read goes with the ask
        # (:meth:`kata_mem.orchestration.usage.UsageReader.look_now`), read after the step
        # as the observation needs; QEMU answers in order.
        verify: list[_Command] = [("query-memory-devices", None)] if self._verify_due else []
        self._read_ahead(
            [
                *verify,
                self._stats_count(path),
                ("qom-get", {"path": path, "property": "guest-stats"}),
                stop,
                restart,
            ]
        )
        try:
            usage = self.guest_usage()
            try:
                self._execute(*stop)
            except BackendError as exc:
                # Refused, it changed nothing: the readings then come as they come.
                log.debug("QMP socket %s: no reading asked for: %s", self.path, exc)
            self._execute(*restart)
        finally:
            for command in (stop, restart):
                self._ahead.pop(_key(*command), None)
        self._interval = seconds
        return usage

    def _stats_received(self, path: str) -> Optional[int]:
        """How many statistics reports QEMU has taken from the guest (mod 2^16), or None
        when this QEMU cannot say (``x-query-virtio-queue-status`` is QEMU 7.2's, and
        experimental): the balloon's third queue is its statistics queue and QEMU pops
        one buffer from it per report (hw/virtio/virtio-balloon.c,
        ``virtio_balloon_receive_stats``), which its ``last-avail-idx`` counts."""
        if self._stats_queue is False:
            return None
        try:
            raw = self._execute(*self._stats_count(path))
        except BackendError as exc:
            log.debug("QMP socket %s: no statistics count: %s", self.path, exc)
            self._stats_queue = False
            return None
        self._stats_queue = True
        queue = _REPLY.object(raw, "x-query-virtio-queue-status")
        return _REPLY.integer(queue, "last-avail-idx", "x-query-virtio-queue-status", minimum=0)

    @staticmethod
    def _stats_count(path: str) -> _Command:
        """The command that reads the balloon's count of statistics reports."""
        return (
            "x-query-virtio-queue-status",
            {"path": f"{path}/virtio-backend", "queue": _BALLOON_STATS_QUEUE},
        )

    def set_stats_interval(self, seconds: int) -> Optional[int]:
        path = self._balloon_path()
        if path is None:
            return None
        # Read once per connection (the port returns the interval it had), then known: only
        # this connection sets it meanwhile, and an ask (:meth:`read_and_ask`) leaves it
        # known. QEMU ignores an unchanged value (``balloon_stats_set_poll_interval``).
        before = self._interval
        if before is None:
            read = self._execute(
                "qom-get", {"path": path, "property": "guest-stats-polling-interval"}
            )
            if not isinstance(read, int) or is_bool(read):
                raise _REPLY.fail("guest-stats-polling-interval", "an integer", read)
            before = read
        if before != seconds:
            self._interval = None  # unknown until QEMU has taken it
            self._execute(
                "qom-set",
                {"path": path, "property": "guest-stats-polling-interval", "value": seconds},
            )
        self._interval = seconds
        return before

    def _balloon_path(self) -> Optional[str]:
        if self._balloon is None:
            for container in ("/machine/peripheral", "/machine/peripheral-anon"):
                for name, kind in self._children(container):
                    if "virtio-balloon" in kind:
                        self._balloon = f"{container}/{name}"
                        return self._balloon
            self._balloon = ""
        return self._balloon or None

    def close(self) -> None:
        try:
            self._loop.run_until_complete(
                asyncio.wait_for(self._client.disconnect(), CONNECT_TIMEOUT_S)
            )
        except (QMPError, OSError, EOFError, asyncio.TimeoutError):
            pass  # the VM may already be gone; nothing to clean up on our side
        finally:
            self._loop.close()
