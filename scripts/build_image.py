#!/usr/bin/env python3
"""Build kata-mem's container image without a container engine or a base image: an OCI
image layout in a tar, which containerd (``ctr -n k8s.io images import``), ``podman load``
and ``skopeo copy oci-archive:...`` take. The image deploy/kubernetes/Containerfile
describes (entrypoint ``kata-mem``, command ``serve``, ``/usr/local/bin/kata-mem-nri``,
Python 3.11), from:

- **Debian 12 packages**: the Python runtime (``python3-minimal``, ``libpython3.11-stdlib``),
  what the init containers run (``dash``, ``coreutils``, ``findutils``, ``grep``),
  ``base-files`` and ``base-passwd``, and the C++ runtime manylinux wheels may link
  (``libstdc++6``), with what they depend on (apt-cache, the first of each set of
  alternatives, as apt takes when none is installed), fetched with ``apt-get download``
  from the host's apt sources (a Debian 12 host: its ``apt-get update`` lists) and
  unpacked with ``dpkg-deb -x``. Maintainer scripts are not run, so what only they use is
  left out (:data:`SCRIPTS_ONLY`); what the ones that matter do is done here (``/etc/passwd``
  and ``/etc/group``, ``/var/lib/dpkg/status``, the bytecode). The documentation and
  translations go, as Debian's own ``-slim`` images leave them out (:data:`SLIM_EXCLUDES`).
- **kata-mem's wheel**, built from this checkout (``pip wheel --no-deps``, from a copy: the
  checkout gets no ``build/``), and its dependencies from PyPI: wheels only, for the image's
  Python (CPython 3.11, ABI cp311) and glibc (libc6's version: manylinux tags up to it),
  installed by this Python's pip into ``/usr/local/lib/python3.11/dist-packages``, where
  Debian's Python looks (its site.py), the console scripts in ``/usr/local/bin``.
- **kata-mem-nri**, the static binary ``scripts/build-go.sh`` builds.

The image's own Python then compiles every module (``compileall``, in a chroot, hashed
.pyc files that are never checked against a source mtime: the image is immutable and its
root read-only) and runs smoke checks: ``kata-mem --version`` says the wheel's version,
every compiled extension module imports, the init container's tools run.

    .venv/bin/python scripts/build_image.py [--name NAME] [--no-compress] [--rebuild] [OUT]

As root (dpkg-deb keeps the packages' owners, and chroot), with a Python 3.11 that has pip
(pip evaluates the dependencies' environment markers for the Python it runs on). OUT
(default ``.cache/image``) receives ``kata-mem.tar`` (its path is printed on stdout),
``contents.txt`` (every Debian package and Python distribution in it, with versions, and
the layers), ``inputs.sha256``, ``debian.json`` (the resolved packages) and ``debs/`` (the
packages, kept for the next build); a build works in ``.build-*`` there, removed after it
(or by the next build, after a kill). Nothing else is written, nothing else removed. The
image is ``NAME:VERSION``: NAME is the one deploy/kubernetes/image/kustomization.yaml sets
(``newName``), VERSION pyproject.toml's, the wheel's.

Three layers, so that a new kata-mem changes only the last: Debian's files, the Python
dependencies, kata-mem itself (its package, scripts and the plugin). Reproducible where it
is cheap: entries sorted, every mtime 0, gzip headers without name or time, pip's
``direct_url.json`` (the temporary path of the wheel) left out.

Cached: ``inputs.sha256`` holds the sha256 of every input (this script and the layout
writer; the Debian packages' names, versions and hashes; the files the wheel is built
from; the Go module's files, the Go version and build-go.sh; the options), and a build
whose inputs match returns at once. The Debian set is resolved again only when apt's lists
or sources change. Not an input: the versions PyPI gives the dependencies, which are those
of the build that wrote the image (``contents.txt``); ``--rebuild`` takes them anew.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import fcntl
import fnmatch
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.oci_image import (  # noqa: E402
    Layer,
    image_config,
    tree_paths,
    write_layer,
    write_layout_tar,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

#: The image's Python, the Containerfile's (python:3.11-slim-bookworm); Debian 12's.
PYTHON = "3.11"
#: The Debian packages asked for; the rest is what they depend on.
ROOTS = (
    "python3-minimal",  # /usr/bin/python3 (the probe's python3) -> python3.11
    f"libpython{PYTHON}-stdlib",  # the standard library beyond the minimal one (asyncio...)
    "dash",  # /bin/sh: the init containers' sh -c
    "coreutils",  # the install's realpath, dirname, install; the uninstall's tr, sort, rm, sleep
    "findutils",  # the uninstall's find
    "grep",  # the uninstall's grep
    "base-files",  # /etc/os-release (what scanners read), the FHS directories
    "base-passwd",  # /etc/passwd and /etc/group's masters: root by name
    # A manylinux wheel may link the system's C++ runtime (PEP 599 lists libstdc++.so.6
    # among the libraries it can assume): google-re2's _re2 does.
    "libstdc++6",
)
#: Depended on only by maintainer scripts, which are not run here: dash's postinst (dpkg's
#: diversions, debianutils' add-shell), base-files' (awk), python3-minimal's (dpkg).
SCRIPTS_ONLY = frozenset({"dpkg", "debianutils", "awk"})
#: What Debian's -slim images (debian:bookworm-slim, python:3.11-slim-bookworm's base) leave
#: out, and keep (debuerreotype scripts/.slimify-excludes and .slimify-includes, applied
#: as dpkg path-exclude/path-include: fnmatch, * matching /).
SLIM_EXCLUDES = (
    "/usr/share/doc/*",
    "/usr/share/groff/*",
    "/usr/share/info/*",
    "/usr/share/linda/*",
    "/usr/share/lintian/overrides/*",
    "/usr/share/locale/*",
    "/usr/share/man/*",
)
SLIM_INCLUDES = (
    "/usr/share/doc/*/copyright",
    "/usr/share/doc/kde/HTML/C/*",
    "/usr/share/gnome/help/*/C/*",
    "/usr/share/locale/all_languages",
    "/usr/share/locale/currency/*",
    "/usr/share/locale/l10n/*",
    "/usr/share/locale/languages",
    "/usr/share/locale/locale.alias",
    "/usr/share/omf/*/*-C.emf",
)
SITE = f"usr/local/lib/python{PYTHON}/dist-packages"
BIN = "usr/local/bin"
PLUGIN = "kata-mem-nri"
#: kata-mem's own files in the image (and its dist-info): its last layer.
OWN = (f"{BIN}/kata-mem", f"{BIN}/kata-mem-shim", f"{BIN}/{PLUGIN}", f"{SITE}/kata_mem")
ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",  # glibc's built-in locale (python:3.11-slim sets the same)
)
#: Where apt keeps its lists and sources (Debian's defaults): the Debian set is resolved
#: again when any of them changes.
APT_STATE = (Path("/var/lib/apt/lists"), Path("/etc/apt"))
IMAGE_SETTING = ROOT / "deploy" / "kubernetes" / "image" / "kustomization.yaml"
DEFAULT_OUT = ROOT / ".cache" / "image"
TAR_NAME = "kata-mem.tar"
#: A build's work directory in OUT (the root filesystem, the wheel, the layers).
WORK_PREFIX = ".build-"


STARTED = time.monotonic()


def log(message: str) -> None:
    """One line on stderr, with the seconds since the start."""
    print(
        f"build-image: {time.monotonic() - STARTED:5.1f} s {message}", file=sys.stderr, flush=True
    )


class BuildError(Exception):
    """The build cannot go on; the message says why, in one line."""


def run(argv: Sequence[str], **options: object) -> str:
    """``argv``'s stdout; :raises BuildError: it failed (with the end of its stderr)."""
    done = subprocess.run(
        list(argv),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        **options,  # type: ignore[call-overload]
    )
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise BuildError(f"{' '.join(argv[:4])}... exited {done.returncode}: {tail}")
    out: str = done.stdout
    return out


