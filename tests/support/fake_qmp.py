"""A scripted QMP server on a unix socket, for fault tests that a real QEMU cannot
produce on demand: error replies, a connection dropped mid-plan, a guest that
never confirms.

It speaks the wire protocol as QEMU does (greeting without an id, replies with
the request's id, events interleaved) and reads requests as a JSON *stream*:
``qemu.qmp`` sends messages without newlines between them. Behind it is a small
model of QEMU's memory devices, so that a test can check what was left behind.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

MiB = 1 << 20


@dataclass
class FakeQemu:
    """QEMU's memory model plus the faults to inject."""

    base: int = 512 * MiB
    slots: int = 4
    maxmem: int = 4096 * MiB
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    objects: dict[str, int] = field(default_factory=dict)
    #: the ``object-add`` arguments of each object added over QMP (its QOM type first of
    #: all, which ``qom-list /objects`` reports); an object a test puts in ``objects``
    #: without them is a ``memory-backend-ram``
    object_args: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: command name -> (error class, description) to answer instead of executing
    fail: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: command name -> close the connection after executing it, without replying
    drop_after: set[str] = field(default_factory=set)
    #: whether the "guest" confirms a DIMM insert (ACPI_DEVICE_OST) and completes ejects
    guest_confirms: bool = True
    #: whether the "guest" refuses DIMM ejects (ACPI _OST 0x82 busy, DEVICE_UNPLUG_GUEST_ERROR)
    guest_refuses: bool = False
    #: a virtio-balloon with statistics, reporting ``guest_used`` bytes in use (fresh every call)
    balloon: bool = False
    guest_used: int = 64 * MiB
    stats_interval: int = 0
    #: QEMU's count of the balloon's statistics reports (``x-query-virtio-queue-status``,
    #: QEMU 7.2), or None for a QEMU without that command; a new report comes at once when
    #: the polling starts (interval 0, then not), as QEMU polls then and the guest answers
    stats_count: Optional[int] = None
    #: connections that get a stray event before the greeting, as QEMU sometimes sends
    stray_events_before_greeting: int = 0
    commands: list[str] = field(default_factory=list)

    def qom_type(self, oid: str) -> str:
        """The QOM type of the object ``oid``, as ``qom-list /objects`` reports it."""
        return str(self.object_args.get(oid, {}).get("qom-type", "memory-backend-ram"))

    def dimms(self) -> list[dict[str, Any]]:
        return [d for d in self.devices.values() if d["type"] == "dimm"]

    def add_virtio_mem(self, did: str, size: int, max_size: int, block: int = 2 * MiB) -> None:
        """A virtio-mem device with ``size`` plugged (booted with it, as ``-device
        virtio-mem-pci,id=DID,requested-size=SIZE``)."""
        self.objects[f"{did}mem"] = max_size
        self.devices[did] = {
            "type": "virtio-mem",
            "data": {
                "id": did,
                "size": size,
                "requested-size": size,
                "max-size": max_size,
                "block-size": block,
                "memdev": f"/objects/{did}mem",
                "memaddr": 4096 * MiB
                + sum(
                    d["data"]["max-size"]
                    for d in self.devices.values()
                    if d["type"] == "virtio-mem"
                ),
                "node": 0,
            },
        }

    def _resize(
        self, path: str, size: int
    ) -> tuple[Optional[dict[str, Any]], list[dict[str, Any]]]:
        """``qom-set /machine/peripheral/ID requested-size``, refused as QEMU refuses it
        (hw/virtio/virtio-mem.c ``virtio_mem_set_requested_size``); a guest that confirms
        plugs or unplugs at once."""
        dev = self.devices.get(path.removeprefix("/machine/peripheral/"))
        if dev is None or dev["type"] != "virtio-mem":
            return {"error": {"class": "DeviceNotFound", "desc": f"Device '{path}' not found"}}, []
        data = dev["data"]
        if size % data["block-size"]:
            return _generic("'requested-size' property has to be multiples of 'block-size'"), []
        if size > data["max-size"]:
            return _generic("'requested-size' cannot exceed the memory backend size"), []
        data["requested-size"] = size
        if self.guest_confirms:
            data["size"] = size
        return {"return": {}}, []

    def handle(
        self, cmd: str, args: dict[str, Any]
    ) -> tuple[Optional[dict[str, Any]], list[dict[str, Any]]]:
        """The reply (``{"return": ...}`` or ``{"error": ...}``) and events to send after it."""
        self.commands.append(cmd)
        if cmd in self.fail:
            cls, desc = self.fail[cmd]
            return {"error": {"class": cls, "desc": desc}}, []
        events: list[dict[str, Any]] = []
        if cmd == "qmp_capabilities":
            return {"return": {}}, []
        if cmd == "query-memory-size-summary":
            plugged = sum(d["data"]["size"] for d in self.devices.values())
            return {"return": {"base-memory": self.base, "plugged-memory": plugged}}, []
        if cmd == "query-memory-devices":
            return {
                "return": [
                    {"type": d["type"], "data": dict(d["data"])} for d in self.devices.values()
                ]
            }, []
        if cmd == "qom-get" and args.get("path") == "/machine" and args.get("property") == "memory":
            return {"return": {"size": self.base, "slots": self.slots, "max-size": self.maxmem}}, []
        if cmd == "qom-get" and self.balloon and args.get("path") == "/machine/peripheral/balloon0":
            if args.get("property") == "guest-stats-polling-interval":
                return {"return": self.stats_interval}, []
            total = self.base + sum(d["data"]["size"] for d in self.devices.values())
            free = max(total - self.guest_used, 0)
            stats = {
                "stat-total-memory": total,
                "stat-available-memory": free,
                "stat-free-memory": free,
                "stat-disk-caches": 0,
                "stat-major-faults": 0,
            }
            return {"return": {"stats": stats, "last-update": int(time.time())}}, []
        if (
            cmd == "qom-set"
            and self.balloon
            and args.get("property") == "guest-stats-polling-interval"
        ):
            value = int(args["value"])
            if self.stats_count is not None and self.stats_interval == 0 and value > 0:
                self.stats_count += 1  # hw/virtio/virtio-balloon.c: a new timer fires at once
            self.stats_interval = value
            return {"return": {}}, []
        if (
            cmd == "x-query-virtio-queue-status"
            and self.balloon
            and self.stats_count is not None
            and args.get("path") == "/machine/peripheral/balloon0/virtio-backend"
            and args.get("queue") == 2
        ):
            return {"return": {"last-avail-idx": self.stats_count % (1 << 16)}}, []
        if cmd == "qom-set" and args.get("property") == "requested-size":
            return self._resize(str(args.get("path", "")), int(args["value"]))
        if cmd == "qom-list":
            if args.get("path") == "/machine/peripheral" and self.balloon:
                return {"return": [{"name": "balloon0", "type": "child<virtio-balloon-pci>"}]}, []
            if args.get("path") == "/objects":
                return {
                    "return": [
                        {"name": n, "type": f"child<{self.qom_type(n)}>"} for n in self.objects
                    ]
                }, []
            return {"return": []}, []
        if cmd == "qom-get" and str(args.get("path", "")).startswith("/objects/"):
            oid = str(args["path"]).removeprefix("/objects/")
            if oid not in self.objects or args.get("property") != "size":
                return {
                    "error": {"class": "DeviceNotFound", "desc": f"'{args['path']}' not found"}
                }, []
            return {"return": self.objects[oid]}, []
        if cmd == "query-acpi-ospm-status":
            return {"return": []}, []
        if cmd == "object-add":
            oid = str(args["id"])
            if oid in self.objects:
                return _generic(
                    f"attempt to add duplicate property '{oid}' to object (type 'container')"
                ), []
            self.objects[oid] = int(args["size"])
            self.object_args[oid] = dict(args)
            return {"return": {}}, []
        if cmd == "object-del":
            oid = str(args["id"])
            if oid not in self.objects:
                return _generic(f"object '{oid}' not found"), []
            if any(d["data"].get("memdev") == f"/objects/{oid}" for d in self.devices.values()):
                return _generic(f"object '{oid}' is in use, can not be deleted"), []
            del self.objects[oid]
            self.object_args.pop(oid, None)
            return {"return": {}}, []
        if cmd == "device_add":
            did, memdev = str(args["id"]), str(args["memdev"])
            if memdev not in self.objects:
                return _generic(f"can't find memdev '{memdev}'"), []
            if len(self.dimms()) >= self.slots:
                return _generic("no free slots available"), []
            slot = min(set(range(self.slots)) - {d["data"]["slot"] for d in self.dimms()})
            size = self.objects[memdev]
            self.devices[did] = {
                "type": "dimm",
                "data": {
                    "id": did,
                    "size": size,
                    "slot": slot,
                    "memdev": f"/objects/{memdev}",
                    "hotplugged": True,
                    "hotpluggable": True,
                    "node": 0,
                    "addr": 0,
                },
            }
            if self.guest_confirms:
                events.append(
                    _event(
                        "ACPI_DEVICE_OST",
                        {
                            "info": {
                                "device": did,
                                "slot": str(slot),
                                "slot-type": "DIMM",
                                "source": 1,
                                "status": 0,
                            }
                        },
                    )
                )
            return {"return": {}}, events
        if cmd == "device_del":
            did = str(args["id"])
            if did not in self.devices:
                return {
                    "error": {"class": "DeviceNotFound", "desc": f"Device '{did}' not found"}
                }, []
            path = f"/machine/peripheral/{did}"
            if self.guest_refuses:
                ost = {
                    "device": did,
                    "slot": str(self.devices[did]["data"]["slot"]),
                    "slot-type": "DIMM",
                    "source": 3,
                }
                events.append(_event("ACPI_DEVICE_OST", {"info": {**ost, "status": 0x84}}))
                events.append(_event("ACPI_DEVICE_OST", {"info": {**ost, "status": 0x82}}))
                events.append(_event("DEVICE_UNPLUG_GUEST_ERROR", {"device": did, "path": path}))
            elif self.guest_confirms:
                del self.devices[did]
                events.append(_event("DEVICE_DELETED", {"device": did, "path": path}))
            return {"return": {}}, events
        return {
            "error": {"class": "CommandNotFound", "desc": f"The command {cmd} has not been found"}
        }, []


