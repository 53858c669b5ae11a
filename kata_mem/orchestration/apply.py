"""Serving a request: the one way from a :class:`~kata_mem.core.request.SandboxRequest`
to a :class:`Response`, which the CLI, the shim and ``kata-mem reconcile`` share.

Each part is written once: the host a sandbox sees (:func:`sandbox_host`), the
plan a preview shows (:func:`preview`), forgetting a sandbox (:func:`forget`),
and resizing its VM (:func:`apply_request`, which picks the backend: QMP,
libvirt, or the in-memory fake for a dry run, opens the sandbox's state and
hands over to the executor). The executor, the journal and the backends are
imported only on the paths that use them, so a plan-only request loads none.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from kata_mem.core.errors import ConfigError, outcome_exit_code
from kata_mem.core.model import (
    GuestUsage,
    HostFacts,
    Outcome,
    Plan,
    Settings,
    SizingConfig,
    VmState,
    Workload,
)
from kata_mem.core.planner import assumed_vm, plan
from kata_mem.core.request import Endpoint, HostOverrides, SandboxRequest
from kata_mem.edges.config import DEFAULT_PATHS, find_config, load_config
from kata_mem.edges.host import probe_host

if TYPE_CHECKING:
    from kata_mem.backends import Backend
    from kata_mem.backends.fake import FakeBackend
    from kata_mem.orchestration.executor import Result


@dataclass(frozen=True)
class Response:
    """What serving one request came to: the shim's response, typed.

    ``plan`` is None for a delete, ``outcome`` unless the request applied.
    ``warnings`` are the call's own; the plan carries its own as well.
    ``config`` is the configuration the request was served with.
    """

    sandbox: str
    config: SizingConfig
    plan: Optional[Plan] = None
    outcome: Optional[Outcome] = None
    warnings: tuple[str, ...] = ()

    @property
    def exit_code(self) -> int:
        """0, or the code of the hypervisor's or the guest's failure (README, "Exit codes")."""
        return outcome_exit_code(self.outcome.reason if self.outcome is not None else "")


def serve(
    request: SandboxRequest,
    env: Mapping[str, str],
    *,
    state_dir: Optional[str] = None,
    dry_run: bool = False,
    force: bool = False,
    cgroup_origin: str = "request host.cgroup",
) -> Response:
    """Serve one request: load its configuration, probe the host, then forget the
    sandbox (event ``delete``), plan it (no ``apply``), or resize its VM.

    ``env`` is the process environment (for ``KATA_CONF_FILE``). The keywords are
    the command line's own (``apply --state-dir``, ``--dry-run``, ``--force``, and
    the name of the option that gave ``host.cgroup``): no request carries them.

    :raises KataMemError: for every documented failure. A resize that fails midway
        is not an error: its outcome says what happened.
    """
    cfg = _config(request.config, env)
    host = sandbox_host(cfg, request.host)
    if request.event == "delete":
        warnings = forget(request.sandbox, state_dir or cfg.settings.state_dir)
        return Response(request.sandbox, cfg, warnings=warnings)
    if not request.apply and not dry_run:
        p = preview(
            cfg,
            host,
            request.workload,
            allow_shrink=request.allow_shrink,
            cgroup=request.host.cgroup,
            cgroup_origin=cgroup_origin,
        )
        return Response(request.sandbox, cfg, p)
    result = apply_request(
        cfg,
        host,
        request.workload,
        endpoint=request.endpoint,
        sandbox=request.sandbox,
        state_dir=state_dir,
        dry_run=dry_run,
        allow_shrink=request.allow_shrink,
        force=force,
        cgroup=request.host.cgroup,
        cgroup_origin=cgroup_origin,
    )
    return Response(request.sandbox, cfg, result.plan, result.outcome, result.warnings)


def _config(path: Optional[str], env: Mapping[str, str]) -> SizingConfig:
    try:
        found = find_config(path, env)[0]
    except ConfigError as exc:
        if path is not None or env.get("KATA_CONF_FILE"):
            raise
        # find_config's own message names the CLI's --config; a request sets a field.
        raise ConfigError(
            "request config is null and there is no Kata configuration where Kata looks ("
            + " or ".join(DEFAULT_PATHS)
            + "): set request config to the configuration file (or KATA_CONF_FILE)"
        ) from exc
    return load_config(found)


def probe(
    overrides: HostOverrides,
    cgroup: str = "",
    cgroup_origin: str = "[kata_mem] host_memory_cgroup",
) -> HostFacts:
    """The host's facts, each from ``overrides`` when given, else from the machine;
    lowered by the memory cgroup directory ``cgroup`` when given (``cgroup_origin`` names
    where it was set, for its errors).

    :raises ConfigError: ``cgroup`` is not a usable memory cgroup directory (``InputError``
        when ``cgroup_origin`` is a command-line flag).
    """
    return probe_host(
        memory=overrides.memory,
        cpus=overrides.cpus,
        arch=overrides.arch,
        hugepages=overrides.hugepages,
        cgroup_dir=cgroup,
        cgroup_origin=cgroup_origin,
    )


def sandbox_host(cfg: SizingConfig, overrides: HostOverrides) -> HostFacts:
    """The host as a sandbox of ``cfg`` sees it: :func:`probe` with ``[kata_mem]
    host_memory_cgroup``, whose errors name the file that set it.

    A given host memory (``--host-memory``, ``host.memory_bytes``) replaces the memory
    probe, that cgroup's cap included: a plan made for another host reproduces
    anywhere, whatever cgroups this one has. The other overrides leave the cap alone.
    """
    if overrides.memory is not None:
        return probe(overrides)
    source = dict(cfg.sources).get("kata_mem.host_memory_cgroup", "")
    origin = source.partition(" = ")[0] if ": [kata_mem]" in source else ""
    return probe(
        overrides,
        cfg.settings.host_memory_cgroup,
        origin or f"{cfg.path}: [kata_mem] host_memory_cgroup",
    )


def preview(
    cfg: SizingConfig,
    host: HostFacts,
    workload: Workload,
    current: Optional[int] = None,
    allow_shrink: bool = False,
    cgroup: Optional[str] = None,
    cgroup_origin: str = "--host-cgroup",
) -> Plan:
    """The plan for a VM booted as Kata boots it with ``current`` bytes of guest
    memory (default: the boot memory): what ``apply`` with the same flags runs,
    guarded by the host cgroup ``cgroup`` when given (a preview has no VMM to find
    one from, nor a node's total to admit against). Changes nothing.

    :raises InputError: ``cgroup`` is not a readable memory cgroup directory.
    """
    vm = assumed_vm(cfg, host, current)
    guards = None
    if cgroup:
        from kata_mem.orchestration.guards import HostSide

        guards = HostSide(cfg, host, cgroup, cgroup_origin).read(vm)
    p = plan(cfg, host, workload, vm, guards)
    if vm.plugged:  # only then can a shrink be refused (and only then is the executor loaded)
        from kata_mem.core.outcomes import refuse_shrink

        p, _ = refuse_shrink(p, vm, allow_shrink or cfg.settings.allow_shrink)
    return p


def forget(sandbox: str, state_dir: str) -> tuple[str, ...]:
    """Remove the sandbox's state (the shim's ``delete``); the warnings say what was
    kept, and why.

    :raises ConfigError: the state directory is not kata-mem's, or it or the sandbox's
        directory could have been written by another user (nothing is changed).
    """
    from kata_mem.edges.journal import LOCK_WAIT_S, SandboxState, state_dir_state

    state = SandboxState(state_dir, sandbox)
    # state_dir_state refuses (exit 3) a state dir that is not kata-mem's, and creates nothing.
    found = state.remove(LOCK_WAIT_S) if state_dir_state(state_dir) == "ours" else "absent"
    warnings = {
        "removed": [],
        "absent": [f"no state for sandbox {sandbox}"],
        "not-ours": [
            f"{state_dir}/{sandbox} was not created by kata-mem (no marker); it was left alone"
        ],
        "busy": [
            f"sandbox {sandbox}: another call held its lock for {LOCK_WAIT_S:g} s; its state was "
            "kept, and `kata-mem reconcile` removes it once the VM is gone"
        ],
    }[found] + state.warnings
    return tuple(warnings)


def _connect(cfg: SizingConfig, endpoint: Endpoint) -> Backend:
    from kata_mem.orchestration.connect import open_backend

    return open_backend(
        endpoint,
        hugepages_path=cfg.settings.hugepages_path if cfg.enable_hugepages else None,
        stats_interval=cfg.settings.stats_interval_s,
    )


def _dry_run_backend(
    cfg: SizingConfig, host: HostFacts, endpoint: Optional[Endpoint]
) -> FakeBackend:
    """An in-memory copy of the VM (observed, read-only, when an endpoint is given)."""
    from kata_mem.backends.fake import FakeBackend, FakeGuest
    from kata_mem.orchestration.usage import fresh_usage

    if endpoint is None:
        return FakeBackend(assumed_vm(cfg, host))
    real = _connect(cfg, endpoint)
    try:
        vm, usage = real.observe(), fresh_usage(real, cfg.settings.stats_interval_s)
    finally:
        real.close()
    guest = FakeGuest(stats=False)
    if (
        usage is not None
        and usage.total is not None
        and usage.available is not None
        and usage.free is not None
    ):
        guest = FakeGuest(
            used=usage.total - usage.available,
            caches=usage.available - usage.free,
            reserved=max(vm.total - usage.total, 0),
        )
    return FakeBackend(vm, guest)


def reconcile_request(
    sandbox: str,
    cfg: SizingConfig,
    workload: Workload,
    endpoint: Endpoint,
    allow_shrink: bool,
    host: HostFacts,
    cgroup: Optional[str] = None,
) -> SandboxRequest:
    """The request that repeats an apply: what ``kata-mem reconcile`` re-runs. Host
    facts that were overridden are kept as they were (with the others probed then),
    and so is a host cgroup the caller named."""
    overridden = {k for k, v in host.sources if v == "override"}
    pinned = HostOverrides(cgroup=cgroup)
    if overridden:
        pool = (host.hugepages_total, host.hugepage_size)
        pinned = HostOverrides(
            host.memory, host.cpus, host.arch, pool if "hugepages" in overridden else None, cgroup
        )
    return SandboxRequest(
        sandbox,
        "reconcile",
        os.path.abspath(cfg.path),  # reconcile runs from another directory
        workload,
        endpoint,
        apply=True,
        allow_shrink=allow_shrink,
        host=pinned,
    )


def apply_request(
    cfg: SizingConfig,
    host: HostFacts,
    workload: Workload,
    *,
    endpoint: Optional[Endpoint],
    sandbox: str,
    state_dir: Optional[str] = None,
    dry_run: bool = False,
    allow_shrink: bool = False,
    force: bool = False,
    cgroup: Optional[str] = None,
    cgroup_origin: str = "--host-cgroup",
) -> Result:
    """Resize the sandbox's VM to what its workload needs, within its host cgroup
    (``cgroup`` when given, else the VMM's own) and the node's budget.

    With ``dry_run`` the plan runs against an in-memory copy of the VM (read
    from ``endpoint`` when given) and a throw-away journal: nothing changes.

    :raises BackendUnavailable: the VM's hypervisor cannot be reached.
    :raises ConfigError: the state directory is not kata-mem's or cannot be written.
    :raises BackendError: a query failed outside a step (steps report failures in the outcome).
    """
    from kata_mem.backends.fake import VirtualTime
    from kata_mem.edges.journal import SandboxState, state_dir_state
    from kata_mem.orchestration.executor import Options, run_locked
    from kata_mem.orchestration.guards import HostSide

    options = Options(allow_shrink=allow_shrink, force=force)
    host_side = HostSide(cfg, host, cgroup, cgroup_origin)
    directory = state_dir or cfg.settings.state_dir
    if dry_run:
        state_dir_state(directory)  # what apply would say about it; read only
        SandboxState(directory, sandbox).owned()  # and of a sandbox directory others could write
        virtual = VirtualTime()
        fake = _dry_run_backend(cfg, host, endpoint)
        fake.clock, fake.sleep = virtual.clock, virtual.sleep
        with tempfile.TemporaryDirectory(prefix="kata-mem-dry-run-") as tmp:
            state = SandboxState(tmp, sandbox)
            real = SandboxState(directory, sandbox)
            if endpoint is not None and real.owned() and real.path.is_file():
                # The copy of the VM needs the journal's record of what kata-mem created
                # there: without it no DIMM is provably kata-mem's to unplug.
                with state.locked(0):
                    state.save(real.load())
            return run_locked(
                state,
                lambda: fake,
                cfg,
                host,
                workload,
                options,
                virtual.clock,
                virtual.sleep,
                host_side=host_side,
            )
    if endpoint is None:
        raise ValueError("apply_request needs an endpoint unless dry_run")
    real_endpoint = endpoint
    saved = None
    if not force:
        saved = reconcile_request(
            sandbox, cfg, workload, endpoint, allow_shrink, host, cgroup
        ).to_json()
    return run_locked(
        SandboxState(directory, sandbox),
        lambda: _connect(cfg, real_endpoint),
        cfg,
        host,
        workload,
        options,
        saved_request=saved,
        host_side=host_side,
    )


def read_status(
    endpoint: Endpoint, sandbox: str, state_dir: str
) -> tuple[VmState, Optional[GuestUsage], Optional[dict[str, Any]]]:
    """What the hypervisor reports, with the devices the sandbox's journal proves are
    kata-mem's marked, the guest's usage, and the journal (if any).

    :raises BackendUnavailable: the VM's hypervisor cannot be reached.
    :raises ConfigError: the state directory is not kata-mem's, or it or the sandbox's
        directory could have been written by another user (nothing is created).
    """
    from kata_mem.core.reports import owned_view
    from kata_mem.edges.journal import SandboxState, state_dir_state
    from kata_mem.orchestration.connect import open_backend
    from kata_mem.orchestration.usage import fresh_usage

    # Refuse, before connecting, a state dir that is not kata-mem's, and one or a sandbox
    # directory that another user could have written.
    state_dir_state(state_dir)
    state = SandboxState(state_dir, sandbox)
    owned = state.owned()
    backend = open_backend(endpoint)
    try:
        vm, usage = backend.observe(), fresh_usage(backend, 1)
    finally:
        backend.close()
    record = state.load(read_only=True) if owned and state.path.is_file() else None
    vm = owned_view(vm, record.owned if record is not None else ())
    return vm, usage, None if record is None else record.to_json()


@dataclass(frozen=True)
class SandboxSummary:
    """One managed sandbox as its journal and saved request describe it (no VM is asked)."""

    sandbox: str
    backend: Optional[Endpoint]
    current: Optional[int]
    target: Optional[int]
    state: str
    reason: str = ""


@dataclass(frozen=True)
class NodeStatus:
    """Every sandbox kata-mem manages on this node, and the node's totals."""

    host: int
    reserved: int
    budget: Optional[int]
    committed: int
    sandboxes: tuple[SandboxSummary, ...]
    skipped: tuple[str, ...] = ()
    state_dir: str = ""
    #: False when the state directory does not exist (yet, or its path is mistyped).
    found: bool = True


def node_status(settings: Settings, host: HostFacts, state_dir: str) -> NodeStatus:
    """What ``status --all`` shows: read from the state directory, which is left as it is.

    :raises ConfigError: the state directory is not kata-mem's, or it or a sandbox
        directory in it could have been written by another user (named, with its
        owner and mode: a listing that leaves it out would hide it).
    """
    from kata_mem.core.errors import KataMemError
    from kata_mem.core.units import MiB
    from kata_mem.edges.journal import SandboxState, commitment, list_state_dir
    from kata_mem.orchestration.guards import node_budget

    listing = list_state_dir(state_dir)
    if listing.refused:
        raise ConfigError("; ".join(why for _name, why in listing.refused))
    rows: list[SandboxSummary] = []
    committed = 0
    for name in listing.sandboxes:
        state = SandboxState(state_dir, name)
        record = state.load(read_only=True)
        committed += commitment(record)
        endpoint = None
        try:
            saved = state.read_request()
            if saved is not None:
                endpoint = SandboxRequest.from_json(saved).endpoint
        except KataMemError:
            pass  # an unreadable saved request leaves the backend unknown; reconcile reports it
        target = record.target_mib
        if target is None and record.deferred is not None:
            target = record.deferred.target_mib
        if target is None:
            target = record.observed_mib
        last = record.last_outcome
        status = "running" if record.state == "running" else (last.status if last else "unknown")
        rows.append(
            SandboxSummary(
                name,
                endpoint,
                None if record.observed_mib is None else record.observed_mib * MiB,
                None if target is None else target * MiB,
                status,
                last.reason if last and record.state != "running" else "",
            )
        )
    return NodeStatus(
        host=host.memory,
        reserved=settings.node_reserved,
        budget=node_budget(settings, host),
        committed=committed,
        sandboxes=tuple(rows),
        skipped=tuple(listing.foreign),
        state_dir=state_dir,
        found=os.path.lexists(state_dir),
    )
