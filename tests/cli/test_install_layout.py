"""The node install docs/guide/install.md documents, run as written by
scripts/install-node.sh into a temporary root: a virtualenv under PREFIX, kata-mem on
PATH as a link into it, and the shipped systemd units, which ``systemd-analyze verify``
accepts once that link exists (it checks that ExecStart is executable); from a wheel built
with the guide's command, then from a checkout (an upgrade in place); and its uninstall."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
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


def test_uninstall_leaves_what_the_install_did_not_make(tmp_path: Path) -> None:
    """Files at the installed paths and a PREFIX without the install's manifest: the
    uninstall has no proof that any is the install's, says so and removes nothing."""
    bin_dir, prefix = tmp_path / "bin", tmp_path / "opt"
    bin_dir.mkdir()
    prefix.mkdir()
    (bin_dir / "kata-mem").write_text("#!/bin/sh\n")  # someone's own program
    (bin_dir / "kata-mem-shim").symlink_to("/usr/bin/true")  # and a link of theirs
    (prefix / "data").write_text("not a virtualenv")
    before = tree(tmp_path)
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
    assert done.returncode == 1, done.stderr
    assert tree(tmp_path) == before
    assert done.stderr == (
        f"uninstall-node: left {prefix}: no {prefix}/kata-mem-install.manifest: not an install "
        "of install-node.sh (its manifest lists what it wrote); nothing was removed\n"
    )


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


# -- what the install wrote, and nothing else (issue 33, items 6, 7, 8 and 14) ----------------

#: kata-mem alone, from the wheel: what the scripts do with the paths does not depend on what
#: pip fetches, and a virtualenv without the dependencies is a second's install.
QUICK = {"PIP_NO_DEPS": "1", "PIP_NO_INDEX": "1"}
UNINSTALL = REPO / "scripts" / "uninstall-node.sh"
NOBODY = 65534


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's wheel, built once for the module."""
    return build_wheel(source_copy(tmp_path_factory.mktemp("src")), tmp_path_factory.mktemp("dist"))


def build_wheel(src: Path, dist: Path) -> Path:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--wheel-dir",
            str(dist),
            str(src),
        ],
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (found,) = dist.glob("kata_mem-*-py3-none-any.whl")
    return found


