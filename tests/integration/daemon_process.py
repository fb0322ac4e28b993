"""``binlake run`` as a subprocess, the way an operator runs it: a TOML file plus environment.

:class:`DaemonProcess` writes the config file, starts ``python -m replica.cli run --config FILE``
with the password in ``BINLAKE_SERVER_PASSWORD`` (never on the command line), captures stdout and
stderr to files, and offers what end-to-end tests need: wait for a log line, find the metrics
port, SIGTERM with a deadline, SIGKILL, and a check that a secret never appeared in any output.
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import trio

from replica.config import (
    Config,
    FilterConfig,
    LakeConfig,
    MetricsConfig,
    ReplicaConfig,
    Secret,
    ServerConfig,
    StartConfig,
)
from replica.core.daemon import Daemon
from sinks.parquet.commit import CHECKPOINT
from tests.servers.handle import ServerHandle

__all__ = ["DaemonProcess", "DaemonExited", "STOP_TIMEOUT", "binlog_end", "daemon_settings",
           "catch_up", "catch_up_config", "free_server_id", "http_get", "metric", "read_checkpoint", "trusted_tls", "unique_db"]

REPO = Path(__file__).resolve().parents[2]
_METRICS_LINE = re.compile(r"metrics on http://([^\s/]+):(\d+)/metrics")
_next_server_id = 7000 + os.getpid() % 1000 * 10


def free_server_id() -> int:
    """A replica server_id no other daemon of this test session uses."""
    global _next_server_id
    _next_server_id += 1
    return _next_server_id


class DaemonExited(AssertionError):
    """The daemon exited while the test expected it to run."""


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is JSON-compatible for our values


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of a GET; HTTP errors are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text, or None."""
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(3))
    return None


def read_checkpoint(lake: str | os.PathLike[str]) -> dict[str, Any] | None:
    try:
        return json.loads(Path(lake, CHECKPOINT).read_text())
    except FileNotFoundError:
        return None


class DaemonProcess:
    """One ``binlake run`` subprocess.

    Args:
        workdir: where the config file and the captured output go.
        settings: ``{section: {key: value}}`` written to the TOML file.
        password: put in ``BINLAKE_SERVER_PASSWORD``.
        env: more environment variables.
        tty: give the daemon a pseudo-terminal as stderr (what a person running it in a
            terminal has); its output is still collected in the stderr file.
    """

    def __init__(self, workdir: str | os.PathLike[str], settings: dict[str, dict[str, Any]], *,
                 password: str | None, env: dict[str, str] | None = None,
                 name: str = "daemon", tty: bool = False) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.settings = settings
        self.password = password
        self.extra_env = env or {}
        self.name = name
        self.tty = tty
        self._tty_copier: threading.Thread | None = None
        self.config_path = self.workdir / f"{name}.toml"
        self.config_path.write_text(self._toml())
        self.runs = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.stdout_path = self.workdir / f"{name}.stdout"
        self.stderr_path = self.workdir / f"{name}.stderr"
        self._stderr_offset = 0

    def _toml(self) -> str:
        lines = []
        for section, values in self.settings.items():
            lines.append(f"[{section}]")
            lines += [f"{key} = {_toml_value(v)}" for key, v in values.items()]
            lines.append("")
        return "\n".join(lines)

    @property
    def argv(self) -> list[str]:
        return [sys.executable, "-m", "replica.cli", "run", "--config", str(self.config_path)]

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
        if self.password is not None:
            env["BINLAKE_SERVER_PASSWORD"] = self.password
        env.update(self.extra_env)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        return env

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> DaemonProcess:
        assert self.process is None or self.process.poll() is not None, "already running"
        self.runs += 1
        # Output of every run is appended, so a test can check all of it at the end.
        with open(self.stdout_path, "ab") as out, open(self.stderr_path, "ab") as err:
            self._stderr_offset = err.tell()
            if not self.tty:
                self.process = subprocess.Popen(self.argv, stdout=out, stderr=err,
                                                env=self._env(), cwd=self.workdir,
                                                start_new_session=True)
                return self
            leader, follower = pty.openpty()
            try:
                self.process = subprocess.Popen(self.argv, stdout=out, stderr=follower,
                                                env=self._env(), cwd=self.workdir,
                                                start_new_session=True)
            finally:
                os.close(follower)
        self._tty_copier = threading.Thread(target=self._copy_tty, args=(leader,), daemon=True)
        self._tty_copier.start()
        return self

    def _copy_tty(self, leader: int) -> None:
        """Drain the pseudo-terminal into the stderr file (else the daemon blocks on a full
        terminal buffer)."""
        with open(self.stderr_path, "ab", buffering=0) as err:
            while True:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # EIO: the daemon closed its side
                    break
                if not chunk:
                    break
                err.write(chunk.replace(b"\r\n", b"\n"))
        os.close(leader)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        """Raise :class:`DaemonExited` (with its stderr) if the daemon is not running."""
        if not self.running:
            code = self.process.returncode if self.process else None
            raise DaemonExited(f"{self.name} exited with {code}:\n{self.run_stderr()[-4000:]}")

    def wait(self, timeout: float) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not exit within {timeout} s:\n"
                                 f"{self.run_stderr()[-4000:]}") from None

    def terminate(self, timeout: float, sig: int = signal.SIGTERM) -> tuple[int, float]:
        """SIGTERM (or ``sig``); returns (exit code, seconds it took)."""
        assert self.process is not None
        started = time.monotonic()
        self.process.send_signal(sig)
        code = self.wait(timeout)
        if self._tty_copier is not None:
            self._tty_copier.join(5)
        return code, time.monotonic() - started

    def kill(self) -> None:
        """SIGKILL, no chance to flush (a crash)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    # --- output ----------------------------------------------------------------------------------

    def stderr(self) -> str:
        """Everything every run wrote to stderr."""
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    def run_stderr(self) -> str:
        """What the current (or last) run wrote to stderr."""
        with open(self.stderr_path, "rb") as f:
            f.seek(self._stderr_offset)
            return f.read().decode(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 20.0, *, since: int = 0,
                 alive: bool = True) -> re.Match[str]:
        """Wait until this run's stderr (from offset ``since``) matches ``pattern``."""
        compiled = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            match = compiled.search(self.run_stderr(), since)
            if match:
                return match
            if alive:
                self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: no {pattern!r} in stderr within {timeout} s:"
                                     f"\n{self.run_stderr()[-4000:]}")
            time.sleep(0.1)

    def metrics_url(self, timeout: float = 20.0) -> str:
        match = self.wait_for(_METRICS_LINE.pattern, timeout)
        return f"http://{match.group(1)}:{match.group(2)}"

    def assert_secret_never_shown(self, secret: str) -> None:
        for path in (self.stdout_path, self.stderr_path, self.config_path):
            if path.exists():
                assert secret not in path.read_text(errors="replace"), f"password in {path.name}"