# -- Debian -----------------------------------------------------------------------------------


class Package(NamedTuple):
    name: str
    version: str
    arch: str
    sha256: str
    size: int

    @property
    def deb(self) -> str:
        """The file name apt-get download gives it (an epoch's colon is %3a)."""
        return f"{self.name}_{self.version.replace(':', '%3a')}_{self.arch}.deb"


def apt_fingerprint() -> str:
    """What the Debian set depends on: apt's lists and sources (names, sizes, mtimes), and
    what is asked of them."""
    sha = hashlib.sha256(f"{ROOTS} {sorted(SCRIPTS_ONLY)}\n".encode())
    for top in APT_STATE:
        for path in sorted(top.rglob("*")):
            # Not apt's lock (touched by any apt run) nor its downloads in progress.
            if path.is_file() and path.name != "lock" and "partial" not in path.parts:
                st = path.stat()
                sha.update(f"{path} {st.st_size} {st.st_mtime_ns}\n".encode())
    return sha.hexdigest()


def dependency_graph(roots: Iterable[str]) -> dict[str, list[list[str]]]:
    """``apt-cache depends --recurse`` of ``roots``: :func:`parse_depends` of its answer."""
    return parse_depends(
        run(
            [
                "apt-cache",
                "depends",
                "--recurse",
                *(f"--no-{kind}" for kind in ("recommends", "suggests", "conflicts", "breaks")),
                "--no-replaces",
                "--no-enhances",
                *roots,
            ]
        )
    )


