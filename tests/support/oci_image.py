"""A one-binary container image as an OCI image layout in a tar, built here: no registry is
reachable and there is no Docker engine. ``ctr images import`` takes the tar.

    write_image_tar(pause_binary, out_tar, "localhost/kata-mem-test/pause:1")

The layout (image-spec v1.1): ``oci-layout``, ``index.json`` naming the image (containerd
reads ``io.containerd.image.name``; ``org.opencontainers.image.ref.name`` holds the tag),
and under ``blobs/sha256/`` one uncompressed layer holding the binary as ``/<name>``, the
image config (its entrypoint) and the manifest. Every timestamp is zero and every owner
root, so the same binary always gives the same bytes and digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import tarfile
from pathlib import Path
from typing import Any

LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.mtime = 0
    tar.addfile(info)


def go_arch() -> str:
    """This machine's architecture as Go and OCI name it."""
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def image_layout(binary: Path, ref: str) -> dict[str, bytes]:
    """The files of the layout (path in the tar -> bytes) for ``binary`` as the image
    ``ref`` (``registry/name:tag``), with ``/<binary's name>`` as its entrypoint."""
    if ":" not in ref.rsplit("/", 1)[-1]:
        raise ValueError(f"{ref!r}: give the tag (name:tag)")
    entry = "/" + binary.name
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as layer_tar:
        _add(layer_tar, binary.name, binary.read_bytes(), mode=0o755)
    layer = buf.getvalue()
    config = _json(
        {
            "architecture": go_arch(),
            "os": "linux",
            "config": {"Entrypoint": [entry], "WorkingDir": "/"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": _digest(config), "size": len(config)},
            "layers": [{"mediaType": LAYER_TYPE, "digest": _digest(layer), "size": len(layer)}],
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
    files = {"oci-layout": _json({"imageLayoutVersion": "1.0.0"}), "index.json": index}
    for blob in (layer, config, manifest):
        files["blobs/sha256/" + _digest(blob).removeprefix("sha256:")] = blob
    return files


def write_image_tar(binary: Path, out: Path, ref: str) -> str:
    """Write the layout of :func:`image_layout` as a tar at ``out`` (replaced whole);
    return the manifest's digest."""
    files = image_layout(binary, ref)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")  # parallel writers: one each
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _add_dir(tar, "blobs")
        _add_dir(tar, "blobs/sha256")
        for name, data in files.items():
            _add(tar, name, data)
    tmp.replace(out)
    return str(json.loads(files["index.json"])["manifests"][0]["digest"])
