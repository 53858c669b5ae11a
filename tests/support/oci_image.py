"""Container images as OCI image layouts in a tar, built here: no registry is reachable and
there is no Docker engine. ``ctr images import`` takes the tar; so do ``skopeo copy
oci-archive:TAR ...`` and ``podman load``.

    write_image_tar(pause_binary, out_tar, "localhost/kata-mem-test/pause:1")  # one binary
    layer = write_layer(rootfs, paths, blob_path, compress=True, created_by="...")
    write_layout_tar(out_tar, ref, [layer, ...], image_config([layer, ...], ...))

The layout (image-spec v1.1): ``oci-layout``, ``index.json`` naming the image (containerd
reads ``io.containerd.image.name``; ``org.opencontainers.image.ref.name`` holds the tag),
and under ``blobs/sha256/`` the layers (tars of files, each optionally gzipped), the image
config and the manifest. Reproducible: a layer's entries are sorted by path, every
timestamp is zero (``EPOCH``), owners are numeric (no user or group names), gzip headers
carry no name and no time; the same files always give the same bytes and digests.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import platform
import stat
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Optional, Union

LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
LAYER_GZIP_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
#: Every entry's mtime.
EPOCH = 0
#: What a compressed layer costs: level 6 is gzip's default (and podman's, Go's
#: gzip.DefaultCompression).
GZIP_LEVEL = 6


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = EPOCH
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.mtime = EPOCH
    tar.addfile(info)


def go_arch() -> str:
    """This machine's architecture as Go and OCI name it."""
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


# -- layers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layer:
    """A layer blob written to disk, and what the manifest and config say of it."""

    path: Path
    media_type: str
    #: The blob's digest (of the gzip when compressed) and size: the manifest's.
    digest: str
    size: int
    #: The digest of the uncompressed tar: the config's ``rootfs.diff_ids``.
    diff_id: str
    #: The image history's line for it.
    created_by: str


class _Hashing(io.RawIOBase):
    """A writable stream that hashes and counts what goes through it to ``sink``."""

    def __init__(self, sink: Union[IO[bytes], io.BufferedIOBase]) -> None:
        self.sink = sink
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += len(view)
        self.sink.write(view)
        return len(view)


def tree_paths(root: Path) -> list[str]:
    """Every path under ``root`` (relative, ``/``-separated, without ``root`` itself), in
    the order a layer lists them: bytewise, so that each directory precedes its contents."""
    found = []
    for parent, dirs, files in os.walk(root):
        rel = os.path.relpath(parent, root)
        for name in dirs + files:
            found.append(name if rel == "." else f"{rel}/{name}")
    return sorted(found, key=os.fsencode)


def write_layer(
    root: Path,
    paths: Iterable[str],
    out: Path,
    *,
    compress: bool,
    created_by: str,
    owner: Optional[tuple[int, int]] = None,
) -> Layer:
    """A layer of ``root``'s ``paths`` (relative to it; directories are not descended,
    list their contents too), written to ``out``. Each entry keeps its type, mode and
    owner (``owner`` = (uid, gid) replaces every owner), with the mtime :data:`EPOCH`;
    entries come in bytewise order of their paths. A file with several links in the
    layer is stored once and linked to after. Only directories, regular files and
    symlinks are taken: :raises ValueError: a device, fifo or socket."""
    seen: dict[tuple[int, int], str] = {}
    with out.open("wb") as raw:
        blob = _Hashing(raw)
        zipped = (
            gzip.GzipFile(filename="", mode="wb", fileobj=blob, compresslevel=GZIP_LEVEL, mtime=0)
            if compress
            else None
        )
        plain = _Hashing(zipped if zipped is not None else raw)
        with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for rel in sorted(paths, key=os.fsencode):
                path = root / rel
                st = path.lstat()
                info = tarfile.TarInfo(rel)
                info.mode = stat.S_IMODE(st.st_mode)
                info.uid, info.gid = owner if owner is not None else (st.st_uid, st.st_gid)
                info.uname = info.gname = ""
                info.mtime = EPOCH
                data: Optional[IO[bytes]] = None
                if stat.S_ISDIR(st.st_mode):
                    info.type = tarfile.DIRTYPE
                elif stat.S_ISLNK(st.st_mode):
                    info.type = tarfile.SYMTYPE
                    info.linkname = os.readlink(path)
                elif stat.S_ISREG(st.st_mode):
                    first = seen.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
                    if first is not None:
                        info.type = tarfile.LNKTYPE
                        info.linkname = first
                    else:
                        seen[(st.st_dev, st.st_ino)] = rel
                        info.size = st.st_size
                        data = path.open("rb")
                else:
                    raise ValueError(f"{path}: not a directory, regular file or symlink")
                try:
                    tar.addfile(info, data)
                finally:
                    if data is not None:
                        data.close()
        if zipped is not None:
            zipped.close()
    diff_id = "sha256:" + plain.sha.hexdigest()
    if compress:
        return Layer(
            out, LAYER_GZIP_TYPE, "sha256:" + blob.sha.hexdigest(), blob.size, diff_id, created_by
        )
    return Layer(out, LAYER_TYPE, diff_id, plain.size, diff_id, created_by)


