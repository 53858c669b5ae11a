"""What ``kata-mem serve`` needs of aiohttp beyond its public handler API, in one place.

The service (:mod:`kata_mem.interfaces.service`) writes its handlers and middleware
against aiohttp's public API (``web.Application``, ``web.Request``, ``web.Response``,
``request.content``'s reads). What aiohttp gives no public call for is here, and nowhere
else:

- :class:`Connection`, the connection handler: a subclass of ``web.RequestHandler`` that
  reads the peer once (``SO_PEERCRED``), cuts a connection that never sends a byte,
  answers a client that half-closes after its request (aiohttp's ``_waiter`` and
  ``_messages``), and hands what aiohttp refuses before any handler runs, or a handler's
  bug, to the service as a :class:`Failure` (its parser's words on one line) instead of
  aiohttp's plain-text answer (``handle_error``, ``request.writer.output_size``);
- :func:`origin`, the peer and the listener of a request (``request.protocol``);
- :func:`read_body`, a body read with its ``100 Continue`` written first (the writer's
  ``output_size``), and what aiohttp's parser refused in it as :class:`Unreadable`;
- :func:`leave_unread`, a body that is not read (``feed_eof``: the connection closes once
  the answer is sent).

The service answers for the connections through one method, :meth:`Owner.failed`. An
aiohttp release that changes these internals is met here; the service tests
(tests/service/test_malformed.py, test_lifecycle.py) run through all of it.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, NamedTuple, Optional, Protocol, Union, cast

from aiohttp import StreamReader, web
from aiohttp.http_exceptions import HttpProcessingError

from kata_mem.interfaces.listener import Peer, Port, Remote, peer_of_transport, remote_of_transport


class Failure(NamedTuple):
    """A request aiohttp refused before any handler ran (a request line, header or chunk
    it cannot parse: a status below 500), or a handler's bug (500), before any of its
    answer was sent."""

    status: int
    #: The exception, when there is one.
    cause: Optional[BaseException]
    #: What aiohttp's parser said, on one line.
    text: str
    #: The connection closed before the request could be answered: no one reads an answer.
    gone: bool


class Owner(Protocol):
    """What a connection asks of the service it answers for."""

    #: An idle connection, and one that sends nothing at all, is cut after this long.
    idle_timeout: float

    def failed(
        self, peer: Union[Peer, Remote, None], port: Port, failure: Failure
    ) -> web.StreamResponse:
        """The answer to a request of ``peer`` on ``port`` that ``failure`` ended."""
        ...


class Unreadable(Exception):
    """A body aiohttp's parser refused (a chunk it cannot parse); the message is its
    words, on one line."""


def _one_line(exc: Optional[BaseException], message: Optional[str] = None) -> str:
    """What aiohttp's parser said, on one line: its messages span lines and point at
    the byte with a line of carets; a payload error wraps the parser's."""
    if isinstance(exc, web.RequestPayloadError) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = message or getattr(exc, "message", None) or str(exc or "")
    return " ".join(w for w in str(text).split() if w.strip("^~")) or "malformed"


class Connection(web.RequestHandler):
    """aiohttp's connection handler, answering what aiohttp refuses before any handler
    runs (a request line, header or chunk it cannot parse) and a handler's bug as the
    handlers answer, through :meth:`Owner.failed`. aiohttp's own answer is plain text,
    logged at ERROR with a traceback (``aiohttp.web_protocol.RequestHandler.handle_error``,
    "Error handling request")."""

    def __init__(self, owner: Owner, manager: web.Server, port: Port, **options: Any) -> None:
        super().__init__(manager, **options)
        self.owner = owner
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
            self.owner.idle_timeout, transport.close
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
        gone = self.transport is None or isinstance(exc, ConnectionError)
        failure = Failure(status, exc, _one_line(exc, message), gone)
        return self.owner.failed(self.peer, self.port, failure)


def origin(request: web.BaseRequest) -> tuple[Union[Peer, Remote, None], Port]:
    """The peer that sent ``request`` (as it connected) and the listener it came to."""
    connection = cast(Connection, request.protocol)
    return connection.peer, connection.port


async def read_body(
    request: web.BaseRequest, limit: int, expects_continue: bool
) -> Optional[bytes]:
    """The body of ``request``, or None when it is larger than ``limit`` bytes; first
    ``100 Continue`` when the client waits for it (``expects_continue``).

    :raises Unreadable: aiohttp's parser refused a chunk of it.
    """
    if (request.content_length or 0) > limit:
        return None
    if expects_continue:
        # What aiohttp's _default_expect_handler writes; no response has started yet.
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    content = request.content
    try:
        if content.is_eof():
            # All of it came (with the headers, for a shim's small request): taken as it
            # is, without a coroutine per chunk.
            body = content.read_nowait(-1)
            return None if len(body) > limit else body
        chunks: list[bytes] = []
        size = 0
        while chunk := await content.read(1 << 16):
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    except (web.RequestPayloadError, HttpProcessingError) as exc:  # a chunk it cannot parse
        raise Unreadable(_one_line(exc)) from exc
    return b"".join(chunks)


def leave_unread(request: web.BaseRequest) -> None:
    """Read nothing more of ``request``'s body: the connection closes once the answer is
    sent, instead of aiohttp draining the body first (and, for a body it cannot parse,
    meeting the same error again and logging it with a traceback: web_protocol's
    ``start``)."""
    request.content.feed_eof()
