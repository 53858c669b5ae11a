"""The node install docs/guide/install.md documents, run as written by
scripts/install-node.sh into a temporary root: a virtualenv under PREFIX, kata-mem on
PATH as a link into it, and the shipped systemd units, which ``systemd-analyze verify``
accepts once that link exists (it checks that ExecStart is executable); from a wheel built
with the guide's command, then from a checkout (an upgrade in place); and its uninstall."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO, doc

pytestmark = pytest.mark.installed

UNITS = ("kata-mem.socket", "kata-mem.service")
SCRIPT = REPO / "scripts" / "install-node.sh"


def source_copy(dest: Path) -> Path:
    """What a release's sdist holds, copied out of the checkout: pip builds in the
    directory it is given, and the checkout stays as it is."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, dest / name)
    shutil.copytree(
        REPO / "kata_mem", dest / "kata_mem", ignore=shutil.ignore_patterns("__pycache__")
    )
    return dest


def script_default(name: str) -> str:
    found = re.search(rf"^\w+=\$\{{{name}:-([^}}]+)\}}$", SCRIPT.read_text(), re.M)
    assert found is not None, name
    return found.group(1)


def install_env(root: Path) -> dict[str, str]:
    """This process's environment, installing under ``root`` instead of the node's paths."""
    return {
        **{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        "PREFIX": str(root / "opt/kata-mem"),
        "BIN_DIR": str(root / "usr/local/bin"),
        "UNIT_DIR": str(root / "etc/systemd/system"),
    }


def install(script: Path, source: Path, root: Path) -> subprocess.CompletedProcess[str]:
    """``script SOURCE``, installing under ``root``."""
    return subprocess.run(
        [str(script), str(source)],
        env=install_env(root),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_shipped_service_runs_the_link_the_install_makes() -> None:
    exec_start = re.search(
        r"^ExecStart=(\S+)", (REPO / "configs/systemd/kata-mem.service").read_text(), re.M
    )
    assert exec_start is not None
    assert (
        exec_start.group(1) == f"{script_default('BIN_DIR')}/kata-mem" == "/usr/local/bin/kata-mem"
    )
    assert script_default("PREFIX") == "/opt/kata-mem"
    assert script_default("UNIT_DIR") == "/etc/systemd/system"


def test_the_node_install_runs_and_its_units_verify(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (tmp_path / "src").mkdir()
    src = source_copy(tmp_path / "src")
    env = install_env(root)
    # A release artifact, built as the install guide says (pip, in a virtualenv of its own).
    (build,) = [
        line
        for line in doc("guide/install.md").splitlines()
        if line.startswith("python3 -m venv") and "pip wheel" in line
    ]
    built = subprocess.run(
        ["bash", "-c", build.replace("/tmp/wheel", str(tmp_path / "wheel-venv"))],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (src / "dist").glob("kata_mem-*-py3-none-any.whl")
    # Installed from the wheel, then again from the checkout: an upgrade in place.
    for source in (wheel, src):
        done = install(SCRIPT, source, root)
        assert done.returncode == 0, done.stderr
    link = root / "usr/local/bin/kata-mem"
    assert link.is_symlink() and os.readlink(link) == str(root / "opt/kata-mem/bin/kata-mem")
    # kata-mem-shim, the shim's client of the node service, is "installed beside kata-mem"
    # (docs/guide/shim.md): on PATH as well, or a shim would have to know the virtualenv.
    shim_link = root / "usr/local/bin/kata-mem-shim"
    assert shim_link.is_symlink()
    assert os.readlink(shim_link) == str(root / "opt/kata-mem/bin/kata-mem-shim")
    version = subprocess.run(
        [str(link), "--version"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert version.returncode == 0 and "0.1.0" in version.stdout, version.stderr
    units = root / "etc/systemd/system"
    for unit in UNITS:
        shipped = (REPO / "configs/systemd" / unit).read_text()
        assert (units / unit).read_text() == shipped.replace("/usr/local/bin/kata-mem", str(link))
    verify = subprocess.run(
        ["systemd-analyze", "verify", *(str(units / u) for u in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # The check can fail: without the link, ExecStart is not executable.
    link.unlink()
    missing = subprocess.run(
        ["systemd-analyze", "verify", *(str(units / u) for u in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode != 0 and "is not executable" in missing.stderr
    # Uninstall: what the install made goes, and nothing else.
    link.symlink_to(root / "opt/kata-mem/bin/kata-mem")
    (units / "other.service").write_text("[Service]\nExecStart=/bin/true\n")
    gone = subprocess.run(
        [str(REPO / "scripts" / "uninstall-node.sh")],
        env={**env, "SYSTEMCTL": "-"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert gone.returncode == 0, gone.stderr
    assert not link.exists() and not link.is_symlink()
    assert not shim_link.exists() and not shim_link.is_symlink()
    assert not (root / "opt/kata-mem").exists()
    assert sorted(p.name for p in units.iterdir()) == ["other.service"]


def test_uninstall_leaves_what_the_install_did_not_make(tmp_path: Path) -> None:
    bin_dir, prefix = tmp_path / "bin", tmp_path / "opt"
    bin_dir.mkdir()
    prefix.mkdir()
    (bin_dir / "kata-mem").write_text("#!/bin/sh\n")  # someone's own program
    (bin_dir / "kata-mem-shim").symlink_to("/usr/bin/true")  # and a link of theirs
    (prefix / "data").write_text("not a virtualenv")
    done = subprocess.run(
        [str(REPO / "scripts" / "uninstall-node.sh")],
        env={
            **os.environ,
            "PREFIX": str(prefix),
            "BIN_DIR": str(bin_dir),
            "UNIT_DIR": str(tmp_path / "units"),
            "SYSTEMCTL": "-",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (bin_dir / "kata-mem").read_text() == "#!/bin/sh\n"
    assert os.readlink(bin_dir / "kata-mem-shim") == "/usr/bin/true"
    assert (prefix / "data").exists()
    assert "left" in done.stderr


def test_the_install_guide_gives_this_layout() -> None:
    page = doc("guide/install.md")
    assert "scripts/install-node.sh" in page and "/opt/kata-mem" in page
    # Both commands the install puts on PATH are in its layout table and its removal by hand.
    (by_hand,) = [line for line in page.splitlines() if line.startswith("rm /etc/systemd/")]
    for command in ("kata-mem", "kata-mem-shim"):
        assert f"| `/usr/local/bin/{command}` |" in page, command
        assert f"/usr/local/bin/{command}" in by_hand.split(), command
    readme = (REPO / "README.md").read_text()
    # No distribution is published: the first install line must be one that works.
    assert "pip install kata-mem " not in readme and "pip install kata-mem\n" not in readme


def test_the_install_script_without_its_units_stops_before_it_installs(tmp_path: Path) -> None:
    """On a node without a checkout (a wheel copied there, as the guide offers) the script
    installed the virtualenv and the links, then stopped at its missing units with a sed
    error, leaving an empty kata-mem.socket.tmp among the node's units. It now says what to
    copy, before it makes anything."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "install-node.sh"
    script.write_bytes(SCRIPT.read_bytes())
    script.chmod(0o755)
    root = tmp_path / "root"
    done = install(script, REPO, root)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert str(tmp_path / "configs" / "systemd") in done.stderr and "UNIT_DIR=-" in done.stderr
    assert not root.exists()
    # What the guide has copied to such a node holds what the script needs.
    (pack,) = [line for line in doc("guide/install.md").splitlines() if line.startswith("tar -cf ")]
    assert {"scripts/install-node.sh", "configs/systemd"} <= set(pack.split())
    # ... and the command the guide runs there names the wheel where that archive holds it.
    (wheel,) = [p for p in pack.split() if p.endswith(".whl")]
    assert f"scripts/install-node.sh {wheel}" in " ".join(doc("guide/install.md").split())


def test_the_install_script_stops_before_anything_for_a_source_that_is_not_there(
    tmp_path: Path,
) -> None:
    """A mistyped wheel path made the virtualenv, then failed in pip, and the uninstall then
    left that virtualenv ("not a virtualenv holding kata-mem")."""
    root = tmp_path / "root"
    missing = tmp_path / "kata_mem-0.1.0-py3-none-any.whl"
    done = install(SCRIPT, missing, root)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (
        f"install-node: no {missing}: expected a kata_mem-*.whl file or a kata-mem checkout; "
        "nothing was installed\n"
    )
    assert not root.exists()
