"""The library entry points that touch a VM: ``apply_request`` and ``read_status``.

They pick the backend (QMP, libvirt, or the in-memory fake for a dry run), open
the sandbox's state, and hand over to the executor.
"""

from __future__ import annotations

import tempfile
from typing import Any, Optional

from kata_mem.backends import Backend, Endpoint, open_backend
from kata_mem.backends.fake import FakeBackend, FakeGuest, VirtualTime
from kata_mem.executor import Options, Result, run_locked
from kata_mem.journal import SandboxState, state_dir_state
from kata_mem.model import GuestUsage, HostFacts, SandboxRequest, SizingConfig, VmState
from kata_mem.planner import assumed_vm
from kata_mem.shim import request_doc
from kata_mem.usage import fresh_usage


def _connect(cfg: SizingConfig, endpoint: Endpoint) -> Backend:
    return open_backend(
        endpoint,
        hugepages_path=cfg.settings.hugepages_path if cfg.enable_hugepages else None,
        stats_interval=cfg.settings.stats_interval_s,
    )


def _dry_run_backend(
    cfg: SizingConfig, host: HostFacts, endpoint: Optional[Endpoint]
) -> FakeBackend:
    """An in-memory copy of the VM (observed, read-only, when an endpoint is given)."""
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


def apply_request(
    cfg: SizingConfig,
    host: HostFacts,
    request: SandboxRequest,
    *,
    endpoint: Optional[Endpoint],
    sandbox: str,
    state_dir: Optional[str] = None,
    dry_run: bool = False,
    allow_shrink: bool = False,
    force: bool = False,
) -> Result:
    """Resize the sandbox's VM to what its containers need.

    With ``dry_run`` the plan runs against an in-memory copy of the VM (read
    from ``endpoint`` when given) and a throw-away journal: nothing changes.

    :raises BackendUnavailable: the VM's hypervisor cannot be reached.
    :raises ConfigError: the state directory is not kata-mem's or cannot be written.
    :raises BackendError: a query failed outside a step (steps report failures in the outcome).
    """
    options = Options(allow_shrink=allow_shrink, force=force)
    directory = state_dir or cfg.settings.state_dir
    if dry_run:
        state_dir_state(directory)  # what apply would say about it; read only
        virtual = VirtualTime()
        fake = _dry_run_backend(cfg, host, endpoint)
        fake.clock, fake.sleep = virtual.clock, virtual.sleep
        with tempfile.TemporaryDirectory(prefix="kata-mem-dry-run-") as tmp:
            state = SandboxState(tmp, sandbox)
            return run_locked(
                state, lambda: fake, cfg, host, request, options, virtual.clock, virtual.sleep
            )
    if endpoint is None:
        raise ValueError("apply_request needs an endpoint unless dry_run")
    real_endpoint = endpoint
    saved = None if force else request_doc(sandbox, cfg, request, endpoint, allow_shrink, host)
    return run_locked(
        SandboxState(directory, sandbox),
        lambda: _connect(cfg, real_endpoint),
        cfg,
        host,
        request,
        options,
        saved_request=saved,
    )


def read_status(
    endpoint: Endpoint, sandbox: str, state_dir: str
) -> tuple[VmState, Optional[GuestUsage], Optional[dict[str, Any]]]:
    """What the hypervisor reports, the guest's usage, and the sandbox's journal (if any).

    :raises BackendUnavailable: the VM's hypervisor cannot be reached.
    :raises ConfigError: the state directory is not kata-mem's (nothing is created).
    """
    state_dir_state(state_dir)  # refuse a state dir that is not kata-mem's before connecting
    backend = open_backend(endpoint)
    try:
        vm, usage = backend.observe(), fresh_usage(backend, 1)
    finally:
        backend.close()
    state = SandboxState(state_dir, sandbox)
    record = state.load().to_json() if state.owned() and state.path.is_file() else None
    return vm, usage, record