def _generic(desc: str) -> dict[str, Any]:
    return {"error": {"class": "GenericError", "desc": desc}}


def _event(name: str, data: dict[str, Any]) -> dict[str, Any]:
    now = time.time()
    return {
        "event": name,
        "data": data,
        "timestamp": {"seconds": int(now), "microseconds": int(now % 1 * 1e6)},
    }


class FakeQmpServer:
    """Serves :class:`FakeQemu` on a unix socket, one client at a time, in a thread.

    ``bound`` is a socket already bound to ``path`` (inherited from another process, say)
    to serve instead of binding a new one: this process's ``listen`` makes it the
    listener that ``SO_PEERCRED`` names. ``sessions`` counts the connections accepted.
    """

    def __init__(self, path: Path, qemu: FakeQemu, bound: Optional[socket.socket] = None) -> None:
        self.path = path
        self.qemu = qemu
        self.sessions = 0
        if bound is None:
            bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            bound.bind(str(path))
        self._sock = bound
        self._sock.listen(4)
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> FakeQmpServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.sessions += 1
            with conn:
                try:
                    self._session(conn)
                except (BrokenPipeError, ConnectionResetError):
                    # The client hung up first (as kata-mem does after a stray event before
                    # the greeting); QEMU then serves the next client, and so does this fake.
                    continue

    def _session(self, conn: socket.socket) -> None:
        conn.settimeout(0.2)
        greeting = {
            "QMP": {
                "version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "fake"},
                "capabilities": [],
            }
        }
        if self.qemu.stray_events_before_greeting > 0:
            self.qemu.stray_events_before_greeting -= 1
            stray = _event(
                "ACPI_DEVICE_OST",
                {"info": {"source": 3, "status": 0, "slot": "0", "slot-type": "DIMM"}},
            )
            conn.sendall(json.dumps(stray).encode() + b"\r\n")
        conn.sendall(json.dumps(greeting).encode() + b"\r\n")
        decoder = json.JSONDecoder()
        buf = ""
        while not self._stop.is_set():
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            buf += chunk.decode()
            while buf.strip():
                buf = buf.lstrip()
                try:
                    msg, end = decoder.raw_decode(buf)
                except json.JSONDecodeError:
                    break  # wait for the rest of the message
                buf = buf[end:]
                cmd = str(msg.get("execute", ""))
                reply, events = self.qemu.handle(cmd, dict(msg.get("arguments") or {}))
                if cmd in self.qemu.drop_after:
                    conn.close()
                    return
                if reply is not None:
                    if "id" in msg:
                        reply["id"] = msg["id"]
                    conn.sendall(json.dumps(reply).encode() + b"\r\n")
                for event in events:
                    conn.sendall(json.dumps(event).encode() + b"\r\n")
