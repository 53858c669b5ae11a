"""The ``kata-mem`` command line (click).

stdout carries only the result (text, or JSON with ``--json``); diagnostics go
to stderr. Every :class:`~kata_mem.core.errors.KataMemError` becomes one line on
stderr and its exit code; click's usage errors exit 2.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, TypeVar

import click
from click.shell_completion import CompletionItem

from kata_mem.core.arch import GO_ARCH, check_hugepages, normalize_arch
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import InputError, KataMemError
from kata_mem.core.fields import integer_range
from kata_mem.core.model import (
    SIZING_MODELS,
    Origin,
    Settings,
    SizingConfig,
    SizingModel,
    Workload,
)
from kata_mem.core.quantity import quantity_bytes
from kata_mem.core.request import MIN_HOST_MEMORY, CallOptions, HostOverrides, SandboxRequest
from kata_mem.core.units import INT64_MAX, to_mib_floor
from kata_mem.edges import config as config_mod
from kata_mem.edges import logs
from kata_mem.edges.host import machine_arch
from kata_mem.edges.sources import build_workload
from kata_mem.interfaces import render
from kata_mem.interfaces.pipes import ResultLost, lost
from kata_mem.orchestration.handle import (
    CURRENT_OPTION,
    apply_request,
    plan_request,
    probe,
    state_dir_of,
    workload_arch,
)

if TYPE_CHECKING:
    from kata_mem.interfaces.listener import MetricsAddress

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("kata_mem")


def _utf8(value: str, param: Optional[click.Parameter], expected: str) -> str:
    """Refuse a value that is not UTF-8 (Python carries such arguments as lone surrogates):
    kata-mem keeps these values as JSON text (its journal, the shim protocol, --json)."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        name = "value" if param is None else param.human_readable_name
        if isinstance(param, click.Option):
            name = max(param.opts, key=len)
        raise InputError(
            f"{name} {os.fsencode(value)!r}: not valid UTF-8; expected {expected} in UTF-8"
        ) from exc
    return value


def _given(
    kind: click.ParamType[Any], value: Any, param: Optional[click.Parameter], ctx: Any
) -> None:
    """Refuse an empty value: it would silently mean the default (``--socket ""``
    binding the default socket), which is not what was written."""
    if value in ("", b""):
        kind.fail("an empty value; give one, or leave the option out for the default", param, ctx)


class Text(click.types.StringParamType):
    """A non-empty string that must be UTF-8; ``expected`` says what it is, for errors."""

    def __init__(self, expected: str = "text") -> None:
        self.expected = expected

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> str:
        _given(self, value, param, ctx)
        return _utf8(super().convert(value, param, ctx), param, self.expected)


#: Kubernetes' DNS-1123 label (k8s.io/apimachinery pkg/util/validation, IsDNS1123Label).
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class DnsName(Text):
    """A RuntimeClass name (a DNS-1123 subdomain) or handler (a DNS-1123 label), as the API
    server checks them (kubernetes pkg/apis/node/validation, ``ValidateRuntimeClass``:
    ``NameIsDNSSubdomain`` for the name, ``NameIsDNSLabel`` for the handler)."""

    def __init__(self, subdomain: bool) -> None:
        super().__init__("a DNS-1123 subdomain" if subdomain else "a DNS-1123 label")
        self.subdomain = subdomain

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> str:
        text = super().convert(value, param, ctx)
        labels = text.split(".") if self.subdomain else [text]
        if len(text) > (253 if self.subdomain else 63) or not all(
            DNS_LABEL.fullmatch(label) for label in labels
        ):
            what = "dot-separated labels" if self.subdomain else "a label"
            self.fail(
                f"{text!r}: expected {self.expected} (lowercase letters, digits and '-', "
                f"{what}, starting and ending with a letter or digit)",
                param,
                ctx,
            )
        return text