def parse_depends(text: str) -> dict[str, list[list[str]]]:
    """Each package's Pre-Depends and Depends in ``apt-cache depends`` output, as groups of
    alternatives (a virtual package as ``<name>``; a line starting ``|`` is or'ed with the
    next)."""
    graph: dict[str, list[list[str]]] = {}
    current: Optional[list[list[str]]] = None
    open_group = False  # the last dependency line began with "|": an alternative follows
    for line in text.splitlines():
        if not line.startswith(" "):
            current = graph.setdefault(line.strip(), [])
            open_group = False
            continue
        match = re.match(r"^ (\|| )(PreDepends|Depends): (\S+)$", line)
        if match is None or current is None:
            continue  # a virtual package's providers (deeper indent)
        name = match.group(3).split(":")[0]  # python3:any -> python3
        if open_group:
            current[-1].append(name)
        else:
            current.append([name])
        open_group = match.group(1) == "|"
    return graph


def resolve() -> list[Package]:
    """The packages of :data:`ROOTS` and everything they need (:data:`SCRIPTS_ONLY` aside),
    at apt's candidate versions. :raises BuildError: a virtual package is needed (say
    which provider to take)."""
    chosen = choose(dependency_graph(ROOTS), ROOTS, SCRIPTS_ONLY)
    shown = run(["apt-cache", "show", "--no-all-versions", *chosen])
    found: dict[str, Package] = {}
    for stanza in shown.strip().split("\n\n"):
        fields = dict(
            line.split(": ", 1)
            for line in stanza.splitlines()
            if ": " in line[:40] and line[0] != " "
        )
        found[fields["Package"]] = Package(
            fields["Package"],
            fields["Version"],
            fields["Architecture"],
            fields["SHA256"],
            int(fields["Size"]),
        )
    missing = sorted(set(chosen) - set(found))
    if missing:
        raise BuildError(f"apt-cache show knows no {', '.join(missing)}: run apt-get update")
    return [found[name] for name in sorted(chosen)]


def choose(
    graph: dict[str, list[list[str]]], roots: Sequence[str], leave_out: frozenset[str]
) -> list[str]:
    """``roots`` and what they depend on in ``graph``, the first of each group of
    alternatives (apt's choice when none is installed), but ``leave_out``. :raises
    BuildError: a virtual package is needed (name its provider in :data:`ROOTS`)."""
    chosen: list[str] = []
    todo = list(roots)
    while todo:
        name = todo.pop(0)
        if name in chosen:
            continue
        chosen.append(name)
        for group in graph.get(name, []):
            first = group[0]
            bare = first.strip("<>")
            if bare in leave_out:
                continue
            if first.startswith("<"):
                raise BuildError(f"{name} needs the virtual package {bare}: name its provider")
            todo.append(first)
    return sorted(chosen)


def sha256_of(path: Path) -> str:
    sha = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            sha.update(chunk)
    return sha.hexdigest()


