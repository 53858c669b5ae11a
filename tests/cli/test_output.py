"""What a user reads: every stderr line in the chosen log format, global options in
either position, no Python ``None`` in text, error texts that name what the user gave
and the shim's own fields, and ShrinkNotAllowed in apply and preview alike."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.model import OwnedDevice
from kata_mem.core.record import Record
from kata_mem.edges.config import DEFAULT_PATHS
from kata_mem.edges.journal import SandboxState
from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST_ARGS, write_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import KATA_CONFIGS, REPO

Run = Callable[..., CliResult]
MiB = 1 << 20
QEMU_CFG = str(KATA_CONFIGS / "configuration-qemu.toml")


def json_lines(stderr: str) -> list[dict[str, Any]]:
    """Every stderr line as a JSON object (fails on any line that is not one)."""
    lines = stderr.strip().splitlines()
    assert lines, "nothing on stderr"
    docs = []
    for text in lines:
        try:
            doc = json.loads(text)
        except ValueError:
            pytest.fail(f"not a JSON line on stderr: {text!r}\n{stderr}")
        assert isinstance(doc, dict) and {"level", "message"} <= doc.keys(), text
        docs.append(doc)
    return docs


def only_error(stderr: str) -> dict[str, Any]:
    errors = [d for d in json_lines(stderr) if d["level"] == "error"]
    assert len(errors) == 1, stderr
    return errors[0]


def shim_request(**fields: Any) -> str:
    doc: dict[str, Any] = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-1",
        "event": "update",
        "config": QEMU_CFG,
        "containers": [{"id": "c1", "memory_limit_bytes": 256 * MiB}],
        "host": {"memory_bytes": 16 << 30, "cpus": 4},
    }
    doc.update(fields)
    return json.dumps(doc)


# -- --log-format json covers every stderr line -------------------------------------------


@pytest.mark.parametrize("where", ["before", "after"])
def test_json_log_format_covers_the_error_line(where: str, tmp_path: Path) -> None:
    cmd = ["preview", "--config", str(tmp_path / "none.toml"), *HOST_ARGS]
    fmt = ["--log-format", "json"]
    r = kata_mem_process(*(fmt + cmd if where == "before" else cmd + fmt))
    assert r.returncode == 3, r.stderr
    err = only_error(r.stderr)
    assert (err["kind"], err["exit_code"]) == ("config", 3)
    assert str(tmp_path / "none.toml") in err["message"]
    assert "kata-mem: error" not in r.stderr


def test_json_log_format_covers_the_force_warning() -> None:
    r = kata_mem_process(
        "--log-format", "json", "apply", "--dry-run", "--force", "--config", QEMU_CFG, *HOST_ARGS
    )
    assert r.returncode == 0, r.stderr
    warnings = [d for d in json_lines(r.stderr) if d["level"] == "warning"]
    assert any("--force skips every shrink safety check" in d["message"] for d in warnings)


def test_json_log_format_covers_click_usage_errors() -> None:
    r = kata_mem_process("--log-format", "json", "preview", "--no-such-flag")
    assert r.returncode == 2
    err = only_error(r.stderr)
    assert (err["kind"], err["exit_code"]) == ("usage", 2)
    assert "--no-such-flag" in err["message"] and "kata-mem preview" in err["message"]


def _run_with_bug(argv: list[str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """kata-mem as a real process with the planner made to fail as a bug would."""
    probe = (
        "import sys\n"
        "import kata_mem.core.plan as planner\n"
        "def broken(*args, **kwargs):\n"
        "    raise TimeoutError()\n"
        "planner.plan = broken\n"
        "import kata_mem.interfaces.cli, kata_mem.interfaces.shim\n"
        "kata_mem.interfaces.cli.plan = broken\n"
        "from kata_mem.interfaces.main import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", probe],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_json_log_format_covers_internal_errors() -> None:
    r = _run_with_bug(["--log-format", "json", "preview", "--config", QEMU_CFG, *HOST_ARGS])
    assert r.returncode == 1
    err = only_error(r.stderr)
    assert (err["kind"], err["exit_code"]) == ("internal", 1)
    # An exception without text is named by its type, never "TimeoutError: ".
    assert "internal error: TimeoutError (" in err["message"]
    assert "Traceback" not in r.stderr


def test_shim_internal_error_is_one_json_response_and_one_line() -> None:
    r = _run_with_bug(["shim", "--log-format", "json"], stdin=shim_request())
    assert r.returncode == 1, r.stderr
    response = json.loads(r.stdout)
    assert (response["error"]["kind"], response["error"]["exit_code"]) == ("internal", 1)
    err = only_error(r.stderr)
    assert err["kind"] == "internal" and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--log-format", "json", "shim"],
        ["shim", "--log-format", "json"],
        ["shim", "--log-format=json", "-v"],
        ["-vv", "--log-format", "json", "shim"],
    ],
)
def test_shim_accepts_global_options_and_logs_its_error_as_json(argv: list[str]) -> None:
    r = kata_mem_process(*argv, input=shim_request(sandbox_id="a/b"))
    assert r.returncode == 4, r.stderr
    assert json.loads(r.stdout)["error"]["kind"] == "input"
    err = only_error(r.stderr)
    assert (err["kind"], err["exit_code"]) == ("input", 4)
    assert err["message"].startswith("request sandbox_id: ")


def test_shim_plan_with_global_options_succeeds() -> None:
    r = kata_mem_process("--log-format", "json", "shim", input=shim_request())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["memory"]["target_mib"] == 2304


def test_shim_usage_errors_follow_the_format() -> None:
    r = kata_mem_process("--log-format", "json", "shim", "extra", input="")
    assert r.returncode == 2
    err = only_error(r.stderr)
    assert (err["kind"], err["exit_code"]) == ("usage", 2) and "'extra'" in err["message"]
    r = kata_mem_process("--log-format", "xml", "shim", input="")
    assert r.returncode == 2 and "--log-format 'xml': expected text or json" in r.stderr


# -- global options in either position, for every command -------------------------------------


@pytest.fixture
def qmp_server(tmp_path: Path) -> Iterator[FakeQmpServer]:
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as srv:
        yield srv


def _commands(tmp_path: Path, sock: Path) -> dict[str, list[str]]:
    state = str(tmp_path / "state")
    return {
        "preview": ["preview", "--config", QEMU_CFG, *HOST_ARGS],
        "apply": ["apply", "--dry-run", "--config", QEMU_CFG, *HOST_ARGS],
        "status": ["status", "--qmp", str(sock), "--state-dir", state],
        "reconcile": ["reconcile", "--state-dir", state],
        "host": ["host", *HOST_ARGS],
        "config check": ["config", "check", QEMU_CFG],
    }


@pytest.mark.parametrize(
    "command", ["preview", "apply", "status", "reconcile", "host", "config check"]
)
@pytest.mark.parametrize("where", ["before", "after"])
def test_verbose_in_either_position(
    run_cli: Run, tmp_path: Path, qmp_server: FakeQmpServer, command: str, where: str
) -> None:
    argv = _commands(tmp_path, qmp_server.path)[command]
    r = run_cli(*(["-v", *argv] if where == "before" else [*argv, "-v"]))
    assert r.code != 2 and "No such option" not in r.err, r.err


def test_log_format_after_the_command_for_every_command(tmp_path: Path) -> None:
    for argv in _commands(tmp_path, tmp_path / "missing.sock").values():
        r = kata_mem_process(*argv, "--log-format", "json", "--bogus")
        assert r.returncode == 2, (argv, r.stderr)
        assert only_error(r.stderr)["kind"] == "usage", argv


def test_verbose_after_the_command_logs_info(tmp_path: Path) -> None:
    r = kata_mem_process("preview", "--config", QEMU_CFG, *HOST_ARGS, "-v", "--log-format", "json")
    assert r.returncode == 0, r.stderr
    assert any(
        d["level"] == "info" and "configuration" in d["message"] for d in json_lines(r.stderr)
    )


# -- no None in text; null where the docs say null ------------------------------------------


class OldQemu(FakeQemu):
    """A QEMU before 7.1 (no /machine memory property: device space unknown) whose
    balloon has stats polling on but reports ``stats`` (None: every statistic unset)."""

    stats: dict[str, int] | None = None

    def handle(
        self, cmd: str, args: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        if cmd == "qom-get" and args.get("path") == "/machine":
            self.commands.append(cmd)
            return {"error": {"class": "GenericError", "desc": "Property not found"}}, []
        if cmd == "qom-get" and args.get("property") == "guest-stats":
            self.commands.append(cmd)
            unset = (1 << 64) - 1
            stats = {
                k: unset for k in ("stat-total-memory", "stat-available-memory", "stat-free-memory")
            }
            stats.update(self.stats or {})
            return {"return": {"stats": stats, "last-update": int(time.time())}}, []
        return super().handle(cmd, args)


@pytest.fixture
def old_qemu(tmp_path: Path) -> Iterator[tuple[OldQemu, Path]]:
    qemu = OldQemu(balloon=True)
    with FakeQmpServer(tmp_path / "old.sock", qemu) as srv:
        yield qemu, srv.path


def test_status_text_never_says_none(run_cli: Run, old_qemu: tuple[OldQemu, Path]) -> None:
    qemu, sock = old_qemu
    r = run_cli("status", "--qmp", str(sock))
    assert r.code == 0, r.err
    assert "None" not in r.out, r.out
    assert "device space unknown" in r.out
    assert "guest: no balloon statistics yet" in r.out
    qemu.stats = {"stat-total-memory": 600 * MiB}
    r = run_cli("status", "--qmp", str(sock))
    assert "None" not in r.out, r.out
    assert "guest: MemTotal 600 MiB, available unknown, free unknown" in r.out


def test_status_json_guest_is_null_not_an_object_of_nulls(
    run_cli: Run, old_qemu: tuple[OldQemu, Path]
) -> None:
    qemu, sock = old_qemu
    doc = json.loads(run_cli("status", "--qmp", str(sock), "--json").out)
    assert doc["guest"] is None and doc["device_space_mib"] is None
    qemu.stats = {"stat-total-memory": 600 * MiB}
    doc = json.loads(run_cli("status", "--qmp", str(sock), "--json").out)
    assert doc["guest"]["total_mib"] == 600 and doc["guest"]["available_mib"] is None


# -- error texts ----------------------------------------------------------------------------------


def test_host_cgroup_flag_is_named_as_the_flag(run_cli: Run, tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent")
    r = run_cli("host", "--cgroup", missing, *HOST_ARGS)
    assert r.code == 4, r.err
    assert f"--cgroup {missing!r}: does not exist" in r.err
    assert "host_memory_cgroup" not in r.err


def test_config_cgroup_is_named_with_its_file(run_cli: Run, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", kata_mem={"host_memory_cgroup": str(tmp_path)})
    # Not --host-memory: a given host memory replaces the probe, the cgroup's cap included.
    r = run_cli("preview", "--config", str(cfg), "--host-cpus", "4", "--host-arch", "amd64")
    assert r.code == 3, r.err
    assert (
        f"{cfg}: [kata_mem] host_memory_cgroup {str(tmp_path)!r}: has neither memory.max (cgroup v2) nor memory.limit_in_bytes"
        in r.err
    )


def test_shim_names_its_request_fields_not_cli_flags(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.toml", kata_mem={"state_dir": str(tmp_path / "state")})
    # libvirt-python missing: the message names the request's backend, not --libvirt.
    probe = (
        "import sys\n"
        "sys.modules['libvirt'] = None\n"
        "from kata_mem.interfaces.main import main\n"
        "sys.exit(main(['shim']))\n"
    )
    backend = {"type": "libvirt", "uri": "test:///default", "domain": "d1"}
    r = subprocess.run(
        [sys.executable, "-c", probe],
        input=shim_request(backend=backend, apply=True, config=str(cfg)),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    message = json.loads(r.stdout)["error"]["message"]
    assert "--libvirt" not in message and "--" not in r.stderr, message
    assert "libvirt test:///default domain d1" in message and "kata-mem[libvirt]" in message


def test_shim_without_config_names_request_config() -> None:
    if any(Path(p).exists() for p in DEFAULT_PATHS):
        pytest.skip("a Kata configuration is installed where Kata looks")
    r = kata_mem_process("shim", input=shim_request(config=None), env={"KATA_CONF_FILE": ""})
    assert r.returncode == 3
    message = json.loads(r.stdout)["error"]["message"]
    assert message.startswith("request config is null") and "--config" not in message


# -- ShrinkNotAllowed: apply and preview say the same ---------------------------------------------


def _two_dimms() -> FakeQemu:
    qemu = FakeQemu(slots=4)
    for i in range(2):
        qemu.objects[f"kmmem{i}"] = 512 * MiB
        qemu.devices[f"kmdimm{i}"] = {
            "type": "dimm",
            "data": {
                "id": f"kmdimm{i}",
                "size": 512 * MiB,
                "slot": i,
                "memdev": f"/objects/kmmem{i}",
                "hotplugged": True,
            },
        }
    return qemu


@pytest.fixture
def dimm_apply(run_cli: Run, tmp_path: Path) -> Iterator[Callable[..., dict[str, Any]]]:
    cfg = write_config(
        tmp_path / "c.toml",
        {"default_memory": 512, "default_maxmemory": 4096, "memory_slots": 4},
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": 1},
    )
    state = SandboxState(tmp_path / "state", "sb")
    with state.locked(0):  # kata-mem plugged both DIMMs: its journal says so
        owned = tuple(
            OwnedDevice(f"kmdimm{i}", f"kmmem{i}", 512 * MiB, confirmed=True) for i in (0, 1)
        )
        state.save(Record("sb", owned=owned))
    with FakeQmpServer(tmp_path / "qmp.sock", _two_dimms()) as srv:

        def run(*args: str) -> dict[str, Any]:
            r = run_cli(
                "apply",
                "--config",
                str(cfg),
                "--qmp",
                str(srv.path),
                "--sandbox",
                "sb",
                *HOST_ARGS,
                "--json",
                *args,
            )
            assert r.code == 0, r.err
            doc: dict[str, Any] = json.loads(r.out)
            return doc

        yield run


def test_shrink_of_kata_mem_dimms_without_allow_is_shrink_not_allowed(
    dimm_apply: Callable[..., dict[str, Any]],
) -> None:
    # 512 + 2 x 512 MiB DIMMs; a limit of 768 MiB wants 256 MiB back: no whole DIMM fits,
    # but with shrinking off that is not what stands in the way.
    doc = dimm_apply("--limit", "768Mi")
    assert (doc["status"], doc["reason"]) == ("Infeasible", "ShrinkNotAllowed"), doc
    assert "--allow-shrink" in doc["message"] and doc["plan"]["memory"]["steps"] == []
    doc = dimm_apply("--limit", "768Mi", "--allow-shrink")
    assert (doc["status"], doc["reason"]) == ("Infeasible", "BackendCannotShrink"), doc
    assert "not made of whole DIMMs kata-mem plugged" not in doc["message"]
    assert "kmdimm0 512 MiB, kmdimm1 512 MiB" in doc["message"]


def test_apply_reports_no_shrink_steps_it_refuses(
    dimm_apply: Callable[..., dict[str, Any]],
) -> None:
    doc = dimm_apply("--limit", "256Mi")
    assert (doc["status"], doc["reason"]) == ("Infeasible", "ShrinkNotAllowed"), doc
    assert doc["steps"] == [] and doc["plan"]["memory"]["steps"] == []
    assert any(w.startswith("ShrinkNotAllowed: ") for w in doc["plan"]["warnings"])


def _preview(run_cli: Run, *args: str, config: str = QEMU_CFG) -> CliResult:
    return run_cli("preview", "--config", config, "--current", "4Gi", *HOST_ARGS, *args)


def test_preview_without_allow_shrink_shows_what_apply_does(run_cli: Run) -> None:
    r = _preview(run_cli, "--json")
    assert r.code == 0, r.err
    m = json.loads(r.out)["memory"]
    assert m["steps"] == [] and m["current_mib"] == 4096
    assert any(w.startswith("ShrinkNotAllowed: ") for w in json.loads(r.out)["warnings"])
    text = _preview(run_cli).out
    assert "unplug_dimm" not in text and "shrinking is off" in text


def test_preview_with_allow_shrink_shows_the_shrink(run_cli: Run, tmp_path: Path) -> None:
    # A guest that onlines movable gives its DIMMs back.
    movable = {"default_memory": 2048, "kernel_params": GUEST_KERNEL_PARAMS}
    r = _preview(
        run_cli, "--allow-shrink", "--json", config=str(write_config(tmp_path / "m.toml", movable))
    )
    assert r.code == 0, r.err
    assert [s["action"] for s in json.loads(r.out)["memory"]["steps"]] == ["unplug_dimm"]
    # The configuration's policy allows it as the flag does.
    cfg = write_config(tmp_path / "c.toml", movable, kata_mem={"allow_shrink": True})
    r = _preview(run_cli, "--json", config=str(cfg))
    assert [s["action"] for s in json.loads(r.out)["memory"]["steps"]] == ["unplug_dimm"]
    assert "guest onlining: movable (kernel_params memhp_default_state=online_movable)" in (
        _preview(run_cli, config=str(cfg)).out
    )


def test_preview_of_a_dimm_shrink_of_kata_s_guest_shows_it_refused(
    run_cli: Run, tmp_path: Path
) -> None:
    """Kata's guest onlines its DIMMs to a kernel zone, from which they often cannot be
    unplugged: the preview shows what apply does, no step, and says why and what to do."""
    cfg = write_config(
        tmp_path / "c.toml", {"default_memory": 2048}, kata_mem={"allow_shrink": True}
    )
    r = _preview(run_cli, "--json", config=str(cfg))
    doc = json.loads(r.out)
    assert doc["memory"]["steps"] == [] and doc["memory"]["target_mib"] == 2048
    assert doc["memory"]["guest"] is None
    assert doc["memory"]["guest_policy"]["onlining"] == "kernel"
    refused = [w for w in doc["warnings"] if w.startswith("BackendCannotShrink: ")]
    assert len(refused) == 1, doc["warnings"]
    assert "the guest onlines hot-added memory to a kernel zone (as Kata's guest" in refused[0]
    assert "enable_virtio_mem" in refused[0] and "memhp_default_state=online_movable" in refused[0]
    text = _preview(run_cli, config=str(cfg)).out
    assert "steps: none (no DIMM is unplugged: see the BackendCannotShrink note)" in text
    assert "guest onlining: kernel (as Kata's guest onlines it" in text


def test_a_damaged_journal_step_is_not_reported_as_none(
    dimm_apply: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    assert dimm_apply("--limit", "1Gi")["status"] == "NoChange"
    journal = tmp_path / "state" / "sb" / "journal.json"
    record = json.loads(journal.read_text())
    record.update(state="running", step={"size": 1}, phase="")
    journal.write_text(json.dumps(record))
    doc = dimm_apply("--limit", "1Gi")
    # A step without action or device is corruption: rebuilt from the hypervisor, said in words.
    notes = [w for w in doc["warnings"] if "journal" in w and "rebuilt" in w]
    assert notes and not any("None" in w for w in doc["warnings"]), doc["warnings"]


def test_preview_and_apply_name_the_same_stop(run_cli: Run, tmp_path: Path) -> None:
    """A small guest onlining to a kernel zone (Kata's own, assumed when kernel_params say
    nothing) whose headroom leaves no room for one more block's struct pages: the preview
    said ``clamped: guest_memmap`` and ``apply`` answered ``Infeasible (NoDeviceSpace): no
    hotplug space left`` (issue 33, item 13). Both now give the plan's cause and words."""
    cfg = write_config(
        tmp_path / "configuration.toml",
        {"default_memory": 256},
        kata_mem={"headroom_min_mib": 200, "state_dir": str(tmp_path / "state")},
    )
    args = ("--config", str(cfg), "--limit", "1Gi", *HOST_ARGS)
    preview = run_cli("preview", *args)
    assert preview.code == 0, preview.err
    why = next(line for line in preview.out.splitlines() if "why: guest_memmap: " in line)
    stop = why.split("why: guest_memmap: ", 1)[1]
    applied = run_cli("apply", "--dry-run", "--sandbox", "sb", *args)
    assert applied.code == 0, applied.err
    assert f"Infeasible (NoMemmapRoom): {stop}: the guest stays at 256 MiB" in applied.out