class Count(click.ParamType):  # type: ignore[type-arg]  # not generic in click 8.1
    """A whole number in ASCII digits from ``minimum`` to INT64_MAX, as a request's
    integers are: ``int()`` would also take a fullwidth digit (U+FF12), ``1_0`` and
    `` 2 ``, which no quantity option takes."""

    name = "integer"

    def __init__(self, minimum: int) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> int:
        _given(self, value, param, ctx)
        if isinstance(value, int) and self.minimum <= value <= INT64_MAX:
            return value
        expected = integer_range(self.minimum, INT64_MAX)
        text = _utf8(str(value), param, expected)
        if text.isascii() and text.isdigit() and self.minimum <= int(text) <= INT64_MAX:
            return int(text)
        self.fail(f"{text!r}: expected {expected}", param, ctx)


class Seconds(click.ParamType):  # type: ignore[type-arg]  # not generic in click 8.1
    """A number of seconds from ``minimum`` to ``maximum`` in ASCII decimal digits
    (``float()`` would also take ``nan``, which every range check lets through, and
    fullwidth digits)."""

    name = "seconds"

    def __init__(self, minimum: float, maximum: float) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> float:
        _given(self, value, param, ctx)
        expected = f"a number of seconds from {self.minimum:g} to {self.maximum:g}"
        text = _utf8(str(value), param, expected)
        if _DECIMAL.fullmatch(text) and self.minimum <= float(text) <= self.maximum:
            return float(text)
        self.fail(f"{text!r}: expected {expected}", param, ctx)


_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


class ArchName(Text):
    """An architecture name (checked by :func:`normalize_arch`, exit 4); the shell
    completes the names kata-mem knows."""

    def __init__(self) -> None:
        super().__init__("an architecture name")

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        return [CompletionItem(name) for name in GO_ARCH if name.startswith(incomplete)]


class FileName(click.Path):
    """A non-empty file or directory name: the shell completes it, kata-mem checks it
    (click's own checks are off, so that the errors and exit codes stay kata-mem's).

    ``absolute``: made absolute against the current directory, for a path the sandbox's
    saved request keeps (``reconcile``, ``serve`` and timers run from other directories,
    where a relative one names something else, or nothing), as ``os.path.abspath`` makes
    the saved configuration path.
    """

    def __init__(
        self, *, directory: bool = False, absolute: bool = False, path_type: Any = None
    ) -> None:
        super().__init__(exists=False, file_okay=not directory, path_type=path_type)
        self.absolute = absolute

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> Any:
        _given(self, value, param, ctx)
        name = _utf8(value, param, "a path")
        return self.coerce_path_result(os.path.abspath(name) if self.absolute else name)


class MetricsAddressParam(Text):
    """``--metrics-address``: ``PORT`` or ``HOST:PORT`` (exit 2 naming what was expected)."""

    name = "address"

    def __init__(self) -> None:
        super().__init__("an address")

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> Any:
        from kata_mem.interfaces.listener import MetricsAddress

        if isinstance(value, MetricsAddress):
            return value
        try:
            return MetricsAddress.parse(super().convert(value, param, ctx))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _emit(data: dict[str, Any]) -> None:
    click.echo(json.dumps(data, indent=2))


@dataclass
class _Asked:
    """What the command line asked for, as click parsed it (``obj`` of every context):
    an error is reported in the form asked for, and a file named ``--json`` given to
    ``--pod`` asks for nothing."""

    json: bool = False


