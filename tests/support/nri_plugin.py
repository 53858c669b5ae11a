"""kata-mem-nri as a real process: the NRI plugin scripts/build-go.sh built, connected to a
node's NRI socket (tests/support/node.py) and to a real ``kata-mem serve``
(tests/support/service.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Optional

from tests.support.paths import REPO
from tests.support.waits import wait_until

#: Where scripts/build-go.sh puts the plugin (scripts/test builds it before pytest).
PLUGIN = Path(os.environ.get("KATA_MEM_NRI_BIN", REPO / ".cache" / "bin" / "kata-mem-nri"))


def plugin_missing() -> Optional[str]:
    """Why the plugin cannot run here, or None."""
    if not PLUGIN.is_file():
        return f"{PLUGIN} is not built: run scripts/build-go.sh"
    return None


class NriPlugin:
    """One kata-mem-nri: started, killed (as a crash), started again; its log is kept."""

    def __init__(
        self,
        nri_socket: Path,
        service_socket: Path,
        handlers: Mapping[str, Path],
        sockets: Mapping[str, str],
        log: Path,
        *extra: str,
    ) -> None:
        self.argv = [
            str(PLUGIN),
            f"-nri-socket={nri_socket}",
            f"-socket={service_socket}",
            *(f"-handler={name}={path}" for name, path in handlers.items()),
            *(f"-qmp-socket={runtime}={path}" for runtime, path in sockets.items()),
            *extra,
        ]
        self.log_path = log
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self._log: Optional[IO[bytes]] = None

    def start(self, timeout: float = 20) -> NriPlugin:
        """Start it and wait until the runtime has synchronized it (its log says so)."""
        before = self.synchronized()
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log
        )
        wait_until(
            lambda: self._alive() and self.synchronized() > before,
            lambda: f"kata-mem-nri synchronized:\n{self.log()}",
            timeout,
        )
        return self

    def _alive(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"kata-mem-nri exited {self.proc.returncode}:\n{self.log()}")
        return True

    def synchronized(self) -> int:
        """How often the runtime has synchronized the plugin (once per connection)."""
        return self.log().count("msg=synchronized")

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close()

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def lines(self, event: str, pod: str) -> list[str]:
        """The plugin's log lines about ``event`` of ``pod``."""
        return [
            line
            for line in self.log().splitlines()
            if f"msg={event} " in line + " " and f"pod={pod}" in line
        ]

    def wait_log(self, text: str, timeout: float = 20) -> None:
        start = time.monotonic()
        wait_until(
            lambda: text in self.log(),
            lambda: (
                f"{text!r} in kata-mem-nri's log after {time.monotonic() - start:.1f} s:\n"
                f"{self.log()}"
            ),
            timeout,
        )
