"""Write a one-binary container image as a `docker save` archive, without Docker.

    python3 static_image.py NAME BINARY PATH_IN_IMAGE > image.tar

The image holds only the static binary (at PATH_IN_IMAGE, its entrypoint), so node.sh can
import the pause and CoreDNS images into containerd (`ctr images import`) with nothing pulled
and no Docker engine running.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path


def _layer(binary: Path, path_in_image: str) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(path_in_image.lstrip("/"))
        data = binary.read_bytes()
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def image_archive(name: str, binary: Path, path_in_image: str) -> bytes:
    layer = _layer(binary, path_in_image)
    layer_digest = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": [path_in_image]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        },
        sort_keys=True,
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": [name], "Layers": [f"{layer_digest}.tar"]}]
    ).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for member, data in (
            (f"{layer_digest}.tar", layer),
            (config_name, config),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    sys.stdout.buffer.write(image_archive(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
