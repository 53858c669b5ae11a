"""What an operator of ``kata-mem serve`` sees: ``--config`` is the
configuration of every request that names none, a start-up line without ``-v``, and one
line per answered request naming its sandbox, event, caller, outcome and duration (JSON
fields in ``--log-format json``)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support.paths import REPO
from tests.support.service import Service, start
from tests.support.waits import wait_until

EXAMPLE = REPO / "examples" / "requests" / "update.json"
BUNDLED = REPO / "configs" / "configuration-qemu.toml"


def env_without_kata() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")}


def quiet_serve(where: Path, *args: str) -> Service:
    """``kata-mem [GLOBAL] serve`` as an operator starts it: no ``-v``."""
    sock, state = where / "kata-mem.sock", where / "state"
    split = args.index("serve")
    argv = [sys.executable, "-m", "kata_mem", *args[:split], "serve", "--socket", str(sock)]
    argv += ["--state-dir", str(state), *args[split + 1 :]]
    return start(where, sock=sock, argv=argv, env=env_without_kata())


def lines_with(svc: Service, needle: str) -> list[str]:
    return wait_until(
        lambda: [line for line in svc.stderr().splitlines() if needle in line],
        lambda: f"serve logs {needle!r}: {svc.stderr()}",
    )


def test_serve_config_is_the_configuration_of_requests_without_one(tmp_path: Path) -> None:
    """The shipped example request names no configuration; there is no Kata installation
    here (the bundled one is given with --config, relative as an operator types it)."""
    assert json.loads(EXAMPLE.read_text()).get("config") is None
    svc = quiet_serve(tmp_path, "serve", "--config", os.path.relpath(BUNDLED, REPO))
    try:
        answer = svc.post(EXAMPLE.read_bytes())
        assert answer.status == 200, answer.body
        assert answer.json()["plan"]["config"]["path"] == str(BUNDLED)
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_serve_logs_its_start_and_each_answer_without_v(tmp_path: Path) -> None:
    svc = quiet_serve(tmp_path, "serve", "--config", str(BUNDLED))
    try:
        (started,) = lines_with(svc, "listening on")
        assert started.startswith("kata-mem: INFO: kata-mem 0.1.0 listening on ")
        assert f"configuration {BUNDLED}" in started
        assert svc.post(EXAMPLE.read_bytes()).status == 200
        bad = json.loads(EXAMPLE.read_text())
        bad.update(sandbox_id="sb-bad", config=str(tmp_path / "missing.toml"))
        assert svc.post(bad).status == 400
        (planned,) = lines_with(svc, "sandbox sb-1: ")
        assert "sandbox sb-1: update (plan) from uid 0 gid 0 pid " in planned
        assert ": planned 2816 MiB, exit 0, " in planned and planned.endswith(" ms")
        (refused,) = lines_with(svc, "sandbox sb-bad: ")
        assert ": error config, exit 3, " in refused
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_in_json_mode_each_answer_is_one_object_with_its_fields(tmp_path: Path) -> None:
    svc = quiet_serve(tmp_path, "--log-format", "json", "serve", "--config", str(BUNDLED))
    try:
        assert svc.post(EXAMPLE.read_bytes()).status == 200
        (line,) = lines_with(svc, '"sandbox": "sb-1"')
        doc = json.loads(line)
        assert doc["level"] == "info" and doc["logger"] == "kata_mem.interfaces.service"
        assert (doc["event"], doc["mode"], doc["exit_code"]) == ("update", "plan", 0)
        assert doc["outcome"] == "planned 2816 MiB"
        assert isinstance(doc["duration_ms"], (int, float)) and doc["duration_ms"] >= 0
        assert isinstance(doc["peer"], str) and doc["peer"]
        started = [json.loads(x) for x in svc.stderr().splitlines() if "listening on" in x]
        assert len(started) == 1 and started[0]["level"] == "info"
    finally:
        assert svc.stop() == 0, svc.stderr()