# -- the image -----------------------------------------------------------------------------


def image_config(
    layers: Sequence[Layer],
    *,
    entrypoint: Sequence[str],
    cmd: Sequence[str] = (),
    env: Sequence[str] = (),
    labels: Optional[Mapping[str, str]] = None,
    working_dir: str = "/",
) -> dict[str, Any]:
    """The image config (image-spec config.md) of ``layers``: what a runtime starts
    (``Entrypoint``, ``Cmd``, ``Env``), the layers' diff ids, one history entry each."""
    config: dict[str, Any] = {"Entrypoint": list(entrypoint), "WorkingDir": working_dir}
    if cmd:
        config["Cmd"] = list(cmd)
    if env:
        config["Env"] = list(env)
    if labels:
        config["Labels"] = dict(labels)
    return {
        "architecture": go_arch(),
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created_by": layer.created_by} for layer in layers],
    }


def write_layout_tar(
    out: Path, ref: str, layers: Sequence[Layer], config: Mapping[str, Any]
) -> str:
    """The OCI layout of the image ``ref`` (``registry/name:tag``) with ``layers`` and
    ``config``, as a tar at ``out`` (replaced whole; the layers' files are copied in);
    return the manifest's digest. ``oci-layout`` and ``index.json`` come first, so that
    :func:`read_index` finds them without reading the blobs."""
    if ":" not in ref.rsplit("/", 1)[-1]:
        raise ValueError(f"{ref!r}: give the tag (name:tag)")
    config_bytes = _json(config)
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {
                "mediaType": CONFIG_TYPE,
                "digest": _digest(config_bytes),
                "size": len(config_bytes),
            },
            "layers": [
                {"mediaType": layer.media_type, "digest": layer.digest, "size": layer.size}
                for layer in layers
            ],
        }
    )
    index = _json(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_TYPE,
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": go_arch(), "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": ref,
                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
                    },
                }
            ],
        }
    )
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")  # parallel writers: one each
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}))
        _add(tar, "index.json", index)
        _add_dir(tar, "blobs")
        _add_dir(tar, "blobs/sha256")
        blobs: dict[str, bytes] = {}
        for blob in (config_bytes, manifest):
            blobs[_digest(blob)] = blob
        for name in sorted(blobs):
            _add(tar, "blobs/sha256/" + name.removeprefix("sha256:"), blobs[name])
        added = set(blobs)
        for layer in layers:
            if layer.digest in added:  # two identical layers: one blob
                continue
            added.add(layer.digest)
            info = tarfile.TarInfo("blobs/sha256/" + layer.digest.removeprefix("sha256:"))
            info.size = layer.size
            info.mode = 0o644
            info.mtime = EPOCH
            info.uname = info.gname = "root"
            with layer.path.open("rb") as data:
                tar.addfile(info, data)
    tmp.replace(out)
    return _digest(manifest)


def read_index(tar_path: Path) -> dict[str, Any]:
    """The ``index.json`` of a layout tar :func:`write_layout_tar` wrote."""
    with tarfile.open(tar_path, mode="r|") as tar:
        for member in tar:
            if member.name == "index.json":
                data = tar.extractfile(member)
                assert data is not None
                index: dict[str, Any] = json.loads(data.read())
                return index
    raise ValueError(f"{tar_path}: no index.json")


def image_ref(tar_path: Path) -> str:
    """The name containerd gives the image of a layout tar (``io.containerd.image.name``)."""
    (manifest,) = read_index(tar_path)["manifests"]
    ref: str = manifest["annotations"]["io.containerd.image.name"]
    return ref


def read_blob(tar_path: Path, digest: str) -> bytes:
    """One blob of a layout tar (the config, the manifest: small ones)."""
    with tarfile.open(tar_path, mode="r:") as tar:
        data = tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
        assert data is not None
        return data.read()


# -- a one-binary image ----------------------------------------------------------------------


def write_image_tar(binary: Path, out: Path, ref: str) -> str:
    """The image ``ref`` holding ``binary`` alone, as ``/<its name>``, root's, its
    entrypoint, written as a layout tar at ``out``; return the manifest's digest."""
    layer_path = out.with_name(f"{out.name}.{os.getpid()}.layer")
    try:
        layer = write_layer(
            binary.parent,
            [binary.name],
            layer_path,
            compress=False,
            created_by=f"{binary.name}, built here",
            owner=(0, 0),
        )
        config = image_config([layer], entrypoint=["/" + binary.name])
        return write_layout_tar(out, ref, [layer], config)
    finally:
        layer_path.unlink(missing_ok=True)
