"""A real quantd process on a free port, for the Python client's tests.

The binary comes from $QUANTD_SERVER_BIN (CTest passes $<TARGET_FILE:quantd>).
"""

import os
import re
import signal
import subprocess
import threading
import time
from typing import List, Optional

SOURCE_DIR = os.environ.get(
    "QUANTD_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
DIGITS_DIR = os.path.join(SOURCE_DIR, "examples", "digits")

_LISTENING = re.compile(r"listening on [^ ]*:([0-9]+) ")


class QuantdServer:
    """Starts quantd with --port=0 (a free port) and waits for its
    "listening on HOST:PORT" line. Stops it with SIGTERM on stop()."""

    def __init__(self, extra_flags: Optional[List[str]] = None, startup_timeout: float = 30.0):
        binary = os.environ.get("QUANTD_SERVER_BIN")
        if not binary:
            raise RuntimeError("QUANTD_SERVER_BIN is not set (the path of the quantd binary)")
        self.log: List[str] = []
        self._port_found = threading.Event()
        self.port = -1
        self._process = subprocess.Popen(
            [binary, "--port=0", "--metrics_port=-1", "--host=127.0.0.1", "--threads=2",
             "--shutdown_grace=2s"] + (extra_flags or []),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Keep reading the log so the server never blocks on a full pipe.
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        if not self._port_found.wait(startup_timeout) or self.port < 0:
            self.stop()
            raise RuntimeError("quantd did not start:\n" + "".join(self.log))

    def _read_log(self) -> None:
        for line in self._process.stdout:
            self.log.append(line)
            match = _LISTENING.search(line)
            if match and self.port < 0:
                self.port = int(match.group(1))
                self._port_found.set()
        self._port_found.set()  # Exited before listening.

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._reader.join(timeout=5)
        self._process.stdout.close()


def measured(what: str, seconds: float) -> None:
    """Timings are printed, never asserted (shared CI machines)."""
    print(f"measured: {what}: {seconds * 1000:.1f} ms", flush=True)


class Stopwatch:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