def _json_asked(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value and isinstance(ctx.obj, _Asked):
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


def _host(
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


def _find_config(path: Optional[str]) -> tuple[Path, str]:
    """The configuration file to use (``--config``, KATA_CONF_FILE, or where Kata
    looks), and which of them chose it."""
    found, why = config_mod.find_config(path, config_mod.env())
    log.info("configuration %s (%s)", found, why)
    return found, why


def _config(path: Optional[str]) -> tuple[SizingConfig, str]:
    found, why = _find_config(path)
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


class _BrokenPipe(Exception):
    """A BrokenPipeError out of a command (a socket's: stdout's is a ResultLost), kept
    from click, which would answer it with a quiet exit 1 (``BaseCommand.main`` catches
    every EPIPE): it is a bug, reported as one."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _BrokenPipe() from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@global_options
@click.version_option(package_name="kata-mem")
def cli() -> None:
    """Size and resize the guest memory of Kata-style VM sandboxes.

    -v and --log-format may be given before or after the command."""


def request_options(fn: F) -> F:
    """The options that describe a sandbox (shared by preview and apply)."""
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
        fn = opt(fn)
    return host_options(fn)


@cli.command()
@global_options
@request_options
@click.option(
    "--current",
    type=Text("a quantity"),
    metavar="QTY",
    help="Guest memory now (boot + plugged); default: boot memory.",
)
@click.option(
    "--allow-shrink",
    is_flag=True,
    help="Plan a shrink as apply --allow-shrink would; without it, a lower target keeps the "
    "current memory (ShrinkNotAllowed), as apply does.",
)
@json_option("Print the plan as JSON (schema kata-mem/plan/v1).")
def preview(
    config_path: Optional[str],
    pod: Optional[Path],
    oci: tuple[Path, ...],
    limit: tuple[str, ...],
    cpu: tuple[str, ...],
    host_cgroup: Optional[str],
    host_memory: Optional[str],
    host_cpus: Optional[int],
    host_arch: Optional[str],
    host_hugepages: Optional[str],
    current: Optional[str],
    allow_shrink: bool,
    as_json: bool,
) -> None:
    """Show the memory and vCPUs a sandbox would get, the steps, and why: what apply
    would do with the same flags. Changes nothing."""
    config, overrides, workload = _described(
        config_path,
        pod,
        oci,
        limit,
        cpu,
        host_cgroup,
        host_memory,
        host_cpus,
        host_arch,
        host_hugepages,
    )
    current_bytes = None if current is None else quantity_bytes(current, "--current")
    # A plan-only request, as the shim's and the service's: one path (handle.plan_request).
    request = SandboxRequest(
        "preview",
        "update",
        config,
        workload,
        None,
        mode="plan",
        allow_shrink=allow_shrink,
        host=overrides,
    )
    as_typed = replace(CURRENT_OPTION, value=current or "")  # for its error
    planned = plan_request(request, config_mod.env(), current_bytes, as_typed)
    if as_json:
        _emit(render.plan_json(planned.plan, planned.config))
    else:
        title = f"preview of {pod}" if pod else "preview"
        click.echo(render.plan_text(planned.plan, planned.config, title))


def _described(
    config_path: Optional[str],
    pod: Optional[Path],
    oci: tuple[Path, ...],
    limit: tuple[str, ...],
    cpu: tuple[str, ...],
    host_cgroup: Optional[str],
    host_memory: Optional[str],
    host_cpus: Optional[int],
    host_arch: Optional[str],
    host_hugepages: Optional[str],
) -> tuple[str, HostOverrides, Workload]:
    """What :func:`request_options` describe, read alike for preview and apply: the
    configuration file as Kata finds it (named as given: the plan shows it so; the
    request an apply saves names it absolutely, ``handle.saved_request``), the host
    overrides with ``--host-cgroup``, and the workload, read for the architecture the
    request's host probe will find."""
    config, _ = _find_config(config_path)
    overrides = replace(
        _host(host_memory, host_cpus, host_arch, host_hugepages),
        cgroup=host_cgroup,
        cgroup_origin=Origin("option", "--host-cgroup"),
    )
    workload = build_workload(pod, oci, limit, cpu, workload_arch(overrides))
    return str(config), overrides, workload


def _endpoint(
    qmp: Optional[str], libvirt_uri: Optional[str], domain: Optional[str]
) -> Optional[Endpoint]:
    if qmp and libvirt_uri:
        raise click.UsageError("give either --qmp or --libvirt, not both")
    if libvirt_uri:
        if not domain:
            raise click.UsageError("--libvirt needs --domain NAME")
        return Endpoint("libvirt", libvirt_uri, domain)
    if domain:
        raise click.UsageError("--domain goes with --libvirt URI")
    return Endpoint("qmp", qmp) if qmp else None


def _sandbox_id(sandbox: Optional[str], endpoint: Optional[Endpoint]) -> str:
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


@cli.command()
@global_options
@request_options
@backend_options
@click.option(
    "--dry-run", is_flag=True, help="Run the plan on an in-memory copy of the VM; change nothing."
)
@click.option(
    "--allow-shrink",
    is_flag=True,
    help="Let the guest's memory go down (each step safety-checked).",
)
@click.option(
    "--force",
    is_flag=True,
    hidden=True,
    help="Tests and benchmarks only: skip the shrink safety checks.",
)
@json_option("Print the outcome as JSON (schema kata-mem/outcome/v1).")
def apply(
    config_path: Optional[str],
    pod: Optional[Path],
    oci: tuple[Path, ...],
    limit: tuple[str, ...],
    cpu: tuple[str, ...],
    host_cgroup: Optional[str],
    host_memory: Optional[str],
    host_cpus: Optional[int],
    host_arch: Optional[str],
    host_hugepages: Optional[str],
    qmp: Optional[str],
    libvirt_uri: Optional[str],
    domain: Optional[str],
    sandbox: Optional[str],
    state_dir: Optional[str],
    dry_run: bool,
    allow_shrink: bool,
    force: bool,
    as_json: bool,
) -> int:
    """Resize the VM's memory to what its containers need: reconcile, plan, step, verify."""
    endpoint = _endpoint(qmp, libvirt_uri, domain)
    if endpoint is None and not dry_run:
        raise click.UsageError(
            "apply needs --qmp SOCKET or --libvirt URI --domain NAME (or --dry-run)"
        )
    config, overrides, workload = _described(
        config_path,
        pod,
        oci,
        limit,
        cpu,
        host_cgroup,
        host_memory,
        host_cpus,
        host_arch,
        host_hugepages,
    )
    if force:
        log.warning("--force skips every shrink safety check; for tests and benchmarks only")
    request = SandboxRequest(
        _sandbox_id(sandbox, endpoint),
        "update",
        config,
        workload,
        endpoint,
        mode="dry-run" if dry_run else "apply",
        allow_shrink=allow_shrink,
        host=overrides,
    )
    applied = apply_request(
        request, config_mod.env(), CallOptions(state_dir=state_dir, force=force)
    )
    cfg, outcome = applied.config, applied.outcome
    if as_json:
        doc = render.outcome_json(outcome, request.sandbox, applied.notes)
        doc["plan"] = render.plan_json(applied.plan, cfg)
        _emit(doc)
    else:
        click.echo(render.plan_text(applied.plan, cfg, "plan (from the observed VM)"))
        click.echo(render.outcome_text(outcome, applied.notes))
    return applied.exit_code


@cli.command()
@global_options
@backend_options
@click.option(
    "--config",
    "config_path",
    type=FileName(),
    metavar="FILE",
    help="Kata configuration (for state_dir).",
)
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every sandbox in the state directory and the node's totals, from the journals "
    "(schema kata-mem/node/v1 with --json).",
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

    endpoint = _endpoint(qmp, libvirt_uri, domain)
    if every:
        if endpoint is not None:
            raise click.UsageError("status --all takes no --qmp, --libvirt or --domain")
        settings, directory = _node(config_path, state_dir)
        node = node_status(settings, directory, _host(host_memory, None, None, None))
        if as_json:
            _emit(render.node_status_json(node))
        else:
            click.echo(render.node_status_text(node))
        return
    if endpoint is None and sandbox is None:
        raise click.UsageError(
            "status needs --qmp SOCKET, --libvirt URI --domain NAME, or --sandbox ID (a "
            "sandbox kata-mem has applied a request to)"
        )
    if host_memory is not None:
        raise click.UsageError("status --host-memory goes with --all (the node's totals)")
    directory = _node(config_path, state_dir)[1]
    if endpoint is None:
        assert sandbox is not None
        found = saved_endpoint(directory, sandbox)
        if isinstance(found, NoEndpoint):
            raise InputError(found.describe())
        endpoint = found
    seen = read_status(endpoint, _sandbox_id(sandbox, endpoint), directory, dict(os.environ))
    if as_json:
        _emit(render.status_json(seen))
    else:
        click.echo(render.status_text(seen))


def _node(config_path: Optional[str], state_dir: Optional[str]) -> tuple[Settings, str]:
    """The node's settings (``--config``'s ``[kata_mem]`` table, else the defaults) and
    its state directory (``--state-dir``, else theirs): ``status``, ``reconcile`` and
    ``serve`` read them alike."""
    settings = _config(config_path)[0].settings if config_path else Settings()
    return settings, state_dir_of(CallOptions(state_dir=state_dir), settings)


@cli.command()
@global_options
@click.option(
    "--config",
    "config_path",
    type=FileName(),
    metavar="FILE",
    help="Kata configuration (for state_dir).",
)
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

    visits = reconcile_all(_node(config_path, state_dir)[1], dict(os.environ))
    if as_json:
        _emit(render.reconcile_json(visits))
    else:
        click.echo(render.reconcile_text(visits))
    return exit_code(visits)


@cli.command("serve")
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
    help="How often to retry deferred shrinks that are due, settle pending unplugs and "
    "forget sandboxes whose VM is gone.",
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

    settings, directory = _node(config_path, state_dir)
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


@cli.command()
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


@cli.command()
@global_options
@host_options
@click.option(
    "--cgroup",
    type=FileName(directory=True),
    metavar="DIR",
    help="A memory cgroup directory (v1 or v2) whose limit lowers host memory.",
)
@json_option("Print JSON (schema kata-mem/host/v1).")
def host(
    host_memory: Optional[str],
    host_cpus: Optional[int],
    host_arch: Optional[str],
    host_hugepages: Optional[str],
    cgroup: Optional[str],
    as_json: bool,
) -> None:
    """Show the host facts kata-mem sizes against."""
    facts = probe(
        _host(host_memory, host_cpus, host_arch, host_hugepages),
        cgroup or "",
        Origin("option", "--cgroup"),
    )
    if as_json:
        _emit(render.host_json(facts))
    else:
        click.echo(render.host_text(facts))


@cli.group("config")
@global_options
def config_group() -> None:
    """Inspect Kata configurations."""


@config_group.command("check")
@global_options
@click.argument("file", required=False, type=FileName())
@json_option("Print JSON (schema kata-mem/config/v1).")
def config_check(file: Optional[str], as_json: bool) -> None:
    """Validate FILE (default: where Kata looks) and show each effective value and its origin."""
    cfg, why = _config(file)
    if cfg.settings.node_overcommit is not None:
        # A value Kata and kata-mem take, that leaves this node no budget at all.
        from kata_mem.core.planner import reserved_problem

        problem = reserved_problem(cfg.settings.node_reserved, probe(HostOverrides()).memory)
        if problem is not None:
            log.warning("%s: %s", cfg.path, problem)
    from kata_mem.core.planner import guest_ceiling_problem

    beyond = guest_ceiling_problem(cfg, probe(HostOverrides()))
    if beyond is not None:
        log.warning("%s: %s", cfg.path, beyond)
    if as_json:
        _emit(render.config_json(cfg, why))
    else:
        click.echo(render.config_text(cfg, why))


@cli.command("runtimeclass")
@global_options
@click.option(
    "--config", "config_path", type=FileName(), metavar="FILE", help="Kata configuration."
)
@click.option(
    "--max-pod-memory",
    type=Text("a quantity"),
    metavar="QTY",
    help="The largest pod memory limits (sum of its containers') to cover; default: what "
    "default_maxmemory lets a VM grow to.",
)
@click.option(
    "--sizing",
    type=click.Choice(SIZING_MODELS),
    help="The sizing model (default: the configuration's [kata_mem] sizing).",
)
@click.option(
    "--name",
    type=DnsName(subdomain=True),
    metavar="NAME",
    help="The RuntimeClass's name (default: kata-deploy's for the configuration's "
    "hypervisor: kata-qemu, kata-clh, kata-fc, ...).",
)
@click.option(
    "--handler",
    type=DnsName(subdomain=False),
    metavar="HANDLER",
    help="The runtime handler the CRI runtime knows Kata by (default: the name).",
)
@click.option(
    "--size-classes",
    type=Text("a list of quantities"),
    metavar="QTY,QTY...",
    help="Several RuntimeClasses, NAME-QTY each, for pods with memory limits up to each QTY "
    "(instead of --max-pod-memory): a small pod then reserves only what its class needs.",
)
@click.option(
    "--cpu-policy",
    type=click.Choice(("kata", "all-vcpus", "none")),  # runtimeclass.CPU_POLICIES
    default="kata",
    show_default=True,
    help="podFixed.cpu: kata (250m, kata-deploy's), all-vcpus (every vCPU unthrottled "
    "beyond the CPU limits) or none.",
)
@json_option("Print JSON (schema kata-mem/runtimeclass/v1).")
def runtimeclass(
    config_path: Optional[str],
    max_pod_memory: Optional[str],
    sizing: Optional[SizingModel],
    name: Optional[str],
    handler: Optional[str],
    size_classes: Optional[str],
    cpu_policy: str,
    as_json: bool,
) -> None:
    """Print the RuntimeClass whose overhead.podFixed keeps the host-side guard from ever
    clamping a pod up to --max-pod-memory (its arithmetic in comments)."""
    from kata_mem.core.runtimeclass import runtime_class_overhead
    from kata_mem.interfaces.runtimeclass import (
        default_name,
        runtimeclass_json,
        runtimeclass_yaml,
    )

    bounds = None if size_classes is None else _size_classes(size_classes, max_pod_memory)
    cfg, _ = _config(config_path)
    name = name or default_name(cfg.hypervisor)
    if bounds is not None:
        _runtimeclasses(cfg, bounds, sizing, name, handler or name, cpu_policy, as_json)
        return
    most = None if max_pod_memory is None else quantity_bytes(max_pod_memory, "--max-pod-memory")
    found = runtime_class_overhead(cfg, machine_arch(), most, sizing)
    shown = (found, cfg.path, cfg.hypervisor, name, handler or name, cpu_policy)
    if as_json:
        _emit(runtimeclass_json(*shown))
    else:
        click.echo(runtimeclass_yaml(*shown), nl=False)


def _size_classes(text: str, max_pod_memory: Optional[str]) -> list[tuple[str, int]]:
    """``--size-classes``: each bound as typed and in bytes, in increasing order.

    :raises click.UsageError: given with --max-pod-memory, a bound given twice or out of
        order, or 0.
    """
    if max_pod_memory is not None:
        raise click.UsageError("--size-classes and --max-pod-memory: give one of the two")
    parts = [p.strip() for p in text.split(",")]
    bounds = [(p, quantity_bytes(p, f"--size-classes {p!r}")) for p in parts]
    for (a, x), (b, y) in zip(bounds, bounds[1:]):
        if y <= x:
            raise click.UsageError(
                f"--size-classes {text!r}: {b} is not larger than {a}; expected increasing sizes"
            )
    if bounds[0][1] == 0:
        raise click.UsageError(f"--size-classes {text!r}: expected sizes above 0")
    return bounds


def _runtimeclasses(
    cfg: SizingConfig,
    bounds: list[tuple[str, int]],
    sizing: Optional[SizingModel],
    name: str,
    handler: str,
    cpu_policy: str,
    as_json: bool,
) -> None:
    """One RuntimeClass per size class, with the split's arithmetic first."""
    from kata_mem.core.runtimeclass import runtime_class_overhead
    from kata_mem.interfaces.runtimeclass import (
        class_name,
        classes_header,
        runtimeclass_json,
        runtimeclass_yaml,
    )

    arch = machine_arch()
    classes = [
        (
            class_name(name, text),
            replace(
                runtime_class_overhead(cfg, arch, size, sizing),
                max_pod_memory_from=f"--size-classes {text}",
            ),
        )
        for text, size in bounds
    ]
    header = classes_header(classes, cfg.path, cfg.hypervisor)
    if as_json:
        _emit(
            {
                "schema": "kata-mem/runtimeclass-classes/v1",
                "config": cfg.path,
                "explanation": [line for line in header if line],
                "classes": [
                    runtimeclass_json(o, cfg.path, cfg.hypervisor, n, handler, cpu_policy)
                    for n, o in classes
                ],
            }
        )
        return
    click.echo("".join(f"# {line}".rstrip() + "\n" for line in header), nl=False)
    for n, o in classes:
        click.echo("---")
        click.echo(runtimeclass_yaml(o, cfg.path, cfg.hypervisor, n, handler, cpu_policy), nl=False)


def _report(exc: KataMemError, as_json: bool) -> int:
    # A path that is not UTF-8 (an argument, a config.d entry) is carried as lone
    # surrogates, which would print as '\udcff': show the bytes as typed, \xff.
    exc.message = exc.message.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    logs.emit_error(exc)
    if as_json:
        _emit(render.error_json(exc))
    return exc.exit_code


def run_cli(argv: Optional[list[str]] = None) -> int:
    """Run the CLI; return the process exit code (never raises for bad input).

    A stdout that does not take the result (``kata-mem preview ... | head -1``, a full
    disk) exits as the shim does (:func:`~kata_mem.interfaces.pipes.lost`).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(args)
    except ResultLost as exc:  # the result's, or an error document's
        return lost(exc)


def _run(args: list[str]) -> int:
    asked = _Asked()
    # Until click has parsed the options (and for its own usage errors), report in
    # the format the command line asks for.
    logs.set_format(logs.split_global_options(args)[1] or "text")
    try:
        rv = cli.main(args=args, prog_name="kata-mem", standalone_mode=False, obj=asked)
    except KataMemError as exc:
        return _report(exc, asked.json)
    except click.exceptions.Abort:
        logs.emit("error", "aborted", kind="aborted", exit_code=130)
        return 130
    except click.ClickException as exc:
        if logs.current_format() == "json":
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "kata-mem"
            logs.emit(
                "error",
                f"{where}: {exc.format_message()} (see {where} --help)",
                kind="usage",
                exit_code=exc.exit_code,
            )
        else:
            exc.show()
        return exc.exit_code
    except _BrokenPipe as exc:
        assert isinstance(exc.__cause__, BrokenPipeError)
        return _internal_error(exc.__cause__)
    except ResultLost:
        raise
    except Exception as exc:  # a bug: say so briefly, with the traceback only on request
        return _internal_error(exc)
    return rv if isinstance(rv, int) else 0


def _internal_error(exc: Exception) -> int:
    if os.environ.get("KATA_MEM_DEBUG"):
        raise exc
    logs.emit(
        "error",
        f"internal error: {logs.describe(exc)} (a bug in kata-mem; set "
        "KATA_MEM_DEBUG=1 for the traceback)",
        kind="internal",
        exit_code=1,
    )
    return 1