def download(packages: Sequence[Package], debs: Path) -> None:
    """Every package into ``debs`` (those there already, with the index's hash, are kept);
    the others are removed: they are this script's, from an earlier build."""
    debs.mkdir(parents=True, exist_ok=True)
    wanted = {p.deb: p for p in packages}
    for path in debs.glob("*.deb"):
        if path.name not in wanted or sha256_of(path) != wanted[path.name].sha256:
            path.unlink()
    fetch = [p for p in packages if not (debs / p.deb).exists()]
    if not fetch:
        log(f"Debian: {len(packages)} packages, all downloaded before ({debs})")
        return
    partial = Path(tempfile.mkdtemp(prefix=".partial-", dir=debs))
    try:
        # As root, apt would hand the download to its _apt user, which cannot write here.
        argv = ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root"]
        try:
            run([*argv, *(f"{p.name}={p.version}" for p in fetch)], cwd=partial)
        except BuildError as exc:
            # A mirror keeps only its current versions (a security update replaces the last).
            raise BuildError(f"{exc} (apt's lists out of date? apt-get update)") from exc
        for p in fetch:
            got = partial / p.deb
            if not got.exists() or sha256_of(got) != p.sha256:
                raise BuildError(f"apt-get download gave no {p.deb} with the index's sha256")
            got.replace(debs / p.deb)
            log(f"downloaded {p.name} {p.version} ({p.size / 1e6:.1f} MB)")
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    size = sum(p.size for p in fetch)
    log(f"Debian: downloaded {len(fetch)} of {len(packages)} packages, {size / 1e6:.1f} MB")


def unpack(packages: Sequence[Package], debs: Path, rootfs: Path) -> None:
    """``dpkg-deb -x`` each package into ``rootfs``, then what their maintainer scripts
    would have done that the image needs, and the -slim rules."""
    status = []
    for p in packages:
        deb = debs / p.deb
        run(["dpkg-deb", "-x", str(deb), str(rootfs)])
        control = run(["dpkg-deb", "-f", str(deb)]).rstrip("\n")
        # dpkg's status database: the control fields and the state (dpkg(1), --status);
        # what scanners (trivy, grype) read to list the image's packages.
        lines = control.splitlines()
        status.append("\n".join([lines[0], "Status: install ok installed", *lines[1:]]))
    dpkg = rootfs / "var" / "lib" / "dpkg"
    dpkg.mkdir(parents=True, exist_ok=True)
    (dpkg / "status").write_text("\n\n".join(status) + "\n")
    # base-passwd's postinst (update-passwd) installs its masters on a new system.
    for name in ("passwd", "group"):
        master = rootfs / "usr" / "share" / "base-passwd" / f"{name}.master"
        shutil.copyfile(master, rootfs / "etc" / name)
        (rootfs / "etc" / name).chmod(0o644)
    removed = slim(rootfs)
    log(f"Debian: unpacked {len(packages)} packages, {removed} files left out as -slim does")


def slim(rootfs: Path) -> int:
    """Remove what :data:`SLIM_EXCLUDES` and not :data:`SLIM_INCLUDES` match (files and
    symlinks; directories stay, as dpkg's path-exclude leaves them); how many."""
    removed = 0
    for path in sorted(rootfs.rglob("*")):
        rel = "/" + str(path.relative_to(rootfs))
        if path.is_dir() and not path.is_symlink():
            continue
        if any(fnmatch.fnmatch(rel, p) for p in SLIM_EXCLUDES) and not any(
            fnmatch.fnmatch(rel, p) for p in SLIM_INCLUDES
        ):
            path.unlink()
            removed += 1
    return removed


# -- Python -----------------------------------------------------------------------------------

#: What the wheel is built from (setuptools: the package, its data, the readme, the licence).
WHEEL_INPUTS = ("pyproject.toml", "README.md", "LICENSE", "kata_mem")


def wheel_files() -> list[Path]:
    files = []
    for name in WHEEL_INPUTS:
        path = ROOT / name
        if path.is_dir():
            files += [
                p
                for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            ]
        else:
            files.append(path)
    return sorted(files)


def build_wheel(work: Path, version: str) -> Path:
    """kata-mem's wheel, built by pip from a copy of the checkout's files."""
    src = work / "src"
    for path in wheel_files():
        dest = src / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    dist = work / "dist"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "--wheel-dir",
            str(dist),
            str(src),
        ]
    )
    wheel = dist / f"kata_mem-{version}-py3-none-any.whl"
    if not wheel.exists():
        raise BuildError(
            f"pip wheel wrote {sorted(p.name for p in dist.iterdir())}, not {wheel.name}"
        )
    log(f"built {wheel.name}")
    return wheel


def platform_tags(glibc: tuple[int, int], machine: str) -> list[str]:
    """The manylinux tags a glibc ``glibc`` system takes, newest first (PEP 600; the
    legacy names of PEP 513, 571 and 599 for 2.5, 2.12 and 2.17): pip's --platform takes
    only the tags it is given."""
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags = []
    for minor in range(glibc[1], 4, -1):
        tags.append(f"manylinux_{glibc[0]}_{minor}_{machine}")
        if minor in legacy:
            tags.append(f"{legacy[minor]}_{machine}")
    return tags


