"""Handling a request: the one way from a :class:`~kata_mem.core.request.SandboxRequest`
to a :class:`~kata_mem.core.results.Response`, which every interface (the command line,
the shim, the node service) and ``kata-mem reconcile`` share.

:func:`handle` reads the request's configuration and the host it sees, then does what
the request's mode says: :func:`plan_request` (a plan, nothing runs: the shim's and the
service's plan-only answer and ``kata-mem preview``), :func:`apply_request` (a resize, or
a dry run on an in-memory copy of the VM: ``apply --dry-run``) or :func:`forget_request`.
Each part is written once here: the architecture a request's workload is read for
(:func:`workload_arch`), the host a sandbox sees (:func:`sandbox_host`), the state
directory a call uses (:func:`state_dir_of`), the plan a preview shows (:func:`preview`),
forgetting a sandbox (:func:`forget`), the request that ``reconcile`` re-runs
(:func:`saved_request`). The executor, the journal and the backends
are imported only on the paths that use them, so a plan-only request loads none.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Optional

from kata_mem.core.annotations import pod_config
from kata_mem.core.backing import dimm_backend
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import ConfigError, InputError
from kata_mem.core.model import (
    Arch,
    HostFacts,
    Note,
    Origin,
    Plan,
    Settings,
    SizingConfig,
    Workload,
)
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import assumed_vm, current_problem
from kata_mem.core.request import CallOptions, HostOverrides, SandboxRequest
from kata_mem.core.results import Applied, Forgotten, Planned, Response
from kata_mem.edges.config import DEFAULT_PATHS, config_path, load_config
from kata_mem.edges.host import machine_arch, probe_host

if TYPE_CHECKING:
    from kata_mem.backends.fake import FakeBackend
    from kata_mem.orchestration.connect import Opened

#: A process that adds nothing to its requests (the configuration's state directory).
NO_OPTIONS = CallOptions()
#: Where ``[kata_mem] host_memory_cgroup`` is set, when no file is known.
CONFIGURED_CGROUP = Origin("file", key="[kata_mem] host_memory_cgroup")
#: ``preview --host-cgroup``.
HOST_CGROUP_OPTION = Origin("option", "--host-cgroup")


#: ``preview --current`` (its ``value`` is the quantity as typed, for its error).
CURRENT_OPTION = Origin("option", "--current")


def handle(
    request: SandboxRequest, env: Mapping[str, str], options: CallOptions = NO_OPTIONS
) -> Response:
    """Handle one request as its mode says: plan it, resize its VM (or dry-run it), or
    forget it.

    ``env`` is the process environment (for ``KATA_CONF_FILE``); ``options`` what the
    process adds to every request (its state directory, ``--force``).

    :raises KataMemError: for every documented failure. A resize that fails midway
        is not an error: its outcome says what happened.
    """
    if request.mode == "delete":
        return forget_request(request, env, options)
    if request.mode == "plan":
        return plan_request(request, env)
    return apply_request(request, env, options)


def plan_request(
    request: SandboxRequest,
    env: Mapping[str, str],
    current: Optional[int] = None,
    current_origin: Origin = CURRENT_OPTION,
) -> Planned:
    """The plan for a freshly booted VM (or one with ``current`` bytes of guest memory,
    given where ``current_origin`` says), as ``preview`` shows it and a plan-only shim
    request is answered. Nothing runs.

    :raises InputError: ``current`` is not a size this VM can have (below its boot
        memory, above its maximum, not whole blocks above the boot memory).
    :raises KataMemError: the configuration, the host or the input is unusable.
    """
    cfg = request_config(request.config, env)
    host = sandbox_host(cfg, request.host)
    cfg = pod_config(cfg, host, request.workload)  # the pod's Kata annotations
    if current is not None:
        problem = current_problem(cfg, host, current, request.workload)
        if problem:
            raise InputError(f"{current_origin.name()} {current_origin.value!r}: {problem}")
    p = preview(
        cfg,
        host,
        request.workload,
        current,
        allow_shrink=request.allow_shrink,
        cgroup=request.host.cgroup,
        cgroup_origin=request.host.cgroup_origin,
        pod_limit=None if request.resize is None else request.resize.pod_limit,
    )
    return Planned(request.sandbox, cfg, p)


def forget_request(
    request: SandboxRequest, env: Mapping[str, str], options: CallOptions = NO_OPTIONS
) -> Forgotten:
    """Forget the sandbox's state (a delete).

    :raises ConfigError: the configuration cannot be read, or the state directory is not
        kata-mem's (nothing is changed).
    """
    cfg = request_config(request.config, env)
    notes = forget(request.sandbox, state_dir_of(options, cfg.settings))
    return Forgotten(request.sandbox, cfg, notes)


def apply_request(
    request: SandboxRequest, env: Mapping[str, str], options: CallOptions = NO_OPTIONS
) -> Applied:
    """Resize the sandbox's VM (mode ``apply``), or run the plan on an in-memory copy of
    it (mode ``dry-run``), and say what came of it.

    :raises BackendUnavailable: the VM's hypervisor cannot be reached.
    :raises ConfigError: the configuration, or the state directory, is unusable.
    :raises BackendError: a query failed outside a step (steps report failures in the outcome).
    :raises ValueError: the request's mode is not ``apply`` or ``dry-run`` (a bug).
    """
    if request.mode not in ("apply", "dry-run"):
        raise ValueError(f"apply_request: a request in mode {request.mode!r}")
    cfg = request_config(request.config, env)
    host = sandbox_host(cfg, request.host)
    return _resize(request, pod_config(cfg, host, request.workload), host, options, env)


def state_dir_of(options: CallOptions, settings: Settings) -> str:
    """The state directory of a call: the process's own (``--state-dir``; ``serve`` gives
    its own to every request), else the configuration's ``[kata_mem] state_dir``."""
    return options.state_dir or settings.state_dir