# --- configs for test daemons ------------------------------------------------------------

STOP_TIMEOUT = 5.0


def binlog_end(server: ServerHandle) -> tuple[str, int]:
    status = "SHOW MASTER STATUS" if server.is_mariadb else "SHOW BINARY LOG STATUS"
    row = server.sql(status)[0]
    assert row[0] is not None and row[1] is not None
    return row[0], int(row[1])


def catch_up_config(server: ServerHandle, lake: str | os.PathLike[str],
                    start: tuple[str, int], *, include: tuple[str, ...] = (),
                    **filters: Any) -> Config:
    """An in-process daemon's config that streams from ``start`` to the binlog's end and stops
    (``replica.stop_at_end``), as the replication user over the unix socket, metrics off."""
    user = server.users["repl"]
    return Config(
        replica=ReplicaConfig(server_id=free_server_id(), stop_at_end=True),
        server=ServerConfig(socket=server.socket, user=user.name,
                            password=Secret(user.password), tls_ca=server.tls_ca),
        start=StartConfig(from_="file", file=start[0], pos=start[1]),
        filter=FilterConfig(include=include, **filters),
        lake=LakeConfig(path=os.fspath(lake)),
        metrics=MetricsConfig(address=""),
    )


async def catch_up(config: Config, timeout: float = 120) -> Daemon:
    """Run the daemon of ``config`` in this process until it has caught up; return it."""
    daemon = Daemon(config)
    with trio.fail_after(timeout):
        assert await daemon.run() == 0
    return daemon


def daemon_settings(server: ServerHandle, lake: Path, database: str, *, port: int | None = None,
                    log_format: str = "human", overrides: dict[str, dict[str, Any]] | None = None,
                    ) -> dict[str, dict[str, Any]]:
    """A config for a test daemon: fast heartbeats, reconnects and flushes; only ``database``
    lands; a new lake starts at the server's current end."""
    file, pos = binlog_end(server)
    settings: dict[str, dict[str, Any]] = {
        "server": {"host": "127.0.0.1", "port": port or server.port, "user": "repl",
                   "connect_timeout": 3.0, "read_timeout": 5.0},
        "replica": {"server_id": free_server_id(), "heartbeat_period": 1.0,
                    "stop_timeout": STOP_TIMEOUT},
        "start": {"from": "file", "file": file, "pos": pos},
        "filter": {"include": [database]},
        "lake": {"path": str(lake), "flush_interval": 0.3},
        "reconnect": {"initial_delay": 0.2, "max_delay": 1.0, "healthy_after": 2.0},
        "metrics": {"address": "127.0.0.1:0", "ready_max_lag": 30.0},
        "log": {"format": log_format, "level": "info"},
    }
    for section, values in (overrides or {}).items():
        settings.setdefault(section, {}).update(values)
    return settings


def unique_db(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def trusted_tls(server: ServerHandle) -> dict[str, str]:
    """Verified TLS for MySQL, as an operator of a remote server configures it: trust the
    server's own self-signed CA (the default tls_mode works on loopback too; see test_auth)."""
    if server.is_mariadb:
        return {}
    ca = Path(server.datadir, "ca.pem")
    assert ca.exists(), f"{ca}: MySQL's auto-generated CA is missing"
    return {"tls_mode": "verify-ca", "tls_ca": str(ca)}