def install_python(work: Path, wheel: Path, glibc: tuple[int, int], rootfs: Path) -> None:
    """The wheel and its dependencies into the image's dist-packages, the scripts into
    /usr/local/bin for its /usr/bin/python3."""
    target = work / "site"
    abi = "cp" + PYTHON.replace(".", "")
    argv = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check"]
    argv += ["--no-compile", "--no-warn-script-location", "--target", str(target)]
    argv += ["--python-version", PYTHON, "--implementation", "cp", "--abi", abi]
    for tag in platform_tags(glibc, platform.machine()):
        argv += ["--platform", tag]
    argv += ["--only-binary=:all:", str(wheel)]
    out = run(argv)
    for line in out.splitlines():
        if line.lstrip().startswith(("Downloading", "Using cached")):
            log("PyPI: " + line.strip().split(" (")[0])
    site = rootfs / SITE
    site.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(target / "bin"), str(work / "bin"))
    shutil.move(str(target), str(site))
    bindir = rootfs / BIN
    bindir.mkdir(parents=True, exist_ok=True)
    launcher = f"#!{sys.executable}"
    rewritten: dict[str, tuple[str, int]] = {}
    for script in sorted((work / "bin").iterdir()):
        lines = script.read_bytes().split(b"\n", 1)
        if lines[0].decode() != launcher:
            raise BuildError(f"pip's {script.name} starts {lines[0]!r}, not {launcher}")
        data = b"#!/usr/bin/python3\n" + lines[1]
        (bindir / script.name).write_bytes(data)
        (bindir / script.name).chmod(0o755)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rewritten[script.name] = (f"sha256={digest}", len(data))
    # Each distribution's RECORD as pip would write it for this site-packages: its scripts
    # at ../../../bin (pip's --target wrote them for a lib/pythonX.Y/site-packages two
    # levels down), their new hashes; no direct_url.json (it names the wheel's temporary
    # path on this machine).
    for record in sorted(site.glob("*.dist-info/RECORD")):
        kept = []
        for line in record.read_text().splitlines():
            path = line.rsplit(",", 2)[0]
            if path.endswith(".dist-info/direct_url.json"):
                continue
            if path.startswith("../../bin/"):
                name = path.removeprefix("../../bin/")
                digest, size = rewritten[name]
                kept.append(f"../../../bin/{name},{digest},{size}")
            else:
                kept.append(line)
        record.write_text("\n".join(kept) + "\n")
    for direct_url in site.glob("*.dist-info/direct_url.json"):
        direct_url.unlink()


def distributions(rootfs: Path) -> list[str]:
    """``name version`` of every distribution in the image's dist-packages."""
    found = []
    for meta in sorted((rootfs / SITE).glob("*.dist-info/METADATA")):
        fields = dict(
            line.split(": ", 1)
            for line in meta.read_text().split("\n\n")[0].splitlines()
            if ": " in line
        )
        found.append(f"{fields['Name']} {fields['Version']}")
    return found


# -- the plugin ---------------------------------------------------------------------------------


def go_files() -> list[Path]:
    go = ROOT / "go"
    return sorted(
        p
        for p in go.rglob("*")
        if p.is_file()
        and (
            p.name in ("go.mod", "go.sum")
            or (p.suffix == ".go" and not p.name.endswith("_test.go"))
        )
    )


def build_plugin(work: Path) -> Path:
    bindir = work / "gobin"
    run([str(ROOT / "scripts" / "build-go.sh"), str(bindir)])
    log(f"built {PLUGIN}")
    return bindir / PLUGIN


# -- the image ----------------------------------------------------------------------------------


def chroot(rootfs: Path, *argv: str) -> str:
    """``argv`` run by the image's own files (chroot), in the image's environment."""
    env = dict(e.split("=", 1) for e in ENV)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the checks below write nothing
    return run(["chroot", str(rootfs), *argv], env=env)


