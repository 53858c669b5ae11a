"""The node commands: ``status`` (a VM, or with ``--all`` the node), ``reconcile`` (one
pass), ``serve`` (the node service) and ``shim``'s help entry (the shim itself runs before
click is imported)."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any, Optional

import click

from kata_mem.core.errors import ConfigError, InputError
from kata_mem.edges import logs
from kata_mem.interfaces import render_node
from kata_mem.interfaces.cli_options import (
    backend_options,
    emit,
    endpoint_of,
    global_options,
    host_overrides,
    json_option,
    node_of,
    sandbox_id,
)
from kata_mem.interfaces.cli_params import FileName, MetricsAddressParam, Seconds, Text

#: ``--config`` of the commands that read a configuration only for its state_dir.
state_config_option = click.option(
    "--config",
    "config_path",
    type=FileName(),
    metavar="FILE",
    help="Kata configuration (for state_dir).",
)

if TYPE_CHECKING:
    from kata_mem.interfaces.listener import MetricsAddress


@click.command()
@global_options
@backend_options
@state_config_option
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every sandbox in the state directory and the node's totals, from the journals, or "
    "from the kata-mem serve at $KATA_MEM_SOCKET that keeps them (schema kata-mem/node/v1 "
    "with --json).",
)
@click.option(
    "--host-memory",
    type=Text("a quantity"),
    metavar="QTY",
    help="Override host MemTotal (with --all).",
)
@json_option("Print JSON (schema kata-mem/status/v1).")
def status(
    qmp: Optional[str],
    libvirt_uri: Optional[str],
    domain: Optional[str],
    sandbox: Optional[str],
    state_dir: Optional[str],
    config_path: Optional[str],
    every: bool,
    host_memory: Optional[str],
    as_json: bool,
) -> None:
    """Show what the hypervisor reports: boot memory, devices, plugged total, guest usage;
    with --all, every sandbox kata-mem manages and the node's totals. --sandbox ID alone
    asks the VM its last applied request names, as GET /v1/sandboxes/ID does."""
    from kata_mem.orchestration.status import NoEndpoint, node_status, read_status, saved_endpoint

    endpoint = endpoint_of(qmp, libvirt_uri, domain)
    if every:
        if endpoint is not None:
            raise click.UsageError("status --all takes no --qmp, --libvirt or --domain")
        settings, directory = node_of(config_path, state_dir)
        # The service's node view when it keeps this one (and the host is probed): no
        # sandbox's files read here; else the files, read as the service reads them. One
        # rendering of the two (the document's sizes in whole MiB render to themselves).
        node = None
        if host_memory is None and (served := served_node(directory, config_path)) is not None:
            with contextlib.suppress(ValueError):  # not the node's document: the files
                node = render_node.node_from_json(served)
        if node is None:
            node = node_status(settings, directory, host_overrides(host_memory, None, None, None))
        if as_json:
            emit(render_node.node_status_json(node))
        else:
            click.echo(render_node.node_status_text(node))
        return
    if endpoint is None and sandbox is None:
        raise click.UsageError(
            "status needs --qmp SOCKET, --libvirt URI --domain NAME, or --sandbox ID (a "
            "sandbox kata-mem has applied a request to)"
        )
    if host_memory is not None:
        raise click.UsageError("status --host-memory goes with --all (the node's totals)")
    directory = node_of(config_path, state_dir)[1]
    if endpoint is None:
        assert sandbox is not None
        found = saved_endpoint(directory, sandbox)
        if isinstance(found, NoEndpoint):
            raise InputError(found.describe())
        endpoint = found
    seen = read_status(endpoint, sandbox_id(sandbox, endpoint), directory, dict(os.environ))
    if as_json:
        emit(render_node.status_json(seen))
    else:
        click.echo(render_node.status_text(seen))


#: Where ``status --all`` looks for the service first, as ``kata-mem-shim`` does
#: (``shim_client.SOCKET_ENV``: imported from there, the shim's fallback through the command
#: line would make an import cycle).
SOCKET_ENV = "KATA_MEM_SOCKET"
#: How long ``status --all`` waits for the service before it reads the files itself.
SERVED_NODE_TIMEOUT_S = 10.0
#: The largest node document taken from the service (about 250 bytes a sandbox).
SERVED_NODE_CAP = 64 << 20


def served_node(directory: str, config_path: Optional[str]) -> Optional[dict[str, Any]]:
    """``GET /v1/node`` of the ``kata-mem serve`` at ``$KATA_MEM_SOCKET`` (else its default
    socket, as ``kata-mem-shim`` finds it), or None, and the caller reads the files: when
    none listens there, its listener is neither root nor this user (``SO_PEERCRED``, as the
    shim trusts it), the record beside its socket (read under the rule the shim reads it
    by) names another state directory or ``--config`` than this command's (its settings
    would differ), or its answer is not the node's document of ``directory`` within
    ``SERVED_NODE_TIMEOUT_S``. An error (a state directory another user could write) is
    the files' to say, with its exit code: the service's error answer is not taken.

    The service answers from what its node view keeps (docs/design/state.md, "What
    ``kata-mem serve`` notices, and how"), after reading every change the kernel reported
    so far, with the settings it started with; the warnings a damaged journal gives are
    in its log rather than on this command's stderr."""
    import http.client
    import json
    import socket

    from kata_mem.edges.service_record import published_service
    from kata_mem.interfaces.listener import DEFAULT_SOCKET, peer_of

    path = os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET
    try:
        record = published_service(path)
    except ConfigError:
        return None  # a record kata-mem does not trust: the files say what there is
    config = None if config_path is None else os.path.abspath(config_path)
    if record is None or (record.state_dir, record.config) != (os.path.abspath(directory), config):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(SERVED_NODE_TIMEOUT_S)
    conn = http.client.HTTPConnection("localhost", timeout=SERVED_NODE_TIMEOUT_S)
    try:
        sock.connect(path)
        if peer_of(sock).uid not in (0, os.geteuid()):
            return None  # as kata-mem-shim: never a planted socket's word
        conn.sock = sock
        conn.request("GET", "/v1/node", headers={"Connection": "close"})
        resp = conn.getresponse()
        body = resp.read(SERVED_NODE_CAP + 1)
        if resp.status != 200 or len(body) > SERVED_NODE_CAP:
            return None
        doc = json.loads(body)
    except (OSError, http.client.HTTPException, ValueError, RecursionError):
        return None
    finally:
        conn.close()
        sock.close()
    if not isinstance(doc, dict) or doc.get("schema") != render_node.NODE_SCHEMA:
        return None
    return doc if doc.get("state_dir") == directory else None


@click.command()
@global_options
@state_config_option
@click.option(
    "--state-dir",
    type=FileName(directory=True),
    metavar="DIR",
    help="State directory (default: [kata_mem] state_dir).",
)
@json_option("Print JSON (schema kata-mem/reconcile/v1).")
def reconcile(config_path: Optional[str], state_dir: Optional[str], as_json: bool) -> int:
    """One pass over every sandbox: retry deferred shrinks that are due, settle pending
    DIMMs, forget sandboxes whose VM is gone. Run it from a timer (see the documentation).
    Exits with the code of the first sandbox that failed (the pass goes on)."""
    from kata_mem.orchestration.reconcile import exit_code, reconcile_all

    visits = reconcile_all(node_of(config_path, state_dir)[1], dict(os.environ))
    if as_json:
        emit(render_node.reconcile_json(visits))
    else:
        click.echo(render_node.reconcile_text(visits))
    return exit_code(visits)


@click.command("serve")
@global_options
@click.option(
    "--socket",
    "socket_path",
    type=FileName(),
    metavar="PATH",
    help="The unix socket to listen on (default /run/kata-mem/kata-mem.sock); ignored "
    "when systemd passes one (socket activation).",
)
@click.option(
    "--group",
    type=Text(),
    metavar="NAME",
    help="The group that may use the socket besides root (socket mode 0660).",
)
@click.option(
    "--state-dir",
    type=FileName(directory=True),
    metavar="DIR",
    help="Per-sandbox locks and journals (default: [kata_mem] state_dir); requests use it "
    "whatever their configuration says.",
)
@click.option(
    "--config",
    "config_path",
    type=FileName(),
    metavar="FILE",
    help="Kata configuration: the node's settings and state_dir, and the configuration of "
    "every request whose config is null (default: where Kata looks).",
)
@click.option(
    "--idle-timeout",
    type=Seconds(0.1, 3600),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="Close a connection idle this long, or whose request body does not arrive in it.",
)
@click.option(
    "--reconcile-interval",
    type=Seconds(0.1, 3600),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="How often to look again at a sandbox with something pending (a pending unplug, a "
    "step a crash cut short, a grow held by the pod cgroup) or whose VM the kernel cannot "
    "watch; the rest is visited when the kernel reports a change (a journal written, a VM's "
    "process exited), a deferred shrink when it is due.",
)
@click.option(
    "--metrics-address",
    type=MetricsAddressParam(),
    metavar="[HOST:]PORT",
    help="Also serve GET /metrics and /healthz (only) over TCP there, for Prometheus; "
    "PORT alone is 127.0.0.1:PORT, HOST an IP address. Off by default.",
)
def serve_node(
    socket_path: Optional[str],
    group: Optional[str],
    state_dir: Optional[str],
    config_path: Optional[str],
    idle_timeout: float,
    reconcile_interval: float,
    metrics_address: Optional[MetricsAddress],
) -> int:
    """Answer shims over HTTP on a unix socket until SIGTERM (see the documentation): POST
    /v1/shim, GET /v1/node, /v1/sandboxes/ID, /metrics, /healthz; with --metrics-address,
    /metrics and /healthz over TCP too."""
    from kata_mem.interfaces.serve import run_service

    settings, directory = node_of(config_path, state_dir)
    # A daemon says what it does: its start-up and one line per answered request (INFO)
    # are logged without -v.
    logs.at_least_info()
    return run_service(
        socket_path,
        group,
        directory,
        settings,
        idle_timeout,
        reconcile_interval,
        metrics_address,
        config_path,
    )


@click.command()
@global_options
@click.option(
    "--print-schema",
    type=click.Choice(("request", "response")),  # kata_mem.interfaces.main.SHIM_SCHEMAS
    help="Print that JSON Schema on stdout and exit.",
)
def shim(print_schema: Optional[str]) -> None:
    """Read one JSON request on stdin, write one JSON response on stdout (see the documentation).

    Dispatched before click is imported (kata_mem.interfaces.main); this entry documents it in
    --help and completes its options."""
    raise click.UsageError(
        "kata-mem shim is run before click; call it through kata_mem.interfaces.main"
    )


COMMANDS = (status, reconcile, serve_node, shim)
