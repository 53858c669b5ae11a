"""The HTTP service of ``kata-mem serve`` (aiohttp): its two applications, the
middleware every request goes through, and the handlers.

One resident process answers every runtime shim of the node, so a container event
costs a request on an open socket instead of a Python start-up. What it answers is
what the one-shot commands print: ``POST /v1/shim`` runs :func:`kata_mem.interfaces.protocol.answer`
(the body ``kata-mem shim`` prints, byte for byte), ``GET /v1/node`` is ``status --all
--json``, ``GET /v1/sandboxes/{id}`` is ``status --json``.

Every ``POST /v1/shim`` is answered one way: its body read and parsed once, then
:func:`~kata_mem.orchestration.handle.handle` in the sandbox's turn (:class:`Turns`:
one sandbox's requests one at a time, in order; the journal's flock still orders them
against CLI calls), different sandboxes side by side. ``handle`` is synchronous and may
wait seconds for a guest, so it runs in a thread pool; only a small plan-only request,
which waits for nothing, is answered on the event loop, where a thread hop would be most
of its cost. The loop otherwise only reads bodies, checks the peer and writes answers,
so a slow guest delays no other sandbox. The reconcile loop
(:mod:`kata_mem.interfaces.reconcile_loop`) shares the pool and the turns.

What aiohttp gives no public call for (the connection handler, the peer of a request,
``100 Continue``, a body left unread) is :mod:`kata_mem.interfaces.aiohttp_adapter`'s,
which asks the service one thing: :meth:`Service.failed`, the answer to a request that
aiohttp refused before any handler ran.

Who may ask is checked by the middleware before any of a request's body is read (the
peer rule and the listeners: :mod:`kata_mem.interfaces.listener`). Every refusal is a
``kata-mem/error/v1`` document and one log line. The ``--metrics-address`` application
serves ``GET /metrics`` and ``GET /healthz`` only, read-only: TCP carries no peer
credentials, so nothing that changes a VM or shows one's state is routed there.

One module (about 620 lines) because the handlers share one :class:`Service`'s state
(the pool, the sandboxes' turns, the metrics, the middleware's peer check); the socket and
its activation (:mod:`~kata_mem.interfaces.serve`), the listeners, aiohttp's internals and
the reconcile loop are modules of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional, TypeVar, Union

from aiohttp import HttpVersion11, web

from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import BackendUnavailable, InputError, KataMemError
from kata_mem.core.model import Settings, Unseen, check_sandbox_id
from kata_mem.core.request import MAX_REQUEST_BYTES, CallOptions, SandboxRequest
from kata_mem.core.results import Applied, Planned
from kata_mem.core.units import to_mib_floor
from kata_mem.edges.logs import describe, get_logger
from kata_mem.interfaces import render, render_node
from kata_mem.interfaces.aiohttp_adapter import (
    Failure,
    Unreadable,
    leave_unread,
    origin,
    read_body,
)
from kata_mem.interfaces.listener import Peer, Port, Remote, peer_allowed, peer_text
from kata_mem.interfaces.metrics import CONTENT_TYPE, Metrics
from kata_mem.interfaces.node_view import NodeView
from kata_mem.interfaces.protocol import Answer, answer, as_served, parse

# One logger for every line of serve (its modules are one service to an operator).
log = get_logger("kata_mem.interfaces.service")
T = TypeVar("T")

#: An idle connection (none sent, or between requests) and a body that does not
#: arrive are cut after this long (``--idle-timeout``).
IDLE_TIMEOUT_S = 10.0
#: ``GET /v1/sandboxes/{id}`` asks the VM; this bounds how long it may take.
STATUS_TIMEOUT_S = 10.0
#: Threads for requests: each may wait for a guest, so more than the CPUs.
WORKERS = 64
#: A request body up to this size is parsed, and when plan-only planned, on the loop
#: (well under a millisecond for a usual request of a few containers); a larger one in
#: a thread, so that its CPU time does not hold up every other request.
INLINE_BODY_BYTES = 64 << 10
#: Where HTTP statuses come from: the one-shot shim's exit code (docs, "Exit codes").
_STATUS = {0: 200, 1: 500, 2: 400, 3: 400, 4: 400, 6: 503, 7: 503, 8: 503, 9: 503}


def http_status(exit_code: int) -> int:
    """The HTTP status of an answer whose one-shot exit code is ``exit_code``."""
    return _STATUS.get(exit_code, 500)


def _json(doc: dict[str, Any], status: int, exit_code: Optional[int] = None) -> web.Response:
    # As `kata-mem shim` prints it: one line of JSON.
    resp = web.Response(
        body=(json.dumps(doc) + "\n").encode(), status=status, content_type="application/json"
    )
    if exit_code is not None:
        resp.headers["X-Kata-Mem-Exit-Code"] = str(exit_code)
    return resp


def _what(request: web.BaseRequest) -> str:
    """A request as its refusals name it: method and path (made only for a refusal)."""
    return f"{request.method} {request.path}"


async def _expect_later(request: web.Request) -> None:
    """An Expect header is answered after the peer check (``Service._guard``)."""


def _expectations(request: web.Request) -> list[str]:
    """The request's expectations, lower case (every Expect header, each a list)."""
    return [e.strip().lower() for h in request.headers.getall("Expect", []) for e in h.split(",")]