def workload_arch(overrides: HostOverrides) -> Arch:
    """The architecture a workload is read for (which hugepage sizes exist): the one
    given, else this machine's, as the host probe of the request will find it.

    :raises InputError: this machine's architecture is not one Kata supports.
    """
    return overrides.arch or machine_arch()


def request_config(path: Optional[str], env: Mapping[str, str]) -> SizingConfig:
    """The configuration a request names (``None``: where Kata looks).

    :raises ConfigError: there is none, or it is unusable.
    """
    try:
        found = config_path(path, env)[0]
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
    cgroup_origin: Origin = CONFIGURED_CGROUP,
) -> HostFacts:
    """The host's facts, each from ``overrides`` when given, else from the machine;
    lowered by the memory cgroup directory ``cgroup`` when given (``cgroup_origin`` says
    where it was set, for its errors).

    :raises ConfigError: ``cgroup`` is not a usable memory cgroup directory (``InputError``
        when it was given in this call, by an option or a request field).
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
    return probe(
        overrides, cfg.settings.host_memory_cgroup, cfg.origin("kata_mem.host_memory_cgroup")
    )


def preview(
    cfg: SizingConfig,
    host: HostFacts,
    workload: Workload,
    current: Optional[int] = None,
    allow_shrink: bool = False,
    cgroup: Optional[str] = None,
    cgroup_origin: Origin = HOST_CGROUP_OPTION,
    pod_limit: Optional[int] = None,
) -> Plan:
    """The plan for a VM booted as Kata boots it for ``workload`` (with
    ``static_sandbox_resource_mgmt``, at the workload's static size) with ``current`` bytes
    of guest memory (default: the boot memory): what ``apply`` with the same flags runs,
    guarded by the host cgroup ``cgroup`` when given (a preview has no VMM to find
    one from, nor a node's total to admit against) and by the new pod limit
    ``pod_limit`` (an ``update-sandbox`` request's). Changes nothing.

    :raises InputError: ``cgroup`` is not a readable memory cgroup directory.
    """
    vm = assumed_vm(cfg, host, current, workload)
    guards = None
    if cgroup or pod_limit is not None:
        from kata_mem.orchestration.guards import HostSide

        guards = HostSide(cfg, host, cgroup or None, cgroup_origin, pod_limit).read(vm)
    p = plan(cfg, host, workload, vm, guards)
    if vm.plugged:  # only a VM with plugged memory can have a shrink refused
        from kata_mem.core.outcomes import before_steps

        # The plan apply carries out: a shrink refused leaves its steps here too.
        p, _ = before_steps(p, vm, shrink_allowed=allow_shrink or cfg.settings.allow_shrink)
    return p


def forget(sandbox: str, state_dir: str) -> tuple[Note, ...]:
    """Remove the sandbox's state (the shim's ``delete``); the notes say what was
    kept, and why.

    :raises ConfigError: the state directory is not kata-mem's, or it or the sandbox's
        directory could have been written by another user (nothing is changed).
    """
    from kata_mem.edges.ledger import release
    from kata_mem.edges.statedir import LOCK_WAIT_S, SandboxDirectory, state_dir_state

    state = SandboxDirectory(state_dir, sandbox)
    # state_dir_state refuses (exit 3) a state dir that is not kata-mem's, and creates nothing.
    found = state.remove(LOCK_WAIT_S) if state_dir_state(state_dir) == "ours" else "absent"
    if found == "removed":
        release(state_dir, sandbox)  # its journal is gone: the node's total falls now
    said = {
        "removed": [],
        "absent": [f"no state for sandbox {sandbox}"],
        "not-ours": [
            f"{state_dir}/{sandbox} was not created by kata-mem (no marker); it was left alone"
        ],
        "busy": [
            f"sandbox {sandbox}: another call held its lock for {LOCK_WAIT_S:g} s; its state was "
            "kept, and `kata-mem reconcile` removes it once the VM is gone"
        ],
    }[found]
    return (*(Note("state", text) for text in said), *state.notes)


def _connect(cfg: SizingConfig, endpoint: Endpoint, env: Mapping[str, str]) -> Opened:
    from kata_mem.orchestration.connect import open_backend

    return open_backend(endpoint, env, dimm_backend=dimm_backend(cfg))


def _dry_run_backend(
    cfg: SizingConfig,
    host: HostFacts,
    endpoint: Optional[Endpoint],
    env: Mapping[str, str],
    workload: Workload,
) -> FakeBackend:
    """An in-memory copy of the VM: observed when an endpoint is given, with the guest's
    latest usage reading as it is; else the VM Kata boots for ``workload``. Reading it
    changes nothing on the VM."""
    from kata_mem.backends.fake import FakeBackend, FakeGuest

    if endpoint is None:
        return FakeBackend(assumed_vm(cfg, host, None, workload))
    real = _connect(cfg, endpoint, env).backend
    try:
        vm, usage = real.observe(), real.guest_usage()
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


def saved_request(request: SandboxRequest, cfg: SizingConfig, host: HostFacts) -> SandboxRequest:
    """The request that repeats an apply: what ``kata-mem reconcile`` re-runs. Host
    facts that were overridden are kept as they were (with the others probed then),
    and so is a host cgroup the caller named; the configuration's path is made absolute
    (reconcile runs from another directory)."""
    overridden = {k for k, origin in host.sources if origin.kind == "override"}
    cgroup = request.host.cgroup
    pinned = HostOverrides(cgroup=cgroup)
    if overridden:
        pool = (host.hugepages_total, host.hugepage_size)
        pinned = HostOverrides(
            host.memory, host.cpus, host.arch, pool if "hugepages" in overridden else None, cgroup
        )
    assert request.endpoint is not None  # an apply's
    return SandboxRequest(
        request.sandbox,
        "reconcile",
        os.path.abspath(cfg.path),
        request.workload,
        request.endpoint,
        mode="apply",
        allow_shrink=request.allow_shrink,
        host=pinned,
        resize=request.resize,
    )


def _resize(
    request: SandboxRequest,
    cfg: SizingConfig,
    host: HostFacts,
    options: CallOptions,
    env: Mapping[str, str],
) -> Applied:
    """Resize the sandbox's VM to what its workload needs, within its host cgroup (the
    request's ``host.cgroup`` when given, else the VMM's own) and the node's budget.

    A dry run runs the plan against an in-memory copy of the VM (read from the
    endpoint when given) and a throw-away journal: nothing changes.
    """
    from kata_mem.backends.fake import VirtualTime
    from kata_mem.edges.journal import SandboxState
    from kata_mem.edges.statedir import state_dir_state
    from kata_mem.orchestration.executor import Options, run_locked
    from kata_mem.orchestration.guards import HostSide

    sandbox, endpoint, workload = request.sandbox, request.endpoint, request.workload
    allowed = Options(
        allow_shrink=request.allow_shrink,
        force=options.force,
        crash_at=env.get("KATA_MEM_CRASH_AT"),
    )
    pod_limit = None if request.resize is None else request.resize.pod_limit
    host_side = HostSide(cfg, host, request.host.cgroup, request.host.cgroup_origin, pod_limit)
    directory = state_dir_of(options, cfg.settings)
    if request.mode == "dry-run":
        state_dir_state(directory)  # what apply would say about it; read only
        SandboxState(directory, sandbox).owned()  # and of a sandbox directory others could write
        virtual = VirtualTime()
        fake = _dry_run_backend(cfg, host, endpoint, env, request.workload)
        fake.clock, fake.sleep = virtual.clock, virtual.sleep
        import tempfile  # a dry run's only: 3 ms (shutil, random) off every shim call

        with tempfile.TemporaryDirectory(prefix="kata-mem-dry-run-") as tmp:
            state = SandboxState(tmp, sandbox)
            real = SandboxState(directory, sandbox)
            if endpoint is not None and real.owned() and real.path.is_file():
                # The copy of the VM needs the journal's record of what kata-mem created
                # there: without it no DIMM is provably kata-mem's to unplug.
                with state.locked(0):
                    state.save(real.load())
            result = run_locked(
                state,
                lambda: fake,
                cfg,
                host,
                workload,
                allowed,
                virtual.clock,
                virtual.sleep,
                host_side=host_side,
            )
    else:
        assert endpoint is not None  # a request in mode apply has one (SandboxRequest)
        real_endpoint = endpoint
        again = None if options.force else saved_request(request, cfg, host)
        result = run_locked(
            SandboxState(directory, sandbox),
            lambda: _connect(cfg, real_endpoint, env),
            cfg,
            host,
            workload,
            allowed,
            saved_request=again,
            host_side=host_side,
            vm_owner=options.vm_owner,
        )
    return Applied(sandbox, cfg, result.plan, result.outcome, result.notes)
