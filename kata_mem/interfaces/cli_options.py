"""What the ``kata-mem`` commands share: the options several take (``-v`` and
``--log-format``, ``--json``, the request's, the host overrides, the backend's) and
reading them (the configuration file, the host overrides, the endpoint, the sandbox
id, the node's settings and state directory), and the JSON on stdout."""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Optional, TypeVar

import click

from kata_mem.core.arch import check_hugepages, normalize_arch
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import InputError
from kata_mem.core.model import Origin, Settings, SizingConfig, Workload
from kata_mem.core.quantity import quantity_bytes
from kata_mem.core.request import MIN_HOST_MEMORY, CallOptions, HostOverrides
from kata_mem.core.units import to_mib_floor
from kata_mem.core.values import replace
from kata_mem.edges import config as config_mod
from kata_mem.edges import logs
from kata_mem.edges.host import machine_arch
from kata_mem.edges.sources import build_workload
from kata_mem.interfaces.cli_params import ArchName, Count, FileName, Text
from kata_mem.orchestration.handle import state_dir_of, workload_arch

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")
log = logging.getLogger("kata_mem")


def emit(data: dict[str, Any]) -> None:
    """A JSON document on stdout (``--json``)."""
    click.echo(json.dumps(data, indent=2))


@dataclass
class Asked:
    """What the command line asked for, as click parsed it (``obj`` of every context):
    an error is reported in the form asked for, and a file named ``--json`` given to
    ``--pod`` asks for nothing."""

    json: bool = False


