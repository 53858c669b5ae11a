"""What an operator runs as printed: the scripts ask only for extras the
package has, the examples of the exit-code table do what the table says, the service guide
names the Go tests' environment, and config check says who resizes a VM after boot."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO, doc

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the test extra brings tomli
    import tomli as tomllib

#: A pip requirement on this checkout with extras: ``ROOT[a,b]`` / ``"$root[$extras]"``.
CHECKOUT_EXTRAS = re.compile(r"(?:ROOT\}|root)\[([a-z][a-z0-9,-]*)\]")
#: ``scripts/bootstrap.sh VENV EXTRAS``: its second argument is a list of extras.
BOOTSTRAP = re.compile(r"scripts/bootstrap\.sh +\S+ +([a-z][a-z0-9,-]*)")


def test_every_extra_the_scripts_install_exists() -> None:
    extras = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    files = [*sorted((REPO / "scripts").iterdir()), REPO / "Makefile", REPO / ".ci" / "run"]
    asked = {
        (f.name, extra)
        for f in files
        if f.is_file()
        for code in [re.sub(r"(?m)^\s*#.*$", "", f.read_text())]  # not the comments
        for found in (*CHECKOUT_EXTRAS.findall(code), *BOOTSTRAP.findall(code))
        for extra in found.split(",")
    }
    assert asked  # the patterns still find the scripts' installs
    assert sorted(a for a in asked if a[1] not in extras) == []


def exit_code_row(code: int) -> str:
    (row,) = [r for r in doc("reference/exit-codes.md").splitlines() if r.startswith(f"| {code} |")]
    return row


def test_the_examples_of_exit_141_exit_141() -> None:
    """Each complete command the row gives (``...`` marks an abbreviated one) ends so."""
    row = exit_code_row(141).replace("\\|", "|")
    commands = [c for c in re.findall(r"`(kata-mem [^`]*\|[^`]*)`", row) if "..." not in c]
    assert commands
    kata_mem = f"{shlex.quote(sys.executable)} -m kata_mem"
    for command in commands:
        line = command.replace("kata-mem ", f"{kata_mem} ", 1)
        done = subprocess.run(
            ["bash", "-c", line + '; echo "${PIPESTATUS[0]}" >&2'],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.stderr.splitlines()[-1] == "141", (command, done.stderr)


def test_the_service_guide_names_the_environment_of_the_go_tests() -> None:
    go = "".join(p.read_text() for p in sorted((REPO / "go").rglob("*.go")))
    names = set(re.findall(r'os\.Getenv\("(KATA_MEM_[A-Z_]+)"\)', go))
    assert names  # KATA_MEM_PYTHON, the interpreter of the serve the Go tests start
    guide = doc("guide/service.md")
    assert sorted(n for n in names if n not in guide) == []


def test_config_check_says_who_resizes_the_vm_after_boot(tmp_path: Path) -> None:
    """Kata's runtime hotplugs by itself unless static_sandbox_resource_mgmt is set:
    config check says which of the two holds for the configuration."""
    from tests.support.cli import kata_mem_process

    dynamic = REPO / "configs" / "configuration-qemu.toml"
    static = tmp_path / "configuration.toml"
    static.write_text(
        dynamic.read_text().replace(
            "static_sandbox_resource_mgmt = false", "static_sandbox_resource_mgmt = true"
        )
    )
    assert static.read_text() != dynamic.read_text()
    text = kata_mem_process("config", "check", str(dynamic))
    assert text.returncode == 0, text.stderr
    (line,) = [x for x in text.stdout.splitlines() if x.startswith("memory after boot: ")]
    assert "Kata's runtime hotplugs it by itself" in line and "in place of" in line
    doc = json.loads(kata_mem_process("config", "check", str(static), "--json").stdout)
    assert doc["memory_owner"].startswith("sized once at boot by Kata, which never resizes it")
    assert "kata-mem is its one owner after boot" in doc["memory_owner"]


def test_scripts_test_asks_for_the_pythons_it_tests_before_anything_else(tmp_path: Path) -> None:
    """Without pyenv's 3.10 and 3.13 (a fresh Debian machine has no pyenv), scripts/test
    failed only after the whole pytest run, ~14 min in: it checks for them first."""
    code = re.sub(r"(?m)^\s*#.*$", "", (REPO / "scripts" / "test").read_text())
    check = code.index("scripts/test-pythons --check")
    assert check < code.index("scripts/install-system-deps.sh")
    # The check in a copy of the scripts (a bootstrap would make its virtualenvs there).
    (tmp_path / "scripts").mkdir()
    for name in ("test-pythons", "bootstrap.sh"):
        (tmp_path / "scripts" / name).write_bytes((REPO / "scripts" / name).read_bytes())
        (tmp_path / "scripts" / name).chmod(0o755)
    home = tmp_path / "home"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}  # no pyenv on PATH: $HOME/.pyenv

    def run_check() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(tmp_path / "scripts" / "test-pythons"), "--check", "3.10", "3.13"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    missing = run_check()
    assert missing.returncode == 1
    assert "no pyenv build of Python 3.10" in missing.stderr
    assert "pyenv install 3.10" in missing.stderr
    for version in ("3.10.1", "3.13.2"):
        python = home / ".pyenv" / "versions" / version / "bin" / f"python{version[:-2]}"
        python.parent.mkdir(parents=True)
        python.write_text("#!/bin/sh\nexit 1\n")  # never run by the check
        python.chmod(0o755)
    found = run_check()
    assert found.returncode == 0, found.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "scripts"]


#: The Python the whole suite runs on (Debian 12's python3, which scripts/bootstrap.sh takes).
MAIN_PYTHON = "3.11"


def test_every_python_requires_python_claims_is_run() -> None:
    """What requires-python admits is what CI runs: the whole suite on the main Python and
    the real-guest module on scripts/test-pythons' default versions (a version CI does not
    run is not claimed); and every page that lists them names those."""
    claim = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    bounds = re.fullmatch(r">=3\.(\d+),<3\.(\d+)", claim)
    assert bounds is not None, claim
    claimed = {f"3.{m}" for m in range(int(bounds.group(1)), int(bounds.group(2)))}
    script = (REPO / "scripts" / "test-pythons").read_text()
    default = re.search(r"versions=\(([0-9. ]+)\)", script)
    assert default is not None
    others = default.group(1).split()
    assert sorted({*others, MAIN_PYTHON}) == sorted(claimed) and MAIN_PYTHON not in others
    listed = " ".join(others[:-1]) + f" and {others[-1]}"  # "3.10 3.12 and 3.13"
    for page in ("README.md", "docs/guide/quick-start.md", "docs/contributing/tests.md"):
        text = " ".join((REPO / page).read_text().replace(",", "").split())
        assert f"pyenv install {' '.join(others)}" in text, page
    text = " ".join((REPO / "docs/guide/install.md").read_text().replace(",", "").split())
    assert listed in text


def test_test_pythons_refuses_a_flag_where_a_version_goes() -> None:
    done = subprocess.run(
        [str(REPO / "scripts" / "test-pythons"), "--check", "--prepare"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--prepare: expected a version X.Y" in done.stderr
