"""Minimal synchronous QMP client, standard library only.

Used by the guest test harness and as the baseline client in benchmarks::

    with QMPClient(path) as qmp:            # connect + greeting + qmp_capabilities
        reply = qmp.cmd("query-memory-devices")    # whole reply: {"return": ...} or {"error": ...}
        value = qmp.execute("qom-get", {"path": "/machine/peripheral/vm0", "property": "size"})
        event = qmp.wait_event("DEVICE_DELETED", timeout=5.0)

QEMU terminates every message with a newline; events that arrive while waiting
for a reply are buffered and returned by :meth:`QMPClient.events` /
:meth:`QMPClient.wait_event`. Note that a ``-qmp unix:...,server=on`` socket
serves one client at a time: close this client before another one connects.
"""

from __future__ import annotations

import json
import socket
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:
    from types import TracebackType

JSONObject = dict[str, Any]


class QMPError(Exception):
    """A QMP command failed, or the connection broke."""

    def __init__(self, message: str, reply: Optional[JSONObject] = None) -> None:
        super().__init__(message)
        self.reply = reply

    @property
    def error_class(self) -> str:
        """The QMP error class (``GenericError``, ``CommandNotFound``...) or ``""``."""
        if self.reply and isinstance(self.reply.get("error"), dict):
            return str(self.reply["error"].get("class", ""))
        return ""


class QMPClient:
    """A blocking QMP client over a unix socket."""

    def __init__(self, path: Union[str, Path], timeout: float = 10.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.greeting: JSONObject = {}
        self._sock: Optional[socket.socket] = None
        self._buf = b""
        self._events: deque[JSONObject] = deque()
        self._next_id = 0

    # -- connection ---------------------------------------------------------------
    def connect(self, retry_for: float = 0.0) -> JSONObject:
        """Connect, read the greeting and negotiate capabilities.

        ``retry_for`` seconds of retries while the socket does not exist yet or
        refuses connections (QEMU still starting). Returns the greeting.
        """
        self.close()
        deadline = time.monotonic() + retry_for
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(str(self.path))
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        self._sock = sock
        self._buf = b""
        greeting = self._recv(time.monotonic() + self.timeout)
        while "event" in greeting:
            # QEMU can hand an event meant for the previous client to a new connection
            # before the greeting (a race between its CLOSED and OPENED handling).
            greeting = self._recv(time.monotonic() + self.timeout)
        if "QMP" not in greeting:
            self.close()
            raise QMPError(f"unexpected QMP greeting: {greeting!r}", greeting)
        self.greeting = greeting
        self.execute("qmp_capabilities")
        return greeting

    def close(self) -> None:
        """Close the socket (idempotent)."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._buf = b""

    def __enter__(self) -> QMPClient:
        if self._sock is None:
            self.connect()
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    # -- commands -----------------------------------------------------------------
    def cmd(
        self, name: str, args: Optional[JSONObject] = None, timeout: Optional[float] = None
    ) -> JSONObject:
        """Run a command and return the whole reply (``{"return": ...}`` or ``{"error": ...}``)."""
        self._next_id += 1
        msg_id = f"k{self._next_id}"
        msg: JSONObject = {"execute": name, "id": msg_id}
        if args:
            msg["arguments"] = args
        self._send(msg)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            reply = self._recv(deadline)
            if "event" in reply:
                self._events.append(reply)
            elif reply.get("id") == msg_id:
                reply.pop("id", None)
                return reply
            # else: a stale reply to an earlier, timed-out command; drop it.

    def execute(
        self, name: str, args: Optional[JSONObject] = None, timeout: Optional[float] = None
    ) -> Any:
        """Run a command; return its ``return`` value or raise :class:`QMPError`."""
        reply = self.cmd(name, args, timeout)
        if "error" in reply:
            err = reply["error"]
            raise QMPError(f"{name}: {err.get('class')}: {err.get('desc')}", reply)
        return reply.get("return")

    def execute_all(self, commands: list[tuple[str, Optional[JSONObject]]]) -> list[Any]:
        """Send ``commands`` at once and return their ``return`` values, in order: one
        round trip (QEMU answers a client's commands in order). Raises :class:`QMPError`
        for the first that failed, once every reply is in."""
        ids = []
        for name, args in commands:
            self._next_id += 1
            ids.append(f"k{self._next_id}")
            msg: JSONObject = {"execute": name, "id": ids[-1]}
            if args:
                msg["arguments"] = args
            self._send(msg)
        deadline = time.monotonic() + self.timeout
        replies: dict[str, JSONObject] = {}
        while len(replies) < len(ids):
            reply = self._recv(deadline)
            if "event" in reply:
                self._events.append(reply)
            elif reply.get("id") in ids:
                replies[str(reply["id"])] = reply
        for (name, _), msg_id in zip(commands, ids, strict=True):
            if "error" in replies[msg_id]:
                err = replies[msg_id]["error"]
                raise QMPError(f"{name}: {err.get('class')}: {err.get('desc')}", replies[msg_id])
        return [replies[i].get("return") for i in ids]

    # -- events -------------------------------------------------------------------
    def events(self, clear: bool = True) -> list[JSONObject]:
        """Events received so far (reads what is already on the socket, never blocks)."""
        self._poll_nowait()
        out = list(self._events)
        if clear:
            self._events.clear()
        return out

    def wait_event(self, name: str, timeout: float = 10.0) -> JSONObject:
        """Return (and remove from the buffer) the first event called ``name``.

        Raises :class:`TimeoutError` when none arrives within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        for ev in list(self._events):
            if ev.get("event") == name:
                self._events.remove(ev)
                return ev
        while True:
            try:
                msg = self._recv(deadline)
            except TimeoutError:
                raise TimeoutError(f"no QMP event {name} within {timeout:.1f} s") from None
            if msg.get("event") == name:
                return msg
            if "event" in msg:
                self._events.append(msg)

    # -- wire ---------------------------------------------------------------------
    def _send(self, msg: JSONObject) -> None:
        if self._sock is None:
            raise QMPError("not connected")
        self._sock.sendall(json.dumps(msg).encode() + b"\n")

    def _recv(self, deadline: float) -> JSONObject:
        """Read one message; raises TimeoutError at ``deadline``."""
        if self._sock is None:
            raise QMPError("not connected")
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("QMP read timed out")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                raise TimeoutError("QMP read timed out") from None
            if not chunk:
                raise QMPError("QMP connection closed by QEMU")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        line = line.strip()
        if not line:
            return self._recv(deadline)
        msg = json.loads(line)
        if not isinstance(msg, dict):
            raise QMPError(f"unexpected QMP message: {msg!r}")
        return msg

    def _poll_nowait(self) -> None:
        if self._sock is None:
            return
        self._sock.setblocking(False)
        try:
            while True:
                try:
                    chunk = self._sock.recv(65536)
                except (BlockingIOError, InterruptedError):
                    break
                if not chunk:
                    break
                self._buf += chunk
        finally:
            self._sock.settimeout(self.timeout)
        while b"\n" in self._buf:
            msg = self._recv(time.monotonic() + self.timeout)
            if "event" in msg:
                self._events.append(msg)