async def _unrouted(request: web.Request) -> web.StreamResponse:
    """A path or method no endpoint takes: 405 when another method of the path is one,
    else 404, as aiohttp's router says."""
    allowed: set[str] = set()
    for endpoint in request.app.router.resources():
        if endpoint.name is not None:  # the endpoints are named; this route is not
            allowed |= (await endpoint.resolve(request))[1]
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    raise web.HTTPNotFound()


class Turns:
    """Each sandbox's requests and the reconcile loop's visits of it, one at a time in the
    order they came; different sandboxes side by side. The journal's flock orders them
    against CLI calls as well: this keeps a sandbox's requests from holding pool threads
    while they wait for it, and lets the loop leave a sandbox a request holds
    (:meth:`busy`)."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self.pool = pool
        #: sandbox id -> who waits for its turn after the one that has it (listed: taken).
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}

    def busy(self, sandbox: str) -> bool:
        """Whether a request or a visit has the sandbox's turn, or waits for it."""
        return sandbox in self._waiting

    async def run(self, sandbox: str, work: Callable[[], T], on_loop: bool = False) -> T:
        """``work()`` in the sandbox's turn: in a pool thread, since it may wait for a guest;
        or, ``on_loop``, on the event loop (small work that waits for nothing, for which
        a thread hop would be most of its cost)."""
        await self._take(sandbox)
        try:
            if on_loop:
                return work()
            return await asyncio.get_running_loop().run_in_executor(self.pool, work)
        finally:
            self._pass_on(sandbox)

    @contextlib.asynccontextmanager
    async def held(self, sandbox: str) -> AsyncIterator[None]:
        """The sandbox's turn, for what a visit does in it on the loop and in the pool."""
        await self._take(sandbox)
        try:
            yield
        finally:
            self._pass_on(sandbox)

    async def _take(self, sandbox: str) -> None:
        """Wait for the sandbox's turn (at once when no one has it: nothing yields then)."""
        waiting = self._waiting.get(sandbox)
        if waiting is None:
            self._waiting[sandbox] = deque()
            return
        turn = asyncio.get_running_loop().create_future()
        waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if not turn.cancelled():  # cancelled as its turn came: the turn goes on
                self._pass_on(sandbox)
            raise

    def _pass_on(self, sandbox: str) -> None:
        """The turn to the first who still waits for it, else to no one."""
        waiting = self._waiting[sandbox]
        while waiting:
            turn = waiting.popleft()
            if not turn.done():  # not cancelled while it waited
                turn.set_result(None)
                return
        del self._waiting[sandbox]


