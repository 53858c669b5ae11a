"""The DaemonSet's probes (deploy/kubernetes/daemonset.yaml) against a real ``kata-mem
serve``: the script the kubelet runs passes while the service answers /healthz with 200,
and fails once nothing listens on the socket."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.paths import REPO
from tests.support.service import start

DAEMONSET = REPO / "deploy" / "kubernetes" / "daemonset.yaml"


def probe_script(sock: Path) -> str:
    spec = yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"]
    (serve,) = [c for c in spec["containers"] if c["name"] == "kata-mem"]
    (served,) = [a.split("=", 1)[1] for a in serve["args"] if a.startswith("--socket=")]
    argv = serve["livenessProbe"]["exec"]["command"]
    assert argv[:2] == ["python3", "-c"]
    script: str = argv[2]
    return script.replace(served, str(sock))


def run_probe(sock: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", probe_script(sock)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_probe_passes_on_a_live_service_and_fails_without_one(tmp_path: Path) -> None:
    service = start(tmp_path)
    try:
        alive = run_probe(service.socket)
        assert alive.returncode == 0, alive.stderr
    finally:
        assert service.stop() == 0, service.stderr()
    gone = run_probe(service.socket)
    assert gone.returncode != 0
