"""``kata-mem serve``: the process. :func:`run_service` (the CLI's entry) checks the state
directory, takes the sockets (:mod:`kata_mem.interfaces.listener`), serves the handlers
(:mod:`kata_mem.interfaces.service`) and runs the reconcile loop
(:mod:`kata_mem.interfaces.reconcile_loop`) until SIGTERM, then finishes what is in
flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import socket
from typing import Any, Optional

from aiohttp import web

from kata_mem import __version__
from kata_mem.core.model import Settings
from kata_mem.edges.logs import get_logger
from kata_mem.interfaces.listener import (
    DEFAULT_SOCKET,
    TCP,
    UNIX,
    Listener,
    MetricsAddress,
    activated,
    bind,
    bind_metrics,
    check_not_in_state_dir,
    group_id,
)
from kata_mem.interfaces.reconcile_loop import RECONCILE_INTERVAL_S, ReconcileLoop
from kata_mem.interfaces.service import IDLE_TIMEOUT_S, Connection, Service

# One logger for every line of serve (its modules are one service to an operator).
log = get_logger("kata_mem.interfaces.service")

#: On SIGTERM, how long requests in flight may still take (a resize is several steps of
#: at most ``step_timeout_s`` each); the unit's TimeoutStopSec is longer.
SHUTDOWN_TIMEOUT_S = 120.0


def _raise_open_files() -> None:
    """Room for many idle connections: the soft limit of open files up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, 65536), hard))


def _publish(listener: Listener, state_dir: str, config: Optional[str]) -> None:
    """Record beside the socket (bound here, or passed by systemd) the state directory
    and configuration this service answers with: what ``kata-mem-shim`` answers with in
    its own process when the service does not answer, so that a VM keeps one state wherever
    its call is answered (:func:`kata_mem.edges.service_record.publish_service`; issue 33, item 2).
    A socket with no path (an abstract one) has no shim to read it.

    :raises ConfigError: it cannot be written where no other user could replace it.
    """
    from kata_mem.edges.service_record import publish_service

    path = listener.path or listener.sock.getsockname()
    if isinstance(path, str) and path.startswith("/"):
        publish_service(path, state_dir, config)


async def _serve(
    service: Service,
    reconciler: ReconcileLoop,
    sock: socket.socket,
    where: str,
    metrics_sock: Optional[socket.socket],
) -> None:
    runner = web.AppRunner(service.app(), handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    server = runner.server
    assert server is not None  # set up
    loop = asyncio.get_running_loop()
    options: dict[str, Any] = {
        "loop": loop,
        "access_log": None,
        "keepalive_timeout": service.idle_timeout,
        # A refused body (413, 408) is read and dropped for at most this long, then cut.
        "lingering_time": service.idle_timeout,
        # Bodies are taken as sent (a Content-Encoding is refused): aiohttp would
        # otherwise inflate them as they arrive, for any peer, before the peer check.
        "auto_decompress": False,
    }
    listening = await loop.create_server(
        lambda: Connection(service, server, UNIX, **options), sock=sock, backlog=1024
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "kata-mem %s listening on %s (state dir %s, configuration %s, reconcile every %g s)",
        __version__,
        where,
        service.state_dir,
        service.default_config or "each request's, else where Kata looks",
        reconciler.interval,
    )
    scrapes: Optional[web.AppRunner] = None
    scraping: Optional[asyncio.AbstractServer] = None
    if metrics_sock is not None:
        scrapes = web.AppRunner(
            service.metrics_app(), handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S
        )
        await scrapes.setup()
        tcp_server = scrapes.server
        assert tcp_server is not None  # set up
        scraping = await loop.create_server(
            lambda: Connection(service, tcp_server, TCP, **options), sock=metrics_sock, backlog=128
        )
        host, port = metrics_sock.getsockname()[:2]
        log.info("metrics on %s (GET /metrics, /healthz)", MetricsAddress(host, port))
    loop_task = asyncio.create_task(reconciler.run(stop))
    await stop.wait()
    log.info("stopping: no new connections; waiting for requests and visits in flight")
    if scraping is not None and scrapes is not None:
        scraping.close()
        await scrapes.cleanup()
    listening.close()
    # Waits for the handlers still running; the loop finishes the visits it started.
    await asyncio.gather(runner.cleanup(), loop_task)


def run_service(
    socket_path: Optional[str],
    group: Optional[str],
    state_dir: str,
    settings: Settings,
    idle_timeout: float = IDLE_TIMEOUT_S,
    reconcile_interval: float = RECONCILE_INTERVAL_S,
    metrics_address: Optional[MetricsAddress] = None,
    default_config: Optional[str] = None,
) -> int:
    """``kata-mem serve``: listen until SIGTERM, then finish what is in flight; 0.

    :raises ConfigError: the socket or the metrics address cannot be had (in use, not a
        socket, no such group), or the state directory is not kata-mem's.
    """
    from kata_mem.edges.statedir import state_dir_state

    gid = group_id(group)
    state_dir_state(state_dir)  # kata-mem's, empty or absent; checked before anything is made
    _raise_open_files()
    # The process's own environment: what the service copies below and what any process
    # started from this one (a libvirt client may start its session daemon) inherits.
    passed = activated(os.environ, os.getpid())
    # First: a port in use is refused before the unix socket is made.
    metrics_sock = None if metrics_address is None else bind_metrics(metrics_address)
    try:
        if passed is None:
            path = socket_path or DEFAULT_SOCKET
            check_not_in_state_dir(path, state_dir)
            listener = bind(path, gid)
        else:
            listener = Listener(passed)
    except BaseException:
        if metrics_sock is not None:
            metrics_sock.close()
        raise
    where = "the socket systemd passed" if passed is not None else str(listener.path)
    config = None if default_config is None else os.path.abspath(default_config)
    try:
        _publish(listener, state_dir, config)
    except BaseException:
        listener.close()
        if metrics_sock is not None:
            metrics_sock.close()
        raise
    service = Service(state_dir, settings, gid, os.environ, idle_timeout, config)
    reconciler = ReconcileLoop(service, reconcile_interval)
    try:
        asyncio.run(_serve(service, reconciler, listener.sock, where, metrics_sock))
    finally:
        if metrics_sock is not None:
            metrics_sock.close()
        # A handler cut off by the shutdown timeout leaves its thread running: the
        # journal it writes is finished before the process goes.
        service.pool.shutdown(wait=True)
        listener.close()
    log.info("stopped")
    return 0