class Service:
    """The handlers and what they share with the reconcile loop: the thread pool, the
    sandboxes' turns, the metrics."""

    def __init__(
        self,
        state_dir: str,
        settings: Settings,
        group: Optional[int],
        env: Mapping[str, str],
        idle_timeout: float = IDLE_TIMEOUT_S,
        default_config: Optional[str] = None,
    ) -> None:
        self.state_dir = state_dir
        #: What the service adds to every request: its state directory, and the owner
        #: check of a sandbox's first request answered from the node view.
        self.options = CallOptions(state_dir=state_dir, vm_owner=self.vm_owner)
        #: ``serve --config``, absolute: the configuration of a request whose ``config`` is
        #: null (else where Kata looks, as ``kata-mem shim`` does).
        self.default_config = default_config
        self.settings = settings
        self.group = group
        self.env = dict(env)
        self.idle_timeout = idle_timeout
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="kata-mem-serve")
        #: The node view's reads (:meth:`read_view`), in a thread of their own: a request's
        #: owner check waits in a pool thread for the view, so the view's reading must never
        #: wait for a pool thread (64 first requests at once would hold them all).
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="kata-mem-view")
        self.turns = Turns(self.pool)
        self.metrics = Metrics(state_dir)
        # sandbox id -> why its last resize could not see QEMU's host cgroup (/healthz)
        self.unseen: dict[str, Unseen] = {}
        #: The node as the reconcile loop keeps it (GET /v1/node, /metrics); None: read
        #: from the files at each request.
        self.view: Optional[NodeView] = None

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_REQUEST_BYTES)
        # aiohttp answers an Expect header before any middleware runs, so before the peer
        # check, in plain text (web_app ``Application._handle``, its default
        # ``_default_expect_handler``): 100 Continue invites a refused peer's body, and
        # anything else is its own 417. So no route takes it there (``_guard`` does), and
        # every path and method has a route, the last one answering as the router would
        # (404, 405): a path no route takes would get aiohttp's handler again.
        later = _expect_later
        app.router.add_post("/v1/shim", self.shim, name="shim", expect_handler=later)
        app.router.add_get("/v1/node", self.node, name="node", expect_handler=later)
        app.router.add_get("/v1/sandboxes/{id}", self.sandbox, name="sandbox", expect_handler=later)
        app.router.add_get("/metrics", self.metrics_text, name="metrics", expect_handler=later)
        app.router.add_get("/healthz", self.healthz, name="healthz", expect_handler=later)
        app.router.add_route("*", "/{path:.*}", _unrouted, expect_handler=later)
        return app

    def metrics_app(self) -> web.Application:
        """What ``--metrics-address`` serves: the two read-only endpoints, nothing else,
        through the same middleware as the unix socket's (``_guard``, with no peer check:
        TCP has no credentials) and as ``app`` routes them."""
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_REQUEST_BYTES)
        later = _expect_later
        app.router.add_get("/metrics", self.metrics_text, name="metrics", expect_handler=later)
        app.router.add_get("/healthz", self.healthz, name="healthz", expect_handler=later)
        app.router.add_route("*", "/{path:.*}", _unrouted, expect_handler=later)
        return app

    def allowed(self, peer: Union[Peer, Remote, None]) -> bool:
        """Whether the unix socket's peer may ask (root, or a member of ``--group``)."""
        return isinstance(peer, Peer) and peer_allowed(peer, self.group)

    def refuse(
        self,
        exc: KataMemError,
        status: int,
        peer: Union[Peer, Remote, None],
        what: str,
        cause: Optional[BaseException] = None,
    ) -> web.Response:
        """A request refused by the service itself (:func:`answer` logs its own): the
        error document, and one log line (with the traceback of a bug, ``cause``)."""
        level = logging.ERROR if status >= 500 else logging.WARNING
        log.log(
            level, "%s from %s: %d: %s", what, peer_text(peer), status, exc.message, exc_info=cause
        )
        self.metrics.count_error(exc)
        return _json(render.error_json(exc), status, exc.exit_code)

    def failed(
        self, peer: Union[Peer, Remote, None], port: Port, failure: Failure
    ) -> web.StreamResponse:
        """The answer to a request that ended before any handler answered it (aiohttp
        refused it: a request line, header or chunk it cannot parse; or a handler's bug),
        as the handlers answer: a ``kata-mem/error/v1`` document and one log line, and the
        connection closed after it (:class:`~kata_mem.interfaces.aiohttp_adapter.Connection`)."""
        status, cause = failure.status, failure.cause
        if failure.gone:
            log.warning(
                "a request from %s: the connection closed before it was answered (%s)",
                peer_text(peer),
                describe(cause) if cause else status,
            )
            return web.Response(status=status)  # no one is left to read it
        if port.checks_peer and not self.allowed(peer):
            return self.forbidden(peer, "a request")
        if status >= 500:
            error = KataMemError(
                f"internal error answering the request ({describe(cause) if cause else status}); "
                "a bug in kata-mem"
            )
            resp = self.refuse(error, status, peer, "a request", cause=cause)
        else:
            error = InputError(
                f"HTTP request: {failure.text}; expected HTTP/1.1 with {port.routes}"
            )
            resp = self.refuse(error, status, peer, "a request")
        # Never through the middleware that times every request: counted here.
        self.metrics.malformed.labels(str(status), port.name).inc()
        resp.force_close()
        return resp

    def forbidden(self, peer: Union[Peer, Remote, None], what: str) -> web.Response:
        """403 for a peer that may not ask; the connection is closed, its body unread."""
        group = "" if self.group is None else f" or members of its --group (gid {self.group})"
        resp = self.refuse(
            InputError(
                f"peer {peer_text(peer)}: not allowed; kata-mem serve answers root{group} "
                "(see its --group)"
            ),
            403,
            peer,
            what,
        )
        resp.force_close()
        return resp

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    async def read_view(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the node view's own thread (:class:`~kata_mem.interfaces.node_view.Run`)."""
        return await asyncio.get_running_loop().run_in_executor(self.reader, fn)

    def vm_owner(self, root: Path, sandbox: str, reached: Endpoint) -> Optional[str]:
        """Which other sandbox sizes the VM a sandbox's first request reached
        (:attr:`CallOptions.vm_owner`, asked in a pool thread): from the node view, which
        reads every change the kernel reported first; from the files when it cannot say
        (:func:`~kata_mem.edges.journal.vm_owner`, as a one-shot call)."""
        from kata_mem.edges.journal import vm_owner
        from kata_mem.interfaces.node_view import Unknown

        if self.view is not None:
            found = self.view.vm_owner_from_thread(root, sandbox, reached, self.read_view)
            if not isinstance(found, Unknown):
                return found
        return vm_owner(root, sandbox, reached)

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        start = time.perf_counter()
        route = request.match_info.route.name or "other"
        peer, port = origin(request)
        # The peer first: nothing of a refused peer's request is read or decoded.
        expected = _expectations(request)
        if port.checks_peer and not self.allowed(peer):
            response: web.StreamResponse = self.forbidden(peer, _what(request))
            leave_unread(request)  # not even drained: closed once the 403 is sent
        elif any(e != "100-continue" for e in expected):
            # RFC 9110, 10.1.1: an expectation the server cannot meet is a 417.
            response = self.refuse(
                InputError(
                    f"Expect {', '.join(request.headers.getall('Expect'))!r}: not an "
                    "expectation kata-mem serve meets; send none, or 100-continue"
                ),
                417,
                peer,
                _what(request),
            )
            response.force_close()
            leave_unread(request)
        else:
            request["peer"] = peer
            # 100 Continue once the body is about to be read (``read_body``), never before;
            # so never on the metrics address, whose endpoints read none.
            request["continue"] = bool(expected) and request.version >= HttpVersion11
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # the router's 404 and 405, as documents
                what = _what(request)
                response = self.refuse(
                    InputError(f"{what}: {exc.reason}; expected {port.routes}"),
                    exc.status,
                    peer,
                    what,
                )
                if isinstance(exc, web.HTTPMethodNotAllowed):  # RFC 9110, 15.5.6
                    response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        self.metrics.observe(route, port.name, time.perf_counter() - start)
        return response

    async def shim(self, request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        peer = request.get("peer")
        # Every Content-Encoding header, each a list of codings (RFC 9110, 8.4 and 5.3).
        codings = request.headers.getall("Content-Encoding", [])
        coding = ", ".join(c.strip() for c in codings)
        if any(c.strip().lower() not in ("", "identity") for h in codings for c in h.split(",")):
            # A request is a small document on a local socket: nothing to gain from
            # compression, and no decoder to feed what a client chose. 415 with the
            # codings accepted, as RFC 9110 (sections 15.5.16 and 12.5.3) asks.
            resp = self.refuse(
                InputError(
                    f"request body: Content-Encoding {coding!r}: not accepted; send the body "
                    "as it is (no Content-Encoding, or identity)"
                ),
                415,
                peer,
                _what(request),
            )
            resp.headers["Accept-Encoding"] = "identity"
            resp.force_close()  # the body is not read
            return resp
        try:
            if request.content.is_eof() and not request.get("continue"):
                # The whole body came with the headers (a shim's small request): nothing to
                # wait for, and wait_for's task and timer were a sixth of a plan-only answer.
                body = await read_body(request, MAX_REQUEST_BYTES, False)
            else:
                reading = read_body(request, MAX_REQUEST_BYTES, request.get("continue", False))
                body = await asyncio.wait_for(reading, self.idle_timeout)
        except asyncio.TimeoutError:
            resp = self.refuse(
                InputError(
                    f"request body: not received within {self.idle_timeout:g} s; send the "
                    "whole request at once"
                ),
                408,
                peer,
                _what(request),
            )
            resp.force_close()
            return resp
        except Unreadable as exc:  # a chunk aiohttp's parser refused
            resp = self.refuse(
                InputError(f"request body: {exc}; expected an HTTP/1.1 body"),
                400,
                peer,
                _what(request),
            )
            resp.force_close()  # what follows it is not a request
            leave_unread(request)
            return resp
        if body is None:
            # Refused before it is read, as the HTTP layer's other refusals: an error document.
            too_large = InputError(f"request larger than {MAX_REQUEST_BYTES} bytes")
            resp = self.refuse(too_large, 413, peer, _what(request))
            resp.force_close()  # the rest of the body is not read
            return resp
        # Parsed once, here: what follows reads the typed request. A small body is parsed,
        # and a plan-only request of one answered, on the loop: it waits for no VM and no
        # guest, and a thread hop would be most of its cost. A large one is CPU work the
        # loop would not answer others during (a second for a 1 MiB one with 19,000
        # containers, /healthz included), and any other mode may wait for a guest.
        small = len(body) <= INLINE_BODY_BYTES
        parsed = parse(body) if small else await self._run(lambda: parse(body))
        if not isinstance(parsed, SandboxRequest):
            return self.send(parsed)
        served = as_served(parsed, self.default_config)
        done = await self.turns.run(
            served.sandbox,
            lambda: answer(served, self.env, self.options),
            on_loop=small and served.mode == "plan",
        )
        log_answer(served, done, peer_text(peer), time.perf_counter() - start)
        if self.view is not None and served.mode != "plan":
            self.view.poke(served.sandbox)  # what it changed, read now (inotify says so too)
        return self.send(done)

    def send(self, done: Answer, status: Optional[int] = None) -> web.Response:
        """A shim answer, counted from its typed response or error, rendered once."""
        self.metrics.count_answer(done)
        if isinstance(done.response, Applied):
            self.saw(done.response.sandbox, done.response.plan.memory.host_cgroup_unseen)
        code = done.exit_code
        return _json(done.document(), status or http_status(code), code)

    async def node(self, request: web.Request) -> web.StreamResponse:
        view = self.view
        entries = None if view is None else await view.current(self.read_view)
        try:
            if view is not None and entries is not None:
                # From memory, on the loop: no thread hop (most of this answer's time on a
                # busy node), and the body made again only when something changed.
                body = view.document(self.settings, entries)
                return web.Response(body=body, status=200, content_type="application/json")
            return _json(await self._run(self._node_from_files), 200)
        except KataMemError as exc:
            return self._failed(request, exc)

    def _node_from_files(self) -> dict[str, Any]:
        """GET /v1/node read from the files, as ``status --all`` reads them (no node view)."""
        from kata_mem.orchestration.status import node_status

        return render_node.node_status_json(node_status(self.settings, self.state_dir))

    async def sandbox(self, request: web.Request) -> web.StreamResponse:
        from kata_mem.orchestration.status import NoEndpoint, read_status, saved_endpoint

        sandbox = request.match_info["id"]
        try:
            check_sandbox_id(sandbox)
            found = await self._run(lambda: saved_endpoint(self.state_dir, sandbox))
            if isinstance(found, NoEndpoint):
                return self._failed(request, InputError(found.describe()), 404)
            try:
                doc = await asyncio.wait_for(
                    self._run(
                        lambda: render_node.status_json(
                            read_status(found, sandbox, self.state_dir, self.env)
                        )
                    ),
                    STATUS_TIMEOUT_S,
                )
            except asyncio.TimeoutError as exc:
                raise BackendUnavailable(
                    f"sandbox {sandbox}: {found.describe()} did not answer within "
                    f"{STATUS_TIMEOUT_S:g} s (a resize may be holding its monitor); try again"
                ) from exc
        except KataMemError as exc:
            return self._failed(request, exc)
        return _json(doc, 200)

    def _failed(
        self, request: web.Request, exc: KataMemError, status: Optional[int] = None
    ) -> web.Response:
        return self.refuse(
            exc,
            status or http_status(exc.exit_code),
            request.get("peer"),
            _what(request),
        )

    # --- the reconcile loop ------------------------------------------------------------

    async def metrics_text(self, request: web.Request) -> web.StreamResponse:
        entries = None if self.view is None else await self.view.current(self.read_view)
        body = await self._run(lambda: self.metrics.text(entries))
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE
        return resp

    def saw(self, sandbox: str, unseen: Optional[Unseen]) -> None:
        """Keep whether the sandbox's last resize could see QEMU's host cgroup (the
        newest words, for /healthz); a change of its reason is logged once, not at every
        answer: the words may change with the same reason (a hard limit each resize moves)."""
        before = self.unseen.get(sandbox)
        if unseen is None:
            if self.unseen.pop(sandbox, None) is not None:
                log.info("sandbox %s: the host cgroup guard sees QEMU's cgroup again", sandbox)
        elif before is not None and before.reason == unseen.reason:
            self.unseen[sandbox] = unseen  # said already
        else:
            self.unseen[sandbox] = unseen
            log.warning(
                "sandbox %s: host cgroup unseen (%s), grows are held: %s",
                sandbox,
                unseen.reason,
                unseen.detail,
            )
        self.metrics.unseen_now.set(len(self.unseen))

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        """ok while the state directory can be used: kata-mem's, empty, or not made yet
        (the first apply makes it); checked each time (a stat and a listing). degraded
        (still 200: restarting the pod would not mend it) while a sandbox's last resize
        could not see QEMU's host cgroup, with each sandbox and why."""
        from kata_mem.edges.statedir import state_dir_state

        try:
            await self._run(lambda: state_dir_state(self.state_dir))
        except KataMemError as exc:
            # Not logged: probes ask every few seconds, and the answer says why.
            self.metrics.count_error(exc)
            return _json(render.error_json(exc), 503, exc.exit_code)
        if self.unseen:
            return _json(render_node.degraded_json(self.unseen), 200)
        return _json({"status": "ok"}, 200)


def log_answer(request: SandboxRequest, done: Answer, peer: str, seconds: float) -> None:
    """The one INFO line of an answered request: its sandbox, event, mode, caller, what
    came of it and how long it took; in JSON mode the same as fields."""
    response = done.response
    if done.error is not None:
        outcome = f"error {done.error.kind}"
    elif isinstance(response, Applied):
        o = response.outcome
        outcome = o.status + (f" {o.reason}" if o.reason else "")
    elif isinstance(response, Planned):
        outcome = f"planned {to_mib_floor(response.plan.memory.target)} MiB"
    else:
        outcome = "forgotten"
    ms = round(seconds * 1000, 1)
    log.info(
        "sandbox %s: %s (%s) from %s: %s, exit %d, %g ms",
        request.sandbox,
        request.event,
        request.mode,
        peer,
        outcome,
        done.exit_code,
        ms,
        extra={
            "fields": {
                "sandbox": request.sandbox,
                "event": request.event,
                "mode": request.mode,
                "peer": peer,
                "outcome": outcome,
                "exit_code": done.exit_code,
                "duration_ms": ms,
            }
        },
    )