def run(
    script: Path, *args: str | Path, root: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """``script ARGS`` installing under ``root`` (its environment overridden by ``env``)."""
    return subprocess.run(
        [str(script), *map(str, args)],
        env={**install_env(root), **QUICK, "SYSTEMCTL": "-", **env},
        cwd=root.parent,  # where a relative PREFIX would land
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def tree(top: Path) -> dict[str, tuple[object, ...]]:
    """Everything under ``top`` (itself included): kind, owner, mode and content or target,
    by path: what "left as it was" compares."""
    found: dict[str, tuple[object, ...]] = {}
    if not top.exists() and not top.is_symlink():
        return found
    paths = [top, *top.rglob("*")] if top.is_dir() and not top.is_symlink() else [top]
    for path in paths:
        st = path.lstat()
        if path.is_symlink():
            what: object = os.readlink(path)
        elif path.is_file():
            what = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            what = None
        found[str(path)] = (stat.S_IFMT(st.st_mode), st.st_uid, stat.S_IMODE(st.st_mode), what)
    return found


def site_packages(prefix: Path) -> Path:
    (found,) = prefix.glob("lib/python3*/site-packages")
    return found


def test_an_upgrade_keeps_a_unit_the_admin_edited_and_names_what_it_kept(
    tmp_path: Path, wheel: Path
) -> None:
    """Item 6: install-node.sh rewrote a systemd unit the admin had edited, without a word.
    A unit is replaced only while it is as the install wrote it; an edited one and the
    drop-ins of kata-mem.service.d/ are kept, and the install says so."""
    root = tmp_path / "root"
    first = run(SCRIPT, wheel, root=root)
    assert first.returncode == 0, first.stderr
    units = root / "etc/systemd/system"
    service, socket = units / "kata-mem.service", units / "kata-mem.socket"
    edited = service.read_text().replace("kata-mem serve", "kata-mem serve --group kata")
    service.write_text(edited)
    drop_in = units / "kata-mem.service.d" / "50-site.conf"
    drop_in.parent.mkdir()
    drop_in.write_text("[Service]\nEnvironment=SITE=1\n")
    # A newer release whose socket unit changed: the unit nobody edited is upgraded.
    newer = tmp_path / "newer"
    (newer / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, newer / "scripts")
    shutil.copytree(REPO / "configs" / "systemd", newer / "configs" / "systemd")
    shipped = newer / "configs" / "systemd" / "kata-mem.socket"
    shipped.write_text(shipped.read_text() + "# a newer release\n")
    again = run(newer / "scripts" / "install-node.sh", wheel, root=root)
    assert again.returncode == 0, again.stderr
    assert service.read_text() == edited
    assert drop_in.read_text() == "[Service]\nEnvironment=SITE=1\n"
    assert socket.read_text().endswith("# a newer release\n")
    assert f"kept {service}: changed since the install wrote it" in again.stderr
    assert f"kept {drop_in}" in again.stderr
    # ... and the next upgrade still knows the edited unit for one it wrote: kept again.
    third = run(SCRIPT, wheel, root=root)
    assert third.returncode == 0, third.stderr
    assert service.read_text() == edited and f"kept {service}" in third.stderr


def guide_drop_in() -> tuple[Path, str]:
    """The drop-in the install guide writes for site settings: its path and its text."""
    found = re.search(r"^cat >(\S+) <<'EOF'\n(.*?)^EOF$", doc("guide/install.md"), re.M | re.S)
    assert found is not None, "no drop-in written in docs/guide/install.md"
    return Path(found.group(1)), found.group(2)


def test_the_guide_s_drop_in_gives_serve_its_metrics_address_and_verifies(
    tmp_path: Path, wheel: Path
) -> None:
    """The unit had no --metrics-address and the docs said to edit units in place: the guide
    sets serve's options in a drop-in of kata-mem.service.d/, which the install never
    writes, and systemd takes it with the units the install wrote."""
    from kata_mem.interfaces.cli import cli as group

    path, text = guide_drop_in()
    assert path.parent == Path("/etc/systemd/system/kata-mem.service.d")
    root = tmp_path / "root"
    done = run(SCRIPT, wheel, root=root)
    assert done.returncode == 0, done.stderr
    units = root / "etc/systemd/system"
    link = root / "usr/local/bin/kata-mem"
    (units / path.parent.name).mkdir()
    (units / path.parent.name / path.name).write_text(
        text.replace("/usr/local/bin/kata-mem", str(link))
    )
    starts = re.findall(r"^ExecStart=(.*)$", text, re.M)
    assert starts[0] == "", "a drop-in's ExecStart= first clears the unit's"
    command, verb, *options = shlex.split(starts[-1])
    assert (command, verb) == ("/usr/local/bin/kata-mem", "serve")
    assert "--metrics-address" in options
    group.commands["serve"].make_context("serve", list(options))  # options serve takes
    verify = subprocess.run(
        ["systemd-analyze", "verify", *(str(units / u) for u in UNITS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # systemd-analyze reads that drop-in: one whose command is not there fails.
    (units / path.parent.name / path.name).write_text(
        "[Service]\nExecStart=\nExecStart=/nonexistent serve\n"
    )
    broken = subprocess.run(
        ["systemd-analyze", "verify", str(units / "kata-mem.service")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert broken.returncode != 0 and "/nonexistent" in broken.stderr


@pytest.mark.parametrize(
    "path",
    [
        "usr/local/bin/kata-mem-shim",
        "usr/local/bin/kata-mem",
        "etc/systemd/system/kata-mem.service",
        "etc/systemd/system/kata-mem.socket",
    ],
)
def test_the_install_stops_at_a_file_it_did_not_write(
    tmp_path: Path, wheel: Path, path: str
) -> None:
    """Item 7: installing replaced a file the admin had put at a path the install writes.
    Such a file is named and left, and nothing is installed."""
    root = tmp_path / "root"
    theirs = root / path
    theirs.parent.mkdir(parents=True)
    theirs.write_text("#!/bin/sh\necho the admin's\n")
    theirs.chmod(0o755)
    before = tree(root)
    done = run(SCRIPT, wheel, root=root)
    assert done.returncode == 1, done.stderr
    assert f"{theirs}: not written by install-node.sh" in done.stderr
    assert "nothing was installed" in done.stderr
    assert tree(root) == before


def test_uninstall_removes_what_the_install_wrote_and_names_what_it_left(
    tmp_path: Path, wheel: Path
) -> None:
    """Item 7: uninstalling deleted a file the admin had put at an installed path, and the
    whole PREFIX. It removes each path the install wrote while it is as written, and names
    every other one."""
    root = tmp_path / "root"
    done = run(SCRIPT, wheel, root=root)
    assert done.returncode == 0, done.stderr
    prefix, bin_dir = root / "opt/kata-mem", root / "usr/local/bin"
    units = root / "etc/systemd/system"
    shim = bin_dir / "kata-mem-shim"
    shim.unlink()
    shim.write_text("#!/bin/sh\n# the admin's own\n")  # put where the link was
    socket = units / "kata-mem.socket"
    socket.write_text(socket.read_text().replace("SocketGroup=root", "SocketGroup=kata"))
    notes = prefix / "NOTES"
    notes.write_text("the admin's notes\n")
    patched = site_packages(prefix) / "kata_mem" / "__init__.py"
    patched.write_text(patched.read_text() + "# patched on this node\n")
    other = units / "other.service"
    other.write_text("[Service]\nExecStart=/bin/true\n")
    kept = {p: tree(p) for p in (shim, socket, notes, patched, other)}
    gone = run(UNINSTALL, root=root)
    assert gone.returncode == 0, gone.stderr
    for path, was in kept.items():
        assert tree(path) == was, path
        assert str(path) in gone.stderr or path == other, path
    left = {p for p in tree(root) if not Path(p).is_dir()}
    assert left == {str(p) for p in kept}
    # What held them stays; what the install made and emptied goes.
    assert not (root / "opt/kata-mem/bin").exists()
    assert not (bin_dir / "kata-mem").exists() and not (bin_dir / "kata-mem").is_symlink()
    assert not (units / "kata-mem.service").exists()


def test_uninstall_names_the_drop_ins_it_leaves(tmp_path: Path, wheel: Path) -> None:
    """Item 14: the units' drop-ins (site settings, the admin's) stay, and are named."""
    root = tmp_path / "root"
    assert run(SCRIPT, wheel, root=root).returncode == 0
    units = root / "etc/systemd/system"
    drop_ins = [
        units / "kata-mem.service.d" / "override.conf",
        units / "kata-mem.socket.d" / "50-group.conf",
    ]
    for drop_in in drop_ins:
        drop_in.parent.mkdir()
        drop_in.write_text("[Unit]\n")
    gone = run(UNINSTALL, root=root)
    assert gone.returncode == 0, gone.stderr
    for drop_in in drop_ins:
        assert drop_in.read_text() == "[Unit]\n"
        assert f"left {drop_in}: a drop-in" in gone.stderr
    assert not (units / "kata-mem.service").exists()
    assert not (root / "opt").exists()


def test_a_prefix_holding_a_virtualenv_of_its_own_is_neither_installed_into_nor_removed(
    tmp_path: Path, wheel: Path
) -> None:
    """Item 8: PREFIX pointing at an existing virtualenv: the install went into it, and the
    uninstall removed the whole directory. Neither touches a directory the install did not
    make."""
    theirs = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(theirs)], check=True)
    (theirs / "bin" / "kata-mem").write_text("#!/bin/sh\n")
    (theirs / "bin" / "kata-mem").chmod(0o755)
    (theirs / "work.txt").write_text("the owner's work\n")
    root = tmp_path / "root"
    before = tree(theirs)
    done = run(SCRIPT, wheel, root=root, PREFIX=str(theirs))
    assert done.returncode == 1, done.stderr
    assert f"PREFIX {theirs}: holds files install-node.sh did not write" in done.stderr
    assert "nothing was installed" in done.stderr
    assert tree(theirs) == before and not root.exists()
    gone = run(UNINSTALL, root=root, PREFIX=str(theirs))
    assert gone.returncode == 1, gone.stderr
    assert f"no {theirs}/kata-mem-install.manifest" in gone.stderr
    assert "nothing was removed" in gone.stderr
    assert tree(theirs) == before


def test_an_empty_prefix_that_was_there_is_left_there(tmp_path: Path, wheel: Path) -> None:
    """Item 8, the same rule: a PREFIX directory that existed (empty) before the install is
    installed into, and the uninstall empties it and leaves it."""
    root = tmp_path / "root"
    prefix = tmp_path / "mounted"
    prefix.mkdir()
    assert run(SCRIPT, wheel, root=root, PREFIX=str(prefix)).returncode == 0
    assert (prefix / "bin" / "kata-mem").exists()
    gone = run(UNINSTALL, root=root, PREFIX=str(prefix))
    assert gone.returncode == 0, gone.stderr
    assert prefix.is_dir() and list(prefix.iterdir()) == []
    assert f"left {prefix}: it was there before the install" in gone.stderr


def hostile_prefix(case: str, tmp_path: Path) -> Path:
    """A PREFIX as mistyped or laid by another user."""
    if case in ("/", "/usr"):
        return Path(case)
    if case == "symlink":
        target = tmp_path / "elsewhere"
        target.mkdir()
        (target / "file").write_text("someone's\n")
        (tmp_path / "link").symlink_to(target)
        return tmp_path / "link"
    if case == "owned-by-nobody":
        (tmp_path / "nobody").mkdir()
        os.chown(tmp_path / "nobody", NOBODY, NOBODY)
        return tmp_path / "nobody"
    if case == "under-a-directory-others-write":
        (tmp_path / "shared").mkdir()
        (tmp_path / "shared").chmod(0o777)
        return tmp_path / "shared" / "kata-mem"
    if case == "a-file":
        (tmp_path / "file").write_text("someone's\n")
        return tmp_path / "file"
    assert case == "relative"
    return Path("opt/kata-mem")


@pytest.mark.parametrize(
    "case",
    [
        "/",
        "/usr",
        "symlink",
        "owned-by-nobody",
        "under-a-directory-others-write",
        "a-file",
        "relative",
    ],
)
def test_a_mistyped_or_hostile_prefix_is_refused_and_left_as_it_was(
    tmp_path: Path, case: str
) -> None:
    """PREFIX as a mistyped variable or another user's directory: one line naming it and what
    was expected, and nothing made, changed or removed, by the install or the uninstall.
    (PYTHON=false: were the refusal missing, no virtualenv could be made there.)"""
    prefix = hostile_prefix(case, tmp_path)
    root = tmp_path / "root"
    watched = tmp_path if case in ("/", "/usr", "relative") else prefix
    before = tree(watched)
    done = run(SCRIPT, REPO, root=root, PREFIX=str(prefix), PYTHON="false")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and f"PREFIX {prefix}" in done.stderr, done.stderr
    assert "nothing was installed" in done.stderr
    assert tree(watched) == before and not root.exists()
    gone = run(UNINSTALL, root=root, PREFIX=str(prefix))
    assert "removed" not in gone.stderr.replace("nothing was removed", ""), gone.stderr
    assert tree(watched) == before


@pytest.mark.parametrize(
    ("which", "link"), [("BIN_DIR", False), ("UNIT_DIR", False), ("BIN_DIR", True)]
)
def test_a_directory_another_user_could_write_is_refused(
    tmp_path: Path, wheel: Path, which: str, link: bool
) -> None:
    """As root the install writes nowhere another user could have written (or could swap
    what it writes): a BIN_DIR or UNIT_DIR of theirs, or a link of theirs on the way to one
    of root's, stops it before anything."""
    mine = tmp_path / "mine"
    mine.mkdir()
    theirs = tmp_path / "theirs"
    if link:
        theirs.symlink_to(mine)
        os.lchown(theirs, NOBODY, NOBODY)
    else:
        theirs.mkdir()
        os.chown(theirs, NOBODY, NOBODY)
    root = tmp_path / "root"
    done = run(SCRIPT, wheel, root=root, **{which: str(theirs)})
    assert done.returncode == 1, done.stderr
    assert f"{which} {theirs}: owned by nobody (uid {NOBODY})" in done.stderr
    assert "nothing was installed" in done.stderr
    assert not root.exists() and list(theirs.iterdir()) == [] and list(mine.iterdir()) == []


def test_a_manifest_with_a_line_the_install_does_not_write_is_no_proof(
    tmp_path: Path, wheel: Path
) -> None:
    """The manifest is read only as the install writes it: a line of another form (here a
    file's hash that is not one) refuses the whole of it, and nothing is removed."""
    root = tmp_path / "root"
    assert run(SCRIPT, wheel, root=root).returncode == 0
    manifest = root / "opt/kata-mem/kata-mem-install.manifest"
    manifest.write_text(manifest.read_text() + f"f\tnot-a-hash\t{root}/etc\n")
    before = tree(root)
    for script in (UNINSTALL, SCRIPT):
        done = run(script, *([wheel] if script == SCRIPT else []), root=root)
        assert done.returncode == 1, done.stderr
        assert (
            f"{manifest}: line " in done.stderr
            and "is not one install-node.sh writes" in done.stderr
        )
        assert tree(root) == before


def test_a_file_another_user_owns_is_never_acted_on(tmp_path: Path, wheel: Path) -> None:
    """A unit the install wrote and another user now owns is kept by an upgrade and left by
    the uninstall; a manifest another user owns is no proof of anything: the uninstall
    refuses it whole."""
    root = tmp_path / "root"
    assert run(SCRIPT, wheel, root=root).returncode == 0
    service = root / "etc/systemd/system/kata-mem.service"
    os.chown(service, NOBODY, NOBODY)
    again = run(SCRIPT, wheel, root=root)
    assert again.returncode == 0, again.stderr
    assert f"kept {service}: owned by nobody (uid {NOBODY})" in again.stderr
    manifest = root / "opt/kata-mem/kata-mem-install.manifest"
    os.chown(manifest, NOBODY, NOBODY)
    before = tree(root)
    refused = run(UNINSTALL, root=root)
    assert refused.returncode == 1, refused.stderr
    assert f"{manifest}: owned by nobody (uid {NOBODY})" in refused.stderr
    assert "nothing was removed" in refused.stderr
    assert tree(root) == before
    os.chown(manifest, 0, 0)
    gone = run(UNINSTALL, root=root)
    assert gone.returncode == 0, gone.stderr
    assert f"left {service}: owned by nobody (uid {NOBODY})" in gone.stderr
    assert service.exists() and not (root / "opt").exists()


def test_a_wheel_of_the_installed_version_is_installed_again_and_said_so(
    tmp_path: Path, wheel: Path
) -> None:
    """Upgrading with a wheel of the version installed did nothing (pip keeps an installed
    version) and printed "installed": the wheel's files are installed, and the script says
    it reinstalled that version."""
    root = tmp_path / "root"
    first = run(SCRIPT, wheel, root=root)
    assert first.returncode == 0, first.stderr
    assert "installed kata-mem 0.1.0 in" in first.stderr
    (tmp_path / "src").mkdir()
    src = source_copy(tmp_path / "src")
    init = src / "kata_mem" / "__init__.py"
    init.write_text(init.read_text() + "# rebuilt\n")
    rebuilt = build_wheel(src, tmp_path / "dist")
    again = run(SCRIPT, rebuilt, root=root)
    assert again.returncode == 0, again.stderr
    assert "reinstalled kata-mem 0.1.0" in again.stderr
    installed = site_packages(root / "opt/kata-mem") / "kata_mem" / "__init__.py"
    assert installed.read_text().endswith("# rebuilt\n")
    # The manifest followed: the uninstall takes every file of the reinstall.
    gone = run(UNINSTALL, root=root)
    assert gone.returncode == 0, gone.stderr
    assert not (root / "opt").exists() and not (root / "usr").exists()


def manifest_entries(path: Path) -> list[tuple[str, str, str]]:
    header, *lines = path.read_text().splitlines()
    assert header.startswith("# kata-mem install manifest v1")
    return [tuple(line.split("\t", 2)) for line in lines if not line.startswith("#")]  # type: ignore[misc]


def test_the_manifest_lists_each_path_the_install_wrote_with_its_hash(
    tmp_path: Path, wheel: Path
) -> None:
    """The proof the scripts act on: one line per path the install made, a file with its
    sha256, a link with its target, a directory it created; nothing else."""
    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)  # there before: not the install's
    assert run(SCRIPT, wheel, root=root).returncode == 0
    prefix = root / "opt/kata-mem"
    manifest = prefix / "kata-mem-install.manifest"
    assert stat.S_IMODE(manifest.stat().st_mode) == 0o644
    entries = manifest_entries(manifest)
    paths = [p for _, _, p in entries]
    assert len(paths) == len(set(paths))
    for kind, value, path in entries:
        p = Path(path)
        if kind == "f":
            assert not p.is_symlink() and hashlib.sha256(p.read_bytes()).hexdigest() == value
        elif kind == "l":
            assert os.readlink(p) == value
        else:
            assert (kind, value) == ("d", "-") and p.is_dir() and not p.is_symlink()
    made = {str(p) for p in tree(prefix)} - {str(manifest)}
    made |= {str(root / "opt"), *(str(p) for p in tree(root / "usr/local"))}
    made |= {str(p) for p in tree(root / "etc")}
    assert set(paths) == made
    assert str(root / "usr") not in paths
    assert doc("guide/install.md").count("/opt/kata-mem/kata-mem-install.manifest") >= 1


def test_an_install_that_stops_midway_leaves_a_manifest_of_what_it_made(tmp_path: Path) -> None:
    """pip fails once the virtualenv is made (a wheel that is no wheel): the manifest still
    lists what the install made, and the uninstall removes all of it."""
    broken = tmp_path / "kata_mem-0.1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip archive")
    root = tmp_path / "root"
    done = run(SCRIPT, broken, root=root)
    assert done.returncode != 0
    manifest = root / "opt/kata-mem/kata-mem-install.manifest"
    assert any(p == str(root / "opt/kata-mem/bin/python") for _, _, p in manifest_entries(manifest))
    gone = run(UNINSTALL, root=root)
    assert gone.returncode == 0, gone.stderr
    assert not root.exists()


# The whole install, dependencies and all, last: scripts/break_safety.py runs this module with
# -x, and a broken rule is found by the quick tests above in seconds.
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
