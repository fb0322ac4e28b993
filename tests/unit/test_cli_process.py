"""The ``binlake`` command as a process, without a database server: the rough edges an operator
meets first — a metrics port in use, an address that is not MySQL/MariaDB, a peer that never
answers, ``reconnect.max_attempts``, and SIGTERM while the process is still starting."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def binlake() -> str:
    script = shutil.which("binlake") or shutil.which("binlake",
                                                     path=sysconfig.get_path("scripts"))
    if script is None:
        pytest.skip("the binlake console script is not installed")
    return script


def environment(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["BINLAKE_CONFIG"] = str(config)
    return env


def write_config(tmp_path: Path, port: int, **sections: dict[str, object]) -> Path:
    settings: dict[str, dict[str, object]] = {
        "server": {"host": "127.0.0.1", "port": port, "tls_mode": "disabled"},
        "replica": {"server_id": 4242},
        "lake": {"path": str(tmp_path / "lake")},
        "metrics": {"address": ""},
    }
    for section, values in sections.items():
        settings.setdefault(section, {}).update(values)
    lines = []
    for section, values in settings.items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            lines.append(f"{key} = {value!r}".replace("'", '"'))
    path = tmp_path / "binlake.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FakeService:
    """A local TCP service that answers every connection with ``banner`` (nothing: silent) and
    closes it, counting the connections."""

    def __init__(self, banner: bytes, *, hold: float = 0.0) -> None:
        self.banner = banner
        self.hold = hold
        self.connections = 0
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self._socket.settimeout(0.2)
        self.port = int(self._socket.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            with conn:
                if self.banner:
                    conn.sendall(self.banner)
                time.sleep(self.hold)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._socket.close()


@pytest.fixture
def service() -> Iterator[type[FakeService]]:
    made: list[FakeService] = []

    def make(banner: bytes, **kw: float) -> FakeService:
        made.append(FakeService(banner, **kw))
        return made[-1]

    yield make  # type: ignore[misc]
    for one in made:
        one.close()


def test_metrics_port_in_use_is_one_line_naming_the_key(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = write_config(tmp_path, closed_port(),
                              metrics={"address": f"127.0.0.1:{port}"})
        result = subprocess.run([binlake(), "run"], env=environment(config),
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines()
              if line.startswith(("binlake: error", "  fix:"))]
    assert errors == [
        f"binlake: error: metrics.address: cannot listen on 127.0.0.1:{port} for /metrics: "
        "Address already in use",
        "  fix: another process listens there (a second binlake?): give this one its own "
        "metrics.address (BINLAKE_METRICS_ADDRESS, --metrics-address), or an empty one to turn "
        "the endpoint off"]


@pytest.mark.parametrize(("banner", "seen"), [
    (b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n", "it sent 'SSH-2.0-OpenSSH_9.2p1 Debian-2'"),
    (b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
     "it sent 'HTTP/1.1 400 Bad Request'"),
])
def test_not_a_mysql_server(banner: bytes, seen: str, service: type[FakeService],
                            tmp_path: Path) -> None:
    fake = service(banner)
    config = write_config(tmp_path, fake.port)
    where = f"127.0.0.1:{fake.port}"
    fix = ("fix: server.host and server.port (--host, --port) name another service: point them "
           "at the MySQL/MariaDB server (port 3306 by default)")
    check = subprocess.run([binlake(), "check"], env=environment(config), capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 1
    assert [" ".join(line.split()) for line in check.stdout.splitlines()[1:3]] == [
        f"FAIL connect NotMySQLServer: not a MySQL/MariaDB server at {where}: {seen}", fix]
    run = subprocess.run([binlake(), "run"], env=environment(config), capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 3  # permanent: retrying reaches the same service
    assert run.stderr.splitlines()[-3:] == [
        f"binlake: error: NotMySQLServer: not a MySQL/MariaDB server at {where}: {seen}",
        f"  {fix}", "  (run with -v for the traceback)"]
    assert fake.connections == 2  # one each: never retried


def test_a_peer_that_never_greets_times_out_with_a_fix(service: type[FakeService],
                                                      tmp_path: Path) -> None:
    fake = service(b"", hold=1.0)
    config = write_config(tmp_path, fake.port, server={"connect_timeout": 0.5})
    check = subprocess.run([binlake(), "check"], env=environment(config), capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 1
    assert [" ".join(line.split()) for line in check.stdout.splitlines()[1:3]] == [
        f"FAIL connect ConnectTimeout: connected to 127.0.0.1:{fake.port}, but the greeting, TLS "
        "and authentication took longer than 0.5 s (a server that sends nothing first is not "
        "MySQL/MariaDB, e.g. HTTP; or an overloaded server)",
        "fix: check server.host and server.port, and that no firewall drops the connection; for "
        "a slow or distant server raise server.connect_timeout"]


def test_max_attempts_counts_connection_attempts(service: type[FakeService],
                                                 tmp_path: Path) -> None:
    """reconnect.max_attempts = 3: exactly three connection attempts, then it gives up."""
    fake = service(b"")  # accepts and closes at once: the connection is lost, a retryable error
    config = write_config(tmp_path, fake.port, reconnect={
        "max_attempts": 3, "initial_delay": 0.05, "max_delay": 0.1})
    run = subprocess.run([binlake(), "run"], env=environment(config), capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    assert fake.connections == 3
    (giving_up,) = [line for line in run.stderr.splitlines() if "giving up" in line]
    assert "giving up after 3 attempts: " in giving_up


def test_max_attempts_on_a_closed_port(tmp_path: Path) -> None:
    port = closed_port()
    config = write_config(tmp_path, port, reconnect={
        "max_attempts": 3, "initial_delay": 0.05, "max_delay": 0.1}, log={"level": "debug"})
    run = subprocess.run([binlake(), "run"], env=environment(config), capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 1, run.stderr
    refused = f"cannot connect to 127.0.0.1:{port}: "
    # one log line per attempt (the first a WARNING, then DEBUG, the last the giving up)
    attempts = [line for line in run.stderr.splitlines()
                if refused in line and "binlake.daemon" in line]
    assert len(attempts) == 3, run.stderr
    giving_up = attempts[-1]
    assert "giving up after 3 attempts: ConnectError: " + refused in giving_up
    assert run.stderr.splitlines()[-3].startswith("binlake: error: ConnectError: " + refused)


def _catches_sigterm(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.3])
def test_sigterm_while_starting_exits_0(delay: float, tmp_path: Path) -> None:
    """From binlake's first line on, SIGTERM stops `binlake run` cleanly — while it imports,
    loads its configuration, opens the lake or retries a server that is down. The signal is
    sent ``delay`` seconds after the process can catch it (its SigCgt mask says so), which is
    before it imports trio: only the interpreter's own start-up comes earlier."""
    config = write_config(tmp_path, closed_port(), reconnect={"initial_delay": 0.2,
                                                               "max_delay": 0.2})
    process = subprocess.Popen([binlake(), "run"], env=environment(config),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not _catches_sigterm(process.pid):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.001)
        time.sleep(delay)
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "Traceback" not in err and "binlake: error" not in err