def _json_asked(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value and isinstance(ctx.obj, Asked):
        ctx.obj.json = True
    return value


def json_option(help: str) -> Callable[[F], F]:
    """``--json``; eager, so that it counts before any other option's value is checked
    (an error in one is then a JSON document too)."""
    return click.option(
        "--json", "as_json", is_flag=True, is_eager=True, callback=_json_asked, help=help
    )


def host_options(fn: F) -> F:
    fn = click.option(
        "--host-hugepages",
        type=Text("COUNTxSIZE"),
        metavar="COUNTxSIZE",
        help="Override the hugepage pool, e.g. 512x2Mi (used with enable_hugepages).",
    )(fn)
    fn = click.option(
        "--host-arch",
        type=ArchName(),
        metavar="ARCH",
        help="Override the architecture: x86_64/amd64, aarch64/arm64, ppc64le, s390x, riscv64.",
    )(fn)
    fn = click.option(
        "--host-cpus", type=Count(1), metavar="N", help="Override the host CPU count."
    )(fn)
    fn = click.option(
        "--host-memory",
        type=Text("a quantity"),
        metavar="QTY",
        help="Override host MemTotal, e.g. 32Gi (floored to MiB, as MemTotal is).",
    )(fn)
    return fn


def host_overrides(
    host_memory: Optional[str],
    host_cpus: Optional[int],
    host_arch: Optional[str],
    host_hugepages: Optional[str],
) -> HostOverrides:
    """The ``--host-*`` options."""
    memory = None
    if host_memory is not None:
        least = f"{to_mib_floor(MIN_HOST_MEMORY)}Mi"
        memory = quantity_bytes(host_memory, "--host-memory", MIN_HOST_MEMORY, least)
    arch = None if host_arch is None else normalize_arch(host_arch, "--host-arch")
    pool = None
    if host_hugepages is not None:
        count, sep, size = host_hugepages.partition("x")
        if not sep or not count.isascii() or not count.isdigit() or len(count) > 19:
            raise InputError(
                f"--host-hugepages {host_hugepages!r}: expected COUNTxSIZE, a whole number "
                "of pages and a page size, e.g. 512x2Mi"
            )
        pool = check_hugepages(
            int(count),
            quantity_bytes(size, f"--host-hugepages {host_hugepages!r}: SIZE"),
            f"--host-hugepages {host_hugepages!r}",
            arch or machine_arch(),
        )
    return HostOverrides(memory, host_cpus, arch, pool)


def find_config(path: Optional[str]) -> tuple[Path, str]:
    """The configuration file to use (``--config``, KATA_CONF_FILE, or where Kata
    looks), and which of them chose it."""
    found, why = config_mod.find_config(path, config_mod.env())
    log.info("configuration %s (%s)", found, why)
    return found, why


def read_config(path: Optional[str]) -> tuple[SizingConfig, str]:
    found, why = find_config(path)
    return config_mod.load_config(found), why


def _global_option(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    # ctx.meta is shared by the group's and the command's contexts, so -v counts in
    # either position and a --log-format given after the command wins.
    meta = ctx.meta
    if param.name == "verbose":
        meta["kata_mem.verbose"] = meta.get("kata_mem.verbose", 0) + value
    elif value is not None:
        meta["kata_mem.log_format"] = value
    # Not given (yet): the format main() read from the whole command line, so that a
    # --log-format after the command also covers errors in parsing what follows it.
    fmt = meta.get("kata_mem.log_format", logs.current_format())
    logs.setup_logging(meta.get("kata_mem.verbose", 0), fmt)
    return value


def global_options(fn: F) -> F:
    """``-v`` and ``--log-format``, accepted before the command and after it."""
    fn = click.option(
        "--log-format",
        type=click.Choice(logs.FORMATS),
        expose_value=False,
        callback=_global_option,
        help="stderr format: text (default), or json: one object per line, errors included.",
    )(fn)
    fn = click.option(
        "-v",
        "--verbose",
        count=True,
        expose_value=False,
        callback=_global_option,
        help="More log output on stderr (-vv: debug).",
    )(fn)
    return fn


class Described(NamedTuple):
    """What :func:`request_options` describe, as click parsed them; :meth:`read` reads
    them, alike for preview and apply."""

    config_path: Optional[str]
    pod: Optional[Path]
    oci: tuple[Path, ...]
    limit: tuple[str, ...]
    cpu: tuple[str, ...]
    host_cgroup: Optional[str]
    host_memory: Optional[str]
    host_cpus: Optional[int]
    host_arch: Optional[str]
    host_hugepages: Optional[str]

    def read(self) -> tuple[str, HostOverrides, Workload]:
        """The configuration file as Kata finds it (named as given: the plan shows it so;
        the request an apply saves names it absolutely, ``handle.saved_request``), the
        host overrides with ``--host-cgroup``, and the workload, read for the
        architecture the request's host probe will find."""
        config, _ = find_config(self.config_path)
        overrides = replace(
            host_overrides(self.host_memory, self.host_cpus, self.host_arch, self.host_hugepages),
            cgroup=self.host_cgroup,
            cgroup_origin=Origin("option", "--host-cgroup"),
        )
        workload = build_workload(
            self.pod, self.oci, self.limit, self.cpu, workload_arch(overrides)
        )
        return str(config), overrides, workload


def request_options(fn: Callable[..., R]) -> Callable[..., R]:
    """The options that describe a sandbox (shared by preview and apply), given to
    ``fn`` as one :class:`Described`, its first argument; read when ``fn`` reads them
    (:meth:`Described.read`), so that what it checks first is still checked first."""

    @functools.wraps(fn)
    def command(**given: Any) -> R:
        described = Described(*(given.pop(name) for name in Described._fields))
        return fn(described, **given)

    options = [
        click.option(
            "--config",
            "config_path",
            type=FileName(),
            metavar="FILE",
            help="Kata configuration TOML (default: where Kata looks).",
        ),
        click.option(
            "--pod",
            type=FileName(path_type=Path),
            metavar="FILE",
            help="Kubernetes Pod manifest (YAML or JSON).",
        ),
        click.option(
            "--oci",
            type=FileName(path_type=Path),
            multiple=True,
            metavar="FILE",
            help="OCI config.json (repeatable).",
        ),
        click.option(
            "--limit",
            type=Text("a quantity"),
            multiple=True,
            metavar="QTY",
            help="A container memory limit, e.g. 512Mi (repeatable).",
        ),
        click.option(
            "--cpu",
            type=Text("a quantity"),
            multiple=True,
            metavar="QTY",
            help="A container CPU limit, e.g. 500m (repeatable).",
        ),
        click.option(
            "--host-cgroup",
            type=FileName(directory=True, absolute=True),
            metavar="DIR",
            help="The VM's host memory cgroup (v1 or v2 directory); default: the one its "
            "QEMU is in. Growth is kept under its limit with the VMM's overhead.",
        ),
    ]
    for opt in reversed(options):
        command = opt(command)
    return host_options(command)


def endpoint_of(
    qmp: Optional[str], libvirt_uri: Optional[str], domain: Optional[str]
) -> Optional[Endpoint]:
    """The VM the backend options name (``--qmp``, or ``--libvirt`` with ``--domain``), if any."""
    if qmp and libvirt_uri:
        raise click.UsageError("give either --qmp or --libvirt, not both")
    if libvirt_uri:
        if not domain:
            raise click.UsageError("--libvirt needs --domain NAME")
        return Endpoint("libvirt", libvirt_uri, domain)
    if domain:
        raise click.UsageError("--domain goes with --libvirt URI")
    return Endpoint("qmp", qmp) if qmp else None


def sandbox_id(sandbox: Optional[str], endpoint: Optional[Endpoint]) -> str:
    """The given id, else one derived from the endpoint (stable across calls)."""
    if sandbox is not None:
        return sandbox
    if endpoint is None:
        return "dry-run"
    import hashlib

    where = (
        os.path.realpath(endpoint.target)
        if endpoint.kind == "qmp"
        else f"{endpoint.target}#{endpoint.domain}"
    )
    return f"{endpoint.kind}-" + hashlib.sha256(where.encode()).hexdigest()[:12]


def backend_options(fn: F) -> F:
    options = [
        click.option(
            "--qmp",
            type=FileName(absolute=True),
            metavar="SOCKET",
            help="The VM's QMP unix socket.",
        ),
        click.option(
            "--libvirt",
            "libvirt_uri",
            type=Text(),
            metavar="URI",
            help="A libvirt URI, e.g. qemu:///system (with --domain).",
        ),
        click.option(
            "--domain", type=Text(), metavar="NAME", help="The libvirt domain (with --libvirt)."
        ),
        click.option(
            "--sandbox",
            type=Text(),
            metavar="ID",
            help="Sandbox id (default: derived from the socket or domain). status --sandbox ID "
            "alone asks the VM of the sandbox's last applied request.",
        ),
        click.option(
            "--state-dir",
            type=FileName(directory=True),
            metavar="DIR",
            help="Per-sandbox lock and journal (default: [kata_mem] state_dir).",
        ),
    ]
    for opt in reversed(options):
        fn = opt(fn)
    return fn


def node_of(config_path: Optional[str], state_dir: Optional[str]) -> tuple[Settings, str]:
    """The node's settings (``--config``'s ``[kata_mem]`` table, else the defaults) and
    its state directory (``--state-dir``, else theirs): ``status``, ``reconcile`` and
    ``serve`` read them alike."""
    settings = read_config(config_path)[0].settings if config_path else Settings()
    return settings, state_dir_of(CallOptions(state_dir=state_dir), settings)