def compile_and_check(rootfs: Path, version: str) -> None:
    # The image's own Python compiles its modules: a read-only root filesystem (the
    # DaemonSet's) would otherwise compile every import at every start, in memory.
    # unchecked-hash: never compared with a source mtime (they are all 0 in the layers).
    chroot(
        rootfs,
        "/usr/bin/python3",
        "-m",
        "compileall",
        "-q",
        "--invalidation-mode",
        "unchecked-hash",
        f"/usr/lib/python{PYTHON}",
        "/" + SITE,
    )
    said = chroot(rootfs, "/usr/local/bin/kata-mem", "--version").strip()
    if said != f"kata-mem, version {version}":
        raise BuildError(f"the image's kata-mem --version says {said!r}, not {version}")
    modules = []
    for ext in sorted((rootfs / SITE).rglob("*.so")):
        rel = ext.relative_to(rootfs / SITE)
        modules.append(".".join([*rel.parts[:-1], rel.name.split(".")[0]]))
    chroot(
        rootfs,
        "/usr/bin/python3",
        "-c",
        "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)",
        *modules,
    )
    # What the init containers of deploy/kubernetes/daemonset.yaml (the install) and
    # uninstall/daemonset.yaml run, and the uninstall's idle container.
    tools = ("realpath", "dirname", "install", "find", "grep", "tr", "sort", "rm", "sleep")
    chroot(rootfs, "/bin/sh", "-c", "".join(f"command -v {t} >/dev/null && " for t in tools) + ":")
    log(f"checked in the image: kata-mem {version}, {len(modules)} extension modules, sh")


def layers_of(rootfs: Path, version: str) -> dict[str, list[str]]:
    """The image's paths by layer: Debian's, the Python dependencies (the rest of
    /usr/local), kata-mem's own (:data:`OWN`); each layer also lists the directories above
    its files."""
    order = ("debian", "python", "kata-mem")
    layers: dict[str, set[str]] = {name: set() for name in order}
    own = (*OWN, f"{SITE}/kata_mem-{version}.dist-info")
    for rel in tree_paths(rootfs):
        if any(rel == o or rel.startswith(o + "/") for o in own):
            layer = "kata-mem"
        elif rel == "usr/local" or rel.startswith("usr/local/"):
            layer = "python"
        else:
            layer = "debian"
        layers[layer].add(rel)
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            layers[layer].add("/".join(parts[:depth]))
    return {name: sorted(layers[name]) for name in order}


def image_name() -> str:
    """The image's name as deploy/kubernetes/image/kustomization.yaml sets it (newName)."""
    match = re.search(r"^\s*newName:\s*(\S+)\s*$", IMAGE_SETTING.read_text(), re.M)
    if match is None:
        raise BuildError(f"{IMAGE_SETTING.relative_to(ROOT)} sets no newName: give --name")
    return match.group(1)


def inputs_hash(packages: Sequence[Package], ref: str, compress: bool, go_version: str) -> str:
    sha = hashlib.sha256()
    for path in [
        Path(__file__).resolve(),
        ROOT / "tests" / "support" / "oci_image.py",
        ROOT / "scripts" / "build-go.sh",
        *wheel_files(),
        *go_files(),
    ]:
        sha.update(f"{path.relative_to(ROOT)} {sha256_of(path)}\n".encode())
    for p in packages:
        sha.update(f"{p.name} {p.version} {p.arch} {p.sha256}\n".encode())
    sha.update(f"{ref} compress={compress} {go_version} {platform.machine()}\n".encode())
    return sha.hexdigest()


def packages_for(out: Path) -> list[Package]:
    """:func:`resolve`'s answer, from ``out/debian.json`` while apt's lists are those it
    was resolved with (apt-cache takes seconds to load them)."""
    saved = out / "debian.json"
    fingerprint = apt_fingerprint()
    try:
        doc = json.loads(saved.read_text())
        if doc["apt"] == fingerprint:
            return [Package(*p) for p in doc["packages"]]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    packages = resolve()
    saved.write_text(json.dumps({"apt": fingerprint, "packages": packages}, indent=1) + "\n")
    return packages


