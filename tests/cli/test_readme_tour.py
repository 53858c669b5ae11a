"""The README's five-minute tour runs as printed from a checkout with only kata-mem: no
Kata installation, no VM. The preview prints exactly what the README shows; the
shim and the node service answer the shipped example request with the bundled
configuration; the RuntimeClass is computed. Every ``console`` example of the README and
of docs/guide prints exactly what it shows. The one command that needs a running VM
(``apply ... --qmp /run/vc/vm/SANDBOX/qmp.sock``) is what scripts/demo runs on a real guest."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.waits import wait_until

KATA_MEM = f"{shlex.quote(sys.executable)} -m kata_mem"


def tour_blocks() -> list[tuple[str, str]]:
    readme = (REPO / "README.md").read_text()
    tour = readme[readme.index("## A five-minute tour") :]
    tour = tour[: tour.index("\n## ", 1)]
    return re.findall(r"```(bash|console)\n(.*?)```", tour, re.S)


def block(needle: str) -> str:
    (found,) = [body for _, body in tour_blocks() if needle in body]
    return found


def bash(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")}
    return subprocess.run(
        ["bash", "-c", f'kata-mem() {{ {KATA_MEM} "$@"; }}\nset -e\n{script}'],
        cwd=REPO,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def console_examples() -> list[tuple[str, str]]:
    """Every ``console`` block of the README and the operator guide that runs kata-mem: a
    ``$ `` command (continued with ``\\``) and the output it shows."""
    pages = [REPO / "README.md", *sorted((REPO / "docs" / "guide").glob("*.md"))]
    return [
        (str(page.relative_to(REPO)), body)
        for page in pages
        for body in re.findall(r"```console\n(.*?)```", page.read_text(), re.S)
        if re.match(r"\$ (\.venv/bin/)?kata-mem ", body)
    ]


@pytest.mark.parametrize(("page", "text"), console_examples(), ids=lambda x: x[:40])
def test_every_console_example_prints_what_it_shows(page: str, text: str) -> None:
    lines = text.splitlines()
    command_lines = [lines[0].removeprefix("$ ").replace(".venv/bin/kata-mem", "kata-mem", 1)]
    while command_lines[-1].endswith("\\"):
        command_lines.append(lines[len(command_lines)])
    shown = "\n".join(lines[len(command_lines) :]) + "\n"
    done = bash("\n".join(command_lines))
    assert done.returncode == 0, (page, done.stderr)
    assert done.stdout == shown, page


def test_the_readme_and_the_quick_start_show_their_preview() -> None:
    assert {page for page, _ in console_examples()} >= {"README.md", "docs/guide/quick-start.md"}


def test_the_shim_example_answers_with_the_bundled_configuration() -> None:
    done = bash(block("kata-mem shim"))
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    path = REPO / answer["plan"]["config"]["path"]  # as KATA_CONF_FILE names it
    assert path.resolve() == REPO / "configs" / "configuration-qemu.toml"


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port: int = s.getsockname()[1]
        return port


def test_the_node_service_example_answers_the_shipped_request(tmp_path: Path) -> None:
    """As printed, but on a socket, state directory and port of the test's own (the
    machine's /run/kata-mem and port 9464 may be in use)."""
    text = block("kata-mem serve")
    sock, port = str(tmp_path / "kata-mem.sock"), str(free_port())
    serve, curls = text.split("\n", 1)
    assert serve.endswith(" &") and "/run/kata-mem/kata-mem.sock" in curls
    serve = serve.removesuffix(" &").replace("9464", port)
    serve += f" --socket {sock} --state-dir {tmp_path / 'state'}"
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        ["bash", "-c", "exec " + serve.replace("kata-mem ", f"{KATA_MEM} ", 1)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=log,
        env={k: v for k, v in os.environ.items() if k != "KATA_CONF_FILE"},
    )
    try:
        wait_until(
            lambda: "listening on" in (tmp_path / "serve.log").read_text(),
            lambda: f"serve starts: {(tmp_path / 'serve.log').read_text()}",
            timeout=30,
        )
        done = bash(curls.replace("/run/kata-mem/kata-mem.sock", sock).replace("9464", port))
        assert done.returncode == 0, done.stderr
        answer, _, metrics = done.stdout.partition("\n")
        assert json.loads(answer)["plan"]["memory"]["target_mib"] == 2816
        assert "kata_mem_request_seconds_bucket" in metrics
    finally:
        proc.terminate()
        assert proc.wait(60) == 0, (tmp_path / "serve.log").read_text()
        log.close()


def test_the_runtimeclass_example_runs() -> None:
    done = bash(block("kata-mem runtimeclass"))
    assert done.returncode == 0, done.stderr
    assert "kind: RuntimeClass" in done.stdout
