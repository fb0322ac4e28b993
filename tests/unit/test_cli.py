"""replica.cli: help everywhere, exit codes, one-line errors with a fix, lazy command modules."""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from protocol import errors
from replica import cli
from replica.config import Config

ENV = {"BINLAKE_REPLICA_SERVER_ID": "11"}


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("BINLAKE_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr("replica.config.DEFAULT_CONFIG_PATH", str(tmp_path / "absent.toml"))
    monkeypatch.setenv("BINLAKE_REPLICA_SERVER_ID", ENV["BINLAKE_REPLICA_SERVER_ID"])


@pytest.fixture
def fake_module(monkeypatch: pytest.MonkeyPatch,
                restore_logging: None) -> Iterator[Callable[..., types.ModuleType]]:
    def install(name: str, run: Callable[..., Any] | None = None,
                add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
                ) -> types.ModuleType:
        module = types.ModuleType(name)
        if run is not None:
            module.run = run  # type: ignore[attr-defined]
        if add_arguments is not None:
            module.add_arguments = add_arguments  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
        return module

    yield install


@pytest.fixture
def restore_logging() -> Iterator[None]:
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.mark.parametrize("argv", [["--help"], *([name, "--help"] for name in cli.COMMANDS)])
def test_help_everywhere(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.run(argv)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: binlake" in out and "exit codes" in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in ([], ["frobnicate"], ["run", "--no-such-flag"]):
        with pytest.raises(SystemExit) as info:
            cli.run(argv)
        assert info.value.code == cli.EXIT_USAGE


def test_config_error_is_one_line_with_the_fix(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BINLAKE_REPLICA_SERVER_ID")
    assert cli.run(["run"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("binlake: error: replica.server_id: is required (1..4294967295): every "
                      "replica needs a server_id of its own")
    assert err[1].startswith("  fix: ") and "BINLAKE_REPLICA_SERVER_ID" in err[1]
    assert len(err) == 2

    assert cli.run(["check", "--port", "many"]) == cli.EXIT_USAGE
    assert "server.port: expected an integer, got 'many' (from flag --port)" in \
        capsys.readouterr().err

    assert cli.run(["run", "--set", "nonsense"]) == cli.EXIT_USAGE


def test_password_on_the_command_line_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["run", "--set", "server.password=hunter2"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "hunter2" not in err and "BINLAKE_SERVER_PASSWORD" in err


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_command_has_its_module(name: str) -> None:
    """No placeholder commands: each one's module exists, runs, and declares its own options
    (the commands that take their arguments raw have at least one option of their own)."""
    import importlib

    module_name, takes, _help = cli.COMMANDS[name]
    module = importlib.import_module(module_name)
    assert callable(module.run)
    if takes == "args":
        assert callable(module.add_arguments)


def test_run_gets_config_with_flags_over_env(fake_module: Callable[..., Any],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Config] = []
    fake_module("replica.core.daemon", run=lambda config: seen.append(config))
    monkeypatch.setenv("BINLAKE_SERVER_PORT", "3307")
    monkeypatch.setenv("BINLAKE_SERVER_HOST", "envhost")
    assert cli.run(["run", "--port", "3308", "--set", "lake.flush_interval=10s",
                    "--log-format", "json"]) == 0
    (config,) = seen
    assert config.server.port == 3308 and config.server.host == "envhost"
    assert config.lake.flush_interval == 10.0 and config.log.format == "json"


def test_async_run_and_return_codes(fake_module: Callable[..., Any]) -> None:
    async def run(config: Config) -> int:
        import trio

        await trio.sleep(0)
        return 1

    fake_module("replica.commands.check", run=run)
    assert cli.run(["check"]) == 1


def test_status_does_not_need_a_server_id(fake_module: Callable[..., Any],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BINLAKE_REPLICA_SERVER_ID")
    fake_module("replica.commands.status", run=lambda config: 0)
    assert cli.run(["status"]) == 0


@pytest.mark.parametrize(
    ("exc", "code", "fix"),
    [
        (errors.AccessDenied(1045, "28000", "Access denied for user 'repl'"), 3, "password"),
        (errors.MissingPrivilege(1227, "42000", "need REPLICATION SLAVE"), 3, "GRANT"),
        (errors.GtidPurged(1236, "HY000", "purged"), 3, "new lake"),
        (errors.DuplicateServerId(4052, "HY000", "same id"), 3, "server_id"),
        (ConnectionRefusedError(111, "Connection refused"), 1, "listening"),
        (RuntimeError("a bug"), 1, None),
        (ExceptionGroup("nursery", [errors.GtidPurged(1236, "", "purged")]), 3, "new lake"),
    ],
)
def test_failures_map_to_exit_codes_and_fixes(exc: BaseException, code: int, fix: str | None,
                                              fake_module: Callable[..., Any],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    def run(config: Config) -> None:
        raise exc

    fake_module("replica.core.daemon", run=run)
    assert cli.run(["run"]) == code
    err = capsys.readouterr().err
    assert err.startswith("binlake: error: ")
    assert "Traceback" not in err
    if fix:
        assert "  fix: " in err and fix in err
    assert "run with -v" in err

    assert cli.run(["run", "-v"]) == code
    assert "Traceback" in capsys.readouterr().err


def test_keyboard_interrupt(fake_module: Callable[..., Any]) -> None:
    def run(config: Config) -> None:
        raise KeyboardInterrupt

    fake_module("replica.core.daemon", run=run)
    assert cli.run(["run"]) == cli.EXIT_INTERRUPTED


def test_password_masked_in_error_output(fake_module: Callable[..., Any],
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BINLAKE_SERVER_PASSWORD", "s3cret-pw-xyz")

    def run(config: Config) -> None:
        raise errors.AccessDenied(1045, "28000", "weird server echoing s3cret-pw-xyz")

    fake_module("replica.core.daemon", run=run)
    assert cli.run(["run", "-v"]) == 3
    assert "s3cret-pw-xyz" not in capsys.readouterr().err


def test_decode_and_demo_take_their_arguments(fake_module: Callable[..., Any]) -> None:
    from replica.commands import decode

    seen: list[argparse.Namespace] = []
    fake_module("replica.commands.decode", run=seen.append, add_arguments=decode.add_arguments)
    assert cli.run(["decode", "a.000001", "b.000002"]) == 0
    assert seen[-1].files == ["a.000001", "b.000002"]

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--rows", type=int, default=10)

    fake_module("replica.commands.demo", run=seen.append, add_arguments=add_arguments)
    assert cli.run(["demo", "--rows", "5"]) == 0
    assert seen[-1].rows == 5


def test_console_script_is_installed() -> None:
    result = subprocess.run([sys.executable, "-m", "replica.cli", "--version"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.startswith("binlake ")


def test_fatal_error_is_one_json_line_when_logs_are_json(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import json as _json

    from replica.cli import run as cli_run

    monkeypatch.setenv("BINLAKE_LOG_FORMAT", "json")
    monkeypatch.setenv("BINLAKE_LAKE_FLUSH_ROWS", "not-a-number")
    code = cli_run(["status", "--no-server"])
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    document = _json.loads(lines[0])
    assert document["level"] == "error" and "lake.flush_rows" in document["message"]


def test_sigterm_before_the_daemon_listens_is_recorded_not_fatal() -> None:
    import os
    import signal

    from replica.core import early_stop

    previous = signal.getsignal(signal.SIGTERM)
    try:
        early_stop.install()
        os.kill(os.getpid(), signal.SIGTERM)
        assert early_stop.requested()
    finally:
        signal.signal(signal.SIGTERM, previous)
        early_stop._requested = False


def test_insecure_transport_fix_line_is_the_plugins_own() -> None:
    from protocol.auth import AuthContext, ClearPassword
    from protocol.errors import InsecureTransport
    from replica.cli import hint_for

    with pytest.raises(InsecureTransport) as info:
        ClearPassword(b"pw", b"", AuthContext()).start()
    assert hint_for(info.value) == info.value.fix and "RSA" not in str(info.value.fix)
    assert hint_for(InsecureTransport("x")) == ("use TLS (server.tls_mode = verify-ca with "
                                                "server.tls_ca) or the unix socket (server.socket)")


def test_server_id_zero_names_the_valid_range(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["run", "--server-id", "0"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "binlake: error: replica.server_id: must be between 1 and 4294967295, got 0 (0 is not a "
        "valid replica id) (from flag --server-id)",
        "  fix: choose an N in 1..4294967295 unused by the server and its other replicas"]


def test_commands_take_only_the_flags_they_use(capsys: pytest.CaptureFixture[str]) -> None:
    """status never registers, streams or serves metrics: flags for that are usage errors, not
    silently ignored; --set of a section it does not use is refused the same way."""
    for flag in ("--server-id", "--start-from", "--metrics-address"):
        with pytest.raises(SystemExit) as info:
            cli.run(["status", flag, "5"])
        assert info.value.code == cli.EXIT_USAGE
        assert f"unrecognized arguments: {flag} 5" in capsys.readouterr().err
    assert cli.run(["status", "--set", "replica.server_id=5"]) == cli.EXIT_USAGE
    assert capsys.readouterr().err.splitlines() == [
        "binlake: error: `binlake status` does not use replica.* settings, got --set "
        "replica.server_id",
        "  fix: it uses lake, log, server"]
    with pytest.raises(SystemExit):
        cli.run(["compact", "--host", "db"])
    assert "unrecognized arguments: --host db" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.run(["check", "--metrics-address", ":1"])
    capsys.readouterr()


def test_tls_mode_help_lists_auto_as_the_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.run(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("--tls-mode MODE auto (the default: preferred on loopback and unix sockets, "
            "required elsewhere), disabled, preferred, required, verify-ca or verify-identity "
            "(server.tls_mode)") in help_text


@pytest.mark.parametrize(("file_format", "env", "flags", "json_line"), [
    ("json", {}, [], True),  # the file decides when nothing above it does
    ("json", {"BINLAKE_LOG_FORMAT": "human"}, [], False),  # the environment over the file
    ("human", {"BINLAKE_DEFAULT_LOG_FORMAT": "json"}, [], False),  # a default under it
    (None, {"BINLAKE_DEFAULT_LOG_FORMAT": "json"}, [], True),
    ("human", {"BINLAKE_LOG_FORMAT": "json"}, ["--log-format", "human"], False),  # the flag
    ("human", {}, ["--set", "log.format=json"], True),
    ("json", {"BINLAKE_LOG_FORMAT": "nonsense"}, [], True),  # a bad value is passed over
])
def test_the_fatal_error_line_follows_log_format_as_the_config_would(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
        file_format: str | None, env: dict[str, str], flags: list[str], json_line: bool) -> None:
    """The configuration fails to load (another key is bad), yet ``log.format`` is taken with
    the configuration's own precedence: built-in, default variable, file, environment, flags."""
    config = tmp_path / "binlake.toml"
    config.write_text(f'[log]\nformat = "{file_format}"\n' if file_format else "")
    for name, value in {**env, "BINLAKE_LAKE_FLUSH_ROWS": "not-a-number"}.items():
        monkeypatch.setenv(name, value)
    assert cli.run(["status", "--no-server", "--config", str(config), *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith("{") is json_line, lines
