"""The planning commands: ``preview``, ``apply``, ``host`` (the host facts a plan sizes
against) and ``config check`` (the configuration it reads)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import click

from kata_mem.core.frozen import replace
from kata_mem.core.model import Origin
from kata_mem.core.quantity import quantity_bytes
from kata_mem.core.request import CallOptions, HostOverrides, SandboxRequest
from kata_mem.edges import config as config_mod
from kata_mem.interfaces import render, render_config
from kata_mem.interfaces.cli_options import (
    backend_options,
    described,
    emit,
    endpoint_of,
    global_options,
    host_options,
    host_overrides,
    json_option,
    read_config,
    request_options,
    sandbox_id,
)
from kata_mem.interfaces.cli_params import FileName, Text
from kata_mem.orchestration.handle import (
    CURRENT_OPTION,
    apply_request,
    plan_request,
    probe,
)

log = logging.getLogger("kata_mem")


@click.command()
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
    """Show the memory and vCPUs a sandbox would get, the steps from its boot memory (or
    --current), and why, planned as apply plans with the same flags. Reads no VM: apply
    --dry-run shows the steps on a live one. Changes nothing."""
    config, overrides, workload = described(
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
        emit(render.plan_json(planned.plan, planned.config))
    else:
        title = f"preview of {pod}" if pod else "preview"
        click.echo(render.plan_text(planned.plan, planned.config, title))


@click.command()
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
    endpoint = endpoint_of(qmp, libvirt_uri, domain)
    if endpoint is None and not dry_run:
        raise click.UsageError(
            "apply needs --qmp SOCKET or --libvirt URI --domain NAME (or --dry-run)"
        )
    config, overrides, workload = described(
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
        sandbox_id(sandbox, endpoint),
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
        emit(doc)
    else:
        click.echo(render.plan_text(applied.plan, cfg, "plan (from the observed VM)"))
        click.echo(render.outcome_text(outcome, applied.notes))
    return applied.exit_code


@click.command()
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
        host_overrides(host_memory, host_cpus, host_arch, host_hugepages),
        cgroup or "",
        Origin("option", "--cgroup"),
    )
    if as_json:
        emit(render_config.host_json(facts))
    else:
        click.echo(render_config.host_text(facts))


@click.group("config")
@global_options
def config_group() -> None:
    """Inspect Kata configurations."""


@config_group.command("check")
@global_options
@click.argument("file", required=False, type=FileName())
@json_option("Print JSON (schema kata-mem/config/v1).")
def config_check(file: Optional[str], as_json: bool) -> None:
    """Validate FILE (default: where Kata looks) and show each effective value and its origin."""
    cfg, why = read_config(file)
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
    from kata_mem.edges.config import unread_dropins

    unread = unread_dropins(cfg.path)
    if unread is not None:
        log.warning("%s", unread)
    if as_json:
        emit(render_config.config_json(cfg, why))
    else:
        click.echo(render_config.config_text(cfg, why))


COMMANDS = (preview, apply, host, config_group)
