"""``kata-mem serve`` with real guests (QEMU TCG): two sandboxes resized at once, a
deferred shrink that the service's own loop completes, SIGTERM and SIGKILL during a
step. Two guests serve the whole module (booted side by side): each test first
applies the size it starts from, and kata-mem reads the VM, so the order of the
tests does not matter."""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.configs import guest_config
from tests.support.guestvm import GuestSpec, GuestVM
from tests.support.qmp_min import QMPClient
from tests.support.service import Answer, Service, start
from tests.support.shim import apply_request
from tests.support.waits import wait_until

pytestmark = pytest.mark.guest
MiB = 1 << 20


@pytest.fixture(scope="module")
def guests(guest_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[GuestVM]]:
    where = tmp_path_factory.mktemp("guests")
    vms = [GuestVM(guest_dir, where / f"g{i}", GuestSpec(virtio_mem_mib=2048)) for i in range(2)]
    errors: list[BaseException] = []

    def boot(vm: GuestVM) -> None:
        try:
            vm.start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=boot, args=(vm,)) for vm in vms]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        if errors:
            raise errors[0]
        yield vms
    finally:
        for vm in vms:
            vm.stop()


def _env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG", "KATA_MEM_CRASH_AT")
    }


def _req(cfg: Path, sandbox: str, vm: GuestVM, limit_mib: int, **fields: Any) -> dict[str, Any]:
    return apply_request(cfg, sandbox, vm.qmp_socket, limit_mib, **fields)


def _outcome(got: Answer) -> dict[str, Any]:
    assert got.status == 200, got.body
    doc: dict[str, Any] = got.json()["outcome"]
    return doc


def _virtio_mem_mib(vm: GuestVM) -> int:
    with QMPClient(vm.qmp_socket) as q:
        dev = next(
            d["data"] for d in q.execute("query-memory-devices") if d["type"] == "virtio-mem"
        )
    assert dev["size"] == dev["requested-size"], dev
    return int(dev["size"]) // MiB


def _journal(svc: Service, sandbox: str) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads((svc.state / sandbox / "journal.json").read_text())
    except (FileNotFoundError, ValueError):  # not written yet (written by rename: never half)
        return {}
    return doc