def build(out: Path, ref: str, version: str, compress: bool, rebuild: bool) -> Path:
    """The image's tar in ``out``, built unless its inputs are those of the one there."""
    tar = out / TAR_NAME
    packages = packages_for(out)
    go_version = run(["go", "env", "GOVERSION"]).strip()
    key = inputs_hash(packages, ref, compress, go_version)
    stamp = out / "inputs.sha256"
    if not rebuild and tar.exists() and stamp.exists() and stamp.read_text().strip() == key:
        log(f"up to date: {tar} ({ref})")
        return tar
    stamp.unlink(missing_ok=True)
    started = time.monotonic()
    libc6 = next(p for p in packages if p.name == "libc6")
    glibc = tuple(int(x) for x in libc6.version.split("-")[0].split(".")[:2])
    # A build killed midway (SIGKILL, or SIGTERM: Python then runs no finally) leaves its
    # work directory: ours, and no other build runs while this one holds the lock.
    for stale in out.glob(f"{WORK_PREFIX}*"):
        shutil.rmtree(stale)
    work = Path(tempfile.mkdtemp(prefix=WORK_PREFIX, dir=out))
    try:
        rootfs = work / "rootfs"
        rootfs.mkdir(mode=0o755)
        # Three independent fetches at once (network and 2 cores): Debian, PyPI, Go.
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            debian = pool.submit(download, packages, out / "debs")
            wheel = pool.submit(build_wheel, work, version)
            plugin = pool.submit(build_plugin, work)
            debian.result()
            unpack(packages, out / "debs", rootfs)
            install_python(work, wheel.result(), (glibc[0], glibc[1]), rootfs)
            (rootfs / BIN / PLUGIN).write_bytes(plugin.result().read_bytes())
            (rootfs / BIN / PLUGIN).chmod(0o755)
        compile_and_check(rootfs, version)
        what = {
            "debian": f"Debian 12 packages: {', '.join(p.name for p in packages)}",
            "python": f"Python {PYTHON} dependencies of kata-mem {version} from PyPI",
            "kata-mem": f"kata-mem {version} (its wheel) and {PLUGIN}",
        }
        paths = layers_of(rootfs, version)
        with concurrent.futures.ThreadPoolExecutor(len(paths)) as pool:
            futures = [
                pool.submit(
                    write_layer,
                    rootfs,
                    paths[name],
                    work / f"{name}.layer",
                    compress=compress,
                    created_by=what[name],
                )
                for name in paths
            ]
            layers = [f.result() for f in futures]
        config = image_config(
            layers,
            entrypoint=["kata-mem"],
            cmd=["serve"],
            env=ENV,
            labels={
                "org.opencontainers.image.title": "kata-mem",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.licenses": "Apache-2.0",
            },
        )
        digest = write_layout_tar(tar, ref, layers, config)
        contents = [f"image {ref} manifest {digest}"]
        contents += [f"layer {lay.digest} {lay.size} {lay.created_by}" for lay in layers]
        contents += [f"debian {p.name} {p.version}" for p in packages]
        contents += [f"python {d}" for d in distributions(rootfs)]
        (out / "contents.txt").write_text("\n".join(contents) + "\n")
        stamp.write_text(key + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log(
        f"built {ref} in {time.monotonic() - started:.0f} s: {tar} "
        f"({tar.stat().st_size / 1e6:.0f} MB; layers {', '.join(_mb(lay) for lay in layers)})"
    )
    return tar


def _mb(layer: Layer) -> str:
    return f"{layer.size / 1e6:.1f} MB"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help="directory")
    parser.add_argument("--name", help="the image's name (default: the kustomization's)")
    parser.add_argument("--no-compress", action="store_true", help="layers as plain tars")
    parser.add_argument("--rebuild", action="store_true", help="even when the inputs match")
    args = parser.parse_args(argv)
    try:
        if os.geteuid() != 0:
            raise BuildError("run it as root: dpkg-deb keeps the packages' owners, and chroot")
        if sys.version_info[:2] != tuple(int(x) for x in PYTHON.split(".")):
            raise BuildError(
                f"run it with a Python {PYTHON}, the image's (this is "
                f"{platform.python_version()}): pip evaluates the dependencies' markers "
                "for the Python it runs on"
            )
        for tool in ("apt-get", "apt-cache", "dpkg-deb", "chroot", "go"):
            if shutil.which(tool) is None:
                raise BuildError(f"{tool} not found: the build needs a Debian 12 host with Go")
        version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
        ref = f"{args.name or image_name()}:{version}"
        out: Path = args.out
        out.mkdir(parents=True, exist_ok=True)
        with (out / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time into OUT
            tar = build(out.resolve(), ref, version, not args.no_compress, args.rebuild)
    except BuildError as exc:
        log(f"error: {exc}")
        return 1
    print(tar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
