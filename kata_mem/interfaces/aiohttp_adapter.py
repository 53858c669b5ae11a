"""aiohttp's connection handler for ``kata-mem serve``
(:mod:`kata_mem.interfaces.service`): a subclass of ``web.RequestHandler`` that reads the
peer once, cuts a connection that never sends a request, answers a client that half-closes
and answers what aiohttp refuses before any handler runs."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Optional, Protocol, Union

from aiohttp import StreamReader, web

from kata_mem.core.errors import InputError, KataMemError
from kata_mem.edges.logs import describe, get_logger
from kata_mem.interfaces.listener import (
    Peer,
    Port,
    Remote,
    peer_of_transport,
    peer_text,
    remote_of_transport,
)
from kata_mem.interfaces.metrics import Metrics

# One logger for every line of serve (its modules are one service to an operator).
log = get_logger("kata_mem.interfaces.service")


class Owner(Protocol):
    """What a connection asks of the service it answers for."""

    idle_timeout: float
    metrics: Metrics

    def allowed(self, peer: Union[Peer, Remote, None]) -> bool: ...

    def forbidden(self, peer: Union[Peer, Remote, None], what: str) -> web.Response: ...

    def refuse(
        self,
        exc: KataMemError,
        status: int,
        peer: Union[Peer, Remote, None],
        what: str,
        cause: Optional[BaseException] = None,
    ) -> web.Response: ...


def _parse_error(exc: Optional[BaseException], message: Optional[str] = None) -> str:
    """What aiohttp's parser said, on one line: its messages span lines and point at
    the byte with a line of carets; a payload error wraps the parser's."""
    if isinstance(exc, web.RequestPayloadError) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = message or getattr(exc, "message", None) or str(exc or "")
    return " ".join(w for w in str(text).split() if w.strip("^~")) or "malformed"


class Connection(web.RequestHandler):
    """aiohttp's connection handler, answering what aiohttp refuses before any handler
    runs (a request line, header or chunk it cannot parse) and a handler's bug as the
    handlers answer: a ``kata-mem/error/v1`` document and one log line. aiohttp's own
    answer is plain text, logged at ERROR with a traceback
    (``aiohttp.web_protocol.RequestHandler.handle_error``, "Error handling request")."""

    def __init__(self, service: Owner, manager: web.Server, port: Port, **options: Any) -> None:
        super().__init__(manager, **options)
        self.service = service
        self.port = port
        self.peer: Union[Peer, Remote, None] = None
        self._first_request: Optional[asyncio.TimerHandle] = None
        #: The bodies still arriving (``data_received``).
        self._arriving: list[StreamReader] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # SO_PEERCRED is the peer as it connected: read once, for every request it sends.
        # TCP has none: the address, for the log.
        checked = self.port.checks_peer
        self.peer = peer_of_transport(transport) if checked else remote_of_transport(transport)
        super().connection_made(transport)
        # aiohttp's keep-alive timer starts after a response, and before 3.14 nothing
        # closed a connection that never sent a byte: that is cut here, on every version.
        self._first_request = asyncio.get_running_loop().call_later(
            self.service.idle_timeout, transport.close
        )

    def data_received(self, data: bytes) -> None:
        if self._first_request is not None:
            self._first_request.cancel()
            self._first_request = None
        queued = len(self._messages)
        super().data_received(data)
        # The bodies of the requests read so far that have not arrived whole (the requests
        # this call parsed are the last ones queued), for ``eof_received``.
        self._arriving = [body for body in self._arriving if not body.is_eof()]
        fresh = itertools.islice(self._messages, queued, None)
        self._arriving += [body for _, body in fresh if not body.is_eof()]

    def eof_received(self) -> bool:  # type: ignore[override]  # asyncio.Protocol's signature
        # The client closed its sending side (shutdown(SHUT_WR), as `nc -N` does): it still
        # reads. aiohttp returns None here (web_protocol ``RequestHandler.eof_received``),
        # which makes asyncio close the whole transport (selector_events
        # ``_SelectorSocketTransport._read_ready__on_eof``), so a request already read was
        # carried out and its answer lost (issue 33, item 4). True keeps the sending side
        # open, and ``close`` ends the connection once the requests read are answered
        # (docs/design/state.md: answered). Not when a body was cut short: that request is
        # never begun, and closing the connection as before ends the handler's wait for
        # it. Nor between requests (aiohttp's ``start`` waiting for one: ``_waiter``
        # pending, ``_messages`` empty, aiohttp's own from 3.9 on), where ``close`` would
        # only cancel that wait, which aiohttp 3.14 no longer turns into closing the
        # transport.
        if any(not body.is_eof() for body in self._arriving):
            return False
        waiter = self._waiter
        if waiter is not None and not waiter.done() and not self._messages:
            return False
        self.close()
        return True

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if self._first_request is not None:
            self._first_request.cancel()
            self._first_request = None
        super().connection_lost(exc)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: Optional[BaseException] = None,
        message: Optional[str] = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: an answer is under way, cut it
            raise ConnectionError("a response was being sent when the request failed")
        peer = self.peer
        if self.transport is None or isinstance(exc, ConnectionError):
            log.warning(
                "a request from %s: the connection closed before it was answered (%s)",
                peer_text(peer),
                describe(exc) if exc else status,
            )
            return web.Response(status=status)  # no one is left to read it
        if self.port.checks_peer and not self.service.allowed(peer):
            return self.service.forbidden(peer, "a request")
        if status >= 500:
            error = KataMemError(
                f"internal error answering the request ({describe(exc) if exc else status}); "
                "a bug in kata-mem"
            )
            resp = self.service.refuse(error, status, peer, "a request", cause=exc)
        else:
            text = _parse_error(exc, message)
            error = InputError(f"HTTP request: {text}; expected HTTP/1.1 with {self.port.routes}")
            resp = self.service.refuse(error, status, peer, "a request")
        # Never through the middleware that times every request: counted here.
        self.service.metrics.malformed.labels(str(status), self.port.name).inc()
        resp.force_close()
        return resp