def _post_in_thread(svc: Service, doc: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            out["answer"] = svc.post(doc, timeout=120)
        except (http.client.HTTPException, OSError) as exc:
            out["error"] = exc
        out["seconds"] = time.monotonic() - t0

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_two_sandboxes_resize_side_by_side(guests: list[GuestVM], tmp_path: Path) -> None:
    cfg = guest_config(tmp_path, virtio=True)
    svc = start(tmp_path, env=_env())
    try:
        for name, vm in zip("cd", guests, strict=True):
            # Back to the boot size, and the balloon's statistics off, as a new VM has them.
            # (By the sandbox that sizes it from now on: a VM is one sandbox's.)
            assert _outcome(svc.post(_req(cfg, name, vm, 0)))["observed_mib"] == 512
            with QMPClient(vm.qmp_socket) as q:
                q.execute(
                    "qom-set",
                    {
                        "path": "/machine/peripheral/balloon0",
                        "property": "guest-stats-polling-interval",
                        "value": 0,
                    },
                )
        # A plan-only create names the VM, and changes nothing on it: its
        # balloon's statistics stay off until an apply turns them on.
        for name, vm in zip("cd", guests, strict=True):
            got = svc.post(_req(cfg, name, vm, 1024, apply=False, event="create"))
            assert got.status == 200 and got.json()["outcome"] is None, got.body
            with QMPClient(vm.qmp_socket) as q:
                interval = q.execute(
                    "qom-get",
                    {
                        "path": "/machine/peripheral/balloon0",
                        "property": "guest-stats-polling-interval",
                    },
                )
            assert interval == 0
        grown = [
            _post_in_thread(svc, _req(cfg, n, vm, 1024)) for n, vm in zip("cd", guests, strict=True)
        ]
        for thread, _ in grown:
            thread.join(120)
        outs = [_outcome(out["answer"]) for _, out in grown]
        assert [(o["status"], o["observed_mib"]) for o in outs] == [("Resized", 1536)] * 2, outs
        assert [_virtio_mem_mib(vm) for vm in guests] == [1024, 1024]
        # A safe shrink waits for each guest to give its memory back, step by step: the
        # longest resize there is, so the one to run side by side.
        t0 = time.monotonic()
        runs = [
            _post_in_thread(svc, _req(cfg, n, vm, 0)) for n, vm in zip("cd", guests, strict=True)
        ]
        states: list[list[str]] = []

        def both_or_done() -> bool:
            states.append([_journal(svc, n).get("state", "") for n in "cd"])
            return states[-1] == ["running"] * 2 or not any(t.is_alive() for t, _ in runs)

        wait_until(both_or_done, "both shrinks in a step at once, or both done", 60, 0.01)
        both_running = states[-1] == ["running"] * 2
        for thread, _ in runs:
            thread.join(120)
        wall = time.monotonic() - t0
        outs = [_outcome(out["answer"]) for _, out in runs]
        assert [(o["status"], o["observed_mib"]) for o in outs] == [("Resized", 512)] * 2, outs
        assert [_virtio_mem_mib(vm) for vm in guests] == [0, 0]
        seconds = sorted(out["seconds"] for _, out in runs)
        print(
            f"\ntwo shrinks at once: {seconds[0]:.2f} s and {seconds[1]:.2f} s, wall {wall:.2f} s"
        )
        # Side by side: at one moment both were in the middle of a step (one after the
        # other, the second would have waited for the first to finish).
        assert both_running
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_the_loop_completes_a_deferred_shrink(guests: list[GuestVM], tmp_path: Path) -> None:
    vm = guests[0]
    cfg = guest_config(tmp_path, virtio=True)
    svc = start(tmp_path, "--reconcile-interval", "0.5", env=_env())
    try:
        assert _outcome(svc.post(_req(cfg, "sb", vm, 512)))["observed_mib"] == 1024
        assert svc.request("GET", "/v1/sandboxes/sb").json()["total_mib"] == 1024
        vm.alloc(700)
        out = _outcome(svc.post(_req(cfg, "sb", vm, 0)))
        assert (out["status"], out["reason"]) == ("Deferred", "UsageAboveTarget"), out
        vm.free()
        # Skip the 30 s backoff: the journal says the retry is due now.
        journal = _journal(svc, "sb")
        journal["deferred"]["retry_at"] = time.time() - 1
        tmp = svc.state / "sb" / "journal.edit"
        tmp.write_text(json.dumps(journal))
        tmp.rename(svc.state / "sb" / "journal.json")

        def shrunk() -> bool:
            return bool(svc.request("GET", "/v1/sandboxes/sb").json()["total_mib"] == 512)

        wait_until(shrunk, lambda: f"the loop shrinks sb to 512 MiB: {svc.stderr()}", 60, 0.5)
        assert _journal(svc, "sb")["deferred"] is None
        assert _virtio_mem_mib(vm) == 0
        # The visit logs once it has returned, which may be after the VM showed 512 MiB.
        wait_until(
            lambda: "reconcile: sandbox sb: retried: Resized" in svc.stderr(),
            lambda: f"the loop logs the retry: {svc.stderr()}",
            10,
        )
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_sigterm_during_a_step_finishes_it(guests: list[GuestVM], tmp_path: Path) -> None:
    vm = guests[1]
    cfg = guest_config(tmp_path, virtio=True)
    svc = start(tmp_path, env=_env())
    assert _outcome(svc.post(_req(cfg, "sb", vm, 1024)))["observed_mib"] == 1536
    thread, out = _post_in_thread(svc, _req(cfg, "sb", vm, 0))
    wait_until(lambda: _journal(svc, "sb").get("state") == "running", "a step runs", 30, 0.01)
    code = svc.stop(timeout=120)
    thread.join(10)
    assert code == 0, svc.stderr()
    done = _outcome(out["answer"])  # answered in full before the service went
    journal = _journal(svc, "sb")
    assert (journal["state"], journal["step"]) == ("idle", None), journal
    assert journal["observed_mib"] == done["observed_mib"]
    assert _virtio_mem_mib(vm) == done["observed_mib"] - 512
    print(f"\nSIGTERM mid-shrink: {done['status']} {done['reason']} at {done['observed_mib']} MiB")


def test_sigkill_during_a_step_is_recovered_on_restart(
    guests: list[GuestVM], tmp_path: Path
) -> None:
    vm = guests[1]
    cfg = guest_config(tmp_path, virtio=True)
    svc = start(tmp_path, env=_env())
    try:
        assert _outcome(svc.post(_req(cfg, "sb", vm, 0)))["observed_mib"] == 512
    finally:
        assert svc.stop() == 0, svc.stderr()
    # The process dies right after QEMU was told to grow, as with kill -9.
    crashing = start(tmp_path, env={**_env(), "KATA_MEM_CRASH_AT": "after-command"})
    thread, out = _post_in_thread(crashing, _req(cfg, "sb", vm, 512))
    thread.join(60)
    assert crashing.proc.wait(10) == 99
    assert "error" in out  # the connection went with the process
    journal = _journal(crashing, "sb")
    assert (journal["state"], journal["step"]["action"]) == ("running", "resize_virtio_mem")
    # Restarted (the stale socket is replaced), its loop repairs the sandbox with no
    # request, as `kata-mem reconcile` after a crashed CLI call: the step is settled
    # from the VM and the last request that completed (512 MiB) is re-run; the crashed
    # one was never answered, so its shim asks again.
    svc = start(tmp_path, "--reconcile-interval", "0.5", env=_env())
    try:
        # The repair leaves the journal idle before the loop re-runs the request: wait
        # for the re-run itself, then read what it recorded.
        wait_until(
            lambda: "retried: Resized" in svc.stderr(),
            lambda: f"the loop re-runs the request: {svc.stderr()}",
            60,
            0.2,
        )
        wait_until(
            lambda: _journal(svc, "sb").get("state") == "idle",
            lambda: f"the journal of sb is idle: {svc.stderr()}",
            60,
            0.2,
        )
        journal = _journal(svc, "sb")
        assert journal["observed_mib"] == 512 + _virtio_mem_mib(vm), journal
        log = svc.stderr()
        assert "reconcile: sandbox sb: retried: Resized" in log, log
        assert "reconciled: the previous call stopped" in log, log
        again = _outcome(svc.post(_req(cfg, "sb", vm, 512)))
        assert (again["status"], again["observed_mib"]) == ("Resized", 1024), again
        assert _virtio_mem_mib(vm) == 512
    finally:
        assert svc.stop() == 0, svc.stderr()
