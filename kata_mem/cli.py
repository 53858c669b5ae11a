"""The ``kata-mem`` command line (click).

stdout carries only the result (text, or JSON with ``--json``); diagnostics go
to stderr. Every :class:`~kata_mem.errors.KataMemError` becomes one line on
stderr and its exit code; click's usage errors exit 2.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import click

from kata_mem import config as config_mod
from kata_mem import render
from kata_mem.backends import Endpoint
from kata_mem.errors import InputError, KataMemError, outcome_exit_code
from kata_mem.host import probe_host
from kata_mem.model import HostFacts, Settings, SizingConfig
from kata_mem.planner import assumed_vm, plan
from kata_mem.quantity import quantity_bytes
from kata_mem.sources import build_request
from kata_mem.units import fmt_bytes

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("kata_mem")


def _emit(data: dict[str, Any]) -> None:
    click.echo(json.dumps(data, indent=2))


def host_options(fn: F) -> F:
    fn = click.option(
        "--host-arch", metavar="ARCH", help="Override the architecture (amd64, arm64, ...)."
    )(fn)
    fn = click.option(
        "--host-cpus", type=click.IntRange(min=1), metavar="N", help="Override the host CPU count."
    )(fn)
    fn = click.option("--host-memory", metavar="QTY", help="Override host MemTotal, e.g. 32Gi.")(fn)
    return fn


def _host(
    host_memory: Optional[str], host_cpus: Optional[int], host_arch: Optional[str], cgroup: str
) -> HostFacts:
    memory = quantity_bytes(host_memory, "--host-memory") if host_memory is not None else None
    if memory is not None and memory < 1 << 20:
        raise InputError(f"--host-memory {host_memory!r}: expected at least 1Mi")
    return probe_host(memory=memory, cpus=host_cpus, arch=host_arch, cgroup_dir=cgroup)


def _config(path: Optional[str]) -> tuple[SizingConfig, str]:
    found, why = config_mod.find_config(path, config_mod.env())
    cfg = config_mod.load_config(found)
    log.info("configuration %s (%s)", found, why)
    return cfg, why


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More log output on stderr.")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log format on stderr (json for shims).",
)
@click.version_option(package_name="kata-mem")
def cli(verbose: int, log_format: str) -> None:
    """Size and resize the guest memory of Kata-style VM sandboxes."""
    from kata_mem.logs import setup_logging

    setup_logging(verbose, log_format)


def request_options(fn: F) -> F:
    """The options that describe a sandbox (shared by preview and apply)."""
    options = [
        click.option(
            "--config",
            "config_path",
            metavar="FILE",
            help="Kata configuration TOML (default: where Kata looks).",
        ),
        click.option(
            "--pod",
            type=click.Path(path_type=Path),
            metavar="FILE",
            help="Kubernetes Pod manifest (YAML or JSON).",
        ),
        click.option(
            "--oci",
            type=click.Path(path_type=Path),
            multiple=True,
            metavar="FILE",
            help="OCI config.json (repeatable).",
        ),
        click.option(
            "--limit",
            multiple=True,
            metavar="QTY",
            help="A container memory limit, e.g. 512Mi (repeatable).",
        ),
        click.option(
            "--cpu",
            multiple=True,
            metavar="QTY",
            help="A container CPU limit, e.g. 500m (repeatable).",
        ),
    ]
    for opt in reversed(options):
        fn = opt(fn)
    return host_options(fn)


@cli.command()
@request_options
@click.option(
    "--current", metavar="QTY", help="Guest memory now (boot + plugged); default: boot memory."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the plan as JSON (schema kata-mem/plan/v1)."
)
def preview(
    config_path: Optional[str],
    pod: Optional[Path],
    oci: tuple[Path, ...],
    limit: tuple[str, ...],
    cpu: tuple[str, ...],
    host_memory: Optional[str],
    host_cpus: Optional[int],
    host_arch: Optional[str],
    current: Optional[str],
    as_json: bool,
) -> None:
    """Show the memory and vCPUs a sandbox would get, the steps, and why. Changes nothing."""
    cfg, _ = _config(config_path)
    host = _host(host_memory, host_cpus, host_arch, cfg.settings.host_memory_cgroup)
    request = build_request(pod, oci, limit, cpu)
    current_bytes = None
    if current is not None:
        current_bytes = quantity_bytes(current, "--current")
        if current_bytes < cfg.default_memory:
            raise InputError(
                f"--current {current!r}: below the boot memory {fmt_bytes(cfg.default_memory)} "
                "(default_memory); expected the guest's total memory"
            )
    result = plan(cfg, host, request, assumed_vm(cfg, host, current_bytes))
    if as_json:
        _emit(render.plan_json(result, cfg))
    else:
        title = f"preview of {pod}" if pod else "preview"
        click.echo(render.plan_text(result, cfg, title))


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
    if sandbox:
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
        click.option("--qmp", metavar="SOCKET", help="The VM's QMP unix socket."),
        click.option(
            "--libvirt",
            "libvirt_uri",
            metavar="URI",
            help="A libvirt URI, e.g. qemu:///system (with --domain).",
        ),
        click.option("--domain", metavar="NAME", help="The libvirt domain (with --libvirt)."),
        click.option(
            "--sandbox",
            metavar="ID",
            help="Sandbox id (default: derived from the socket or domain).",
        ),
        click.option(
            "--state-dir",
            metavar="DIR",
            help="Per-sandbox lock and journal (default: [kata_mem] state_dir).",
        ),
    ]
    for opt in reversed(options):
        fn = opt(fn)
    return fn


@cli.command()
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
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the outcome as JSON (schema kata-mem/outcome/v1).",
)
def apply(
    config_path: Optional[str],
    pod: Optional[Path],
    oci: tuple[Path, ...],
    limit: tuple[str, ...],
    cpu: tuple[str, ...],
    host_memory: Optional[str],
    host_cpus: Optional[int],
    host_arch: Optional[str],
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
    from kata_mem.apply import apply_request

    endpoint = _endpoint(qmp, libvirt_uri, domain)
    if endpoint is None and not dry_run:
        raise click.UsageError(
            "apply needs --qmp SOCKET or --libvirt URI --domain NAME (or --dry-run)"
        )
    cfg, _ = _config(config_path)
    host = _host(host_memory, host_cpus, host_arch, cfg.settings.host_memory_cgroup)
    request = build_request(pod, oci, limit, cpu)
    if force:
        click.echo(
            "kata-mem: WARNING: --force skips every shrink safety check; for tests and benchmarks only",
            err=True,
        )
    sid = _sandbox_id(sandbox, endpoint)
    result = apply_request(
        cfg,
        host,
        request,
        endpoint=endpoint,
        sandbox=sid,
        state_dir=state_dir,
        dry_run=dry_run,
        allow_shrink=allow_shrink,
        force=force,
    )
    if as_json:
        doc = render.outcome_json(result.outcome, sid, result.warnings)
        doc["plan"] = render.plan_json(result.plan, cfg)
        _emit(doc)
    else:
        click.echo(render.plan_text(result.plan, cfg, "plan (from the observed VM)"))
        click.echo(render.outcome_text(result.outcome, result.warnings))
    return outcome_exit_code(result.outcome.reason)


@cli.command()
@backend_options
@click.option("--config", "config_path", metavar="FILE", help="Kata configuration (for state_dir).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema kata-mem/status/v1).")
def status(
    qmp: Optional[str],
    libvirt_uri: Optional[str],
    domain: Optional[str],
    sandbox: Optional[str],
    state_dir: Optional[str],
    config_path: Optional[str],
    as_json: bool,
) -> None:
    """Show what the hypervisor reports: boot memory, devices, plugged total, guest usage."""
    from kata_mem.apply import read_status

    endpoint = _endpoint(qmp, libvirt_uri, domain)
    if endpoint is None:
        raise click.UsageError("status needs --qmp SOCKET or --libvirt URI --domain NAME")
    directory = state_dir
    if directory is None:
        directory = (
            _config(config_path)[0].settings.state_dir if config_path else Settings().state_dir
        )
    vm, usage, record = read_status(endpoint, _sandbox_id(sandbox, endpoint), directory)
    if as_json:
        _emit(render.status_json(vm, usage, record))
    else:
        click.echo(render.status_text(vm, usage, record))


@cli.command()
@click.option("--config", "config_path", metavar="FILE", help="Kata configuration (for state_dir).")
@click.option("--state-dir", metavar="DIR", help="State directory (default: [kata_mem] state_dir).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema kata-mem/reconcile/v1).")
def reconcile(config_path: Optional[str], state_dir: Optional[str], as_json: bool) -> int:
    """One pass over every sandbox: retry deferred shrinks that are due, settle pending
    DIMMs, forget sandboxes whose VM is gone. Run it from a timer (see the README).
    Exits with the code of the first sandbox that failed (the pass goes on)."""
    from kata_mem.reconcile import exit_code, reconcile_all, visits_json, visits_text

    directory = state_dir
    if directory is None:
        directory = (
            _config(config_path)[0].settings.state_dir if config_path else Settings().state_dir
        )
    visits = reconcile_all(directory, dict(os.environ))
    if as_json:
        _emit(visits_json(visits))
    else:
        click.echo(visits_text(visits))
    return exit_code(visits)


@cli.command()
def shim() -> None:
    """Read one JSON request on stdin, write one JSON response on stdout (see the README).

    Dispatched before click is imported; this entry only documents it in --help."""
    raise click.UsageError("kata-mem shim takes no options; pipe a request into it")


@cli.command()
@host_options
@click.option(
    "--cgroup",
    default="",
    metavar="DIR",
    help="A cgroup v2 directory whose memory.max lowers host memory.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema kata-mem/host/v1).")
def host(
    host_memory: Optional[str],
    host_cpus: Optional[int],
    host_arch: Optional[str],
    cgroup: str,
    as_json: bool,
) -> None:
    """Show the host facts kata-mem sizes against."""
    facts = _host(host_memory, host_cpus, host_arch, cgroup)
    if as_json:
        _emit(render.host_json(facts))
    else:
        click.echo(render.host_text(facts))


@cli.group("config")
def config_group() -> None:
    """Inspect Kata configurations."""


@config_group.command("check")
@click.argument("file", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema kata-mem/config/v1).")
def config_check(file: Optional[str], as_json: bool) -> None:
    """Validate FILE (default: where Kata looks) and show each effective value and its origin."""
    cfg, why = _config(file)
    if as_json:
        _emit(render.config_json(cfg, why))
    else:
        click.echo(render.config_text(cfg, why))


def _report(exc: KataMemError, as_json: bool) -> int:
    click.echo(f"kata-mem: error: {exc.message}", err=True)
    if as_json:
        _emit(render.error_json(exc))
    return exc.exit_code


def main(argv: Optional[list[str]] = None) -> int:
    """Run the CLI; return the process exit code (never raises for bad input)."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    try:
        rv = cli.main(args=args, prog_name="kata-mem", standalone_mode=False)
    except KataMemError as exc:
        return _report(exc, as_json)
    except click.exceptions.Abort:
        click.echo("kata-mem: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except Exception as exc:  # a bug: say so briefly, with the traceback only on request
        if os.environ.get("KATA_MEM_DEBUG"):
            raise
        click.echo(
            f"kata-mem: internal error: {type(exc).__name__}: {exc} "
            "(set KATA_MEM_DEBUG=1 for the traceback)",
            err=True,
        )
        return 1
    return rv if isinstance(rv, int) else 0