def test_the_early_handler_comes_before_the_heavy_imports() -> None:
    """replica.cli installs the handler before it imports trio (what made the window ~0.3 s)."""
    code = ("import sys, signal; sys.argv = ['binlake', 'run']; "
            "import replica.core.early_stop as e; "
            "assert 'trio' not in sys.modules; "
            "e.install_when_launched('__main__'); "
            "assert signal.getsignal(signal.SIGTERM) is e._record; "
            "assert 'trio' not in sys.modules; print('ok')")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout == "ok\n", result.stderr
    cli_source = (ROOT / "replica" / "cli.py").read_text()
    first_code = cli_source.index("\nfrom replica.core import early_stop\n")
    assert first_code < cli_source.index("\nimport argparse")
    assert first_code < cli_source.index("\nimport trio")


def test_run_imports_pyarrow_without_numpy(service: type[FakeService],
                                           tmp_path: Path) -> None:
    """`binlake run` never converts to numpy, so pyarrow is loaded without it (~0.12 s of
    start-up CPU, sinks/parquet/lean_import.py): seen in the libraries the daemon has mapped
    while it waits for a (silent) server's greeting, Arrow's Parquet library among them."""
    fake = service(b"", hold=20.0)
    config = write_config(tmp_path, fake.port, server={"connect_timeout": 20},
                          reconnect={"max_attempts": 1})
    process = subprocess.Popen([binlake(), "run"], env=environment(config),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while fake.connections == 0:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        maps = Path(f"/proc/{process.pid}/maps").read_text()
    finally:
        process.kill()
        process.wait()
    libraries = {os.path.basename(line.split()[-1]) for line in maps.splitlines()
                 if line.endswith(".so") or ".so." in line}
    assert any(name.startswith("libparquet.so") for name in libraries), sorted(libraries)
    assert any(name.startswith("_parquet.") for name in libraries), sorted(libraries)
    assert not [name for name in libraries if name.startswith("_multiarray_umath")]


def test_import_pyarrow_lean_leaves_numpy_importable() -> None:
    code = ("import sys; from sinks.parquet.lean_import import import_pyarrow_lean as lean; "
            "assert lean() is True; import pyarrow.parquet, pyarrow.compute; "
            "assert 'numpy' not in sys.modules; import numpy; "
            "assert lean() is False; print('ok')")
    assert _fresh_python(code) == "ok\n"


def _fresh_python(code: str) -> str:
    """What ``code`` prints in a fresh interpreter importing this checkout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_run_modules_leave_out_what_landing_never_calls() -> None:
    """Start-up CPU: the daemon's modules do not import ``pyarrow.compute`` (it wraps ~290
    functions at import; rows.py calls its two through ``pyarrow._compute``), building the
    parser does not look up the package version (only ``--version`` does), pyarrow is
    imported without cloudpickle (lean_import.HIDDEN), and the DDL redaction patterns compile
    at their first use, not at import."""
    code = ("import sys; from sinks.parquet.lean_import import import_pyarrow_lean as lean; "
            "assert lean() is True; import replica.core.daemon, replica.cli as cli; "
            "cli.build_parser(['run']); from protocol.binlog import ddl; "
            "assert ddl._all_secret_patterns.cache_info().currsize == 0; "
            "print(sorted(m for m in ('pyarrow.compute', 'importlib.metadata', 'numpy', "
            "'cloudpickle') if m in sys.modules))")
    assert _fresh_python(code) == "[]\n"
