"""``binlake health``: ask the running daemon's endpoint whether it is alive (or ready).

The container image's HEALTHCHECK runs it, so the probe finds the endpoint wherever the
configuration put it — ``metrics.address`` from a mounted file, the environment or the image's
default — instead of assuming a port. It is a *liveness* check by default (``/healthz``: the
process serves requests), because an orchestrator restarts what fails it and a daemon catching up
on hours of binlog must not be restarted for being behind. ``--ready`` asks ``/readyz`` instead
(connected and at most ``metrics.ready_max_lag`` behind): for "send traffic / start dependants"
decisions, such as a Kubernetes readinessProbe written as an exec probe.

Exit status: 0 when the endpoint answered 200, 1 when it answered otherwise or not at all, 2 when
``metrics.address`` is empty (there is no endpoint to ask).
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request

from replica.config import Config, ConfigError

__all__ = ["add_arguments", "probe_url", "run"]

#: Seconds to wait for the answer (Docker's HEALTHCHECK --timeout is 5 s in the image).
TIMEOUT = 4.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ready", action="store_true",
                        help="ask /readyz (connected and not too far behind) instead of /healthz")


def probe_url(config: Config, path: str) -> str:
    """Where a local probe reaches the endpoint: a wildcard bind address is asked on loopback."""
    if not config.metrics.address:
        raise ConfigError("is empty: the daemon serves no /healthz or /readyz to ask",
                          key="metrics.address",
                          hint="set metrics.address (the image's default is 0.0.0.0:9108)")
    host, port = config.metrics.host, config.metrics.port
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{path}"


def run(config: Config, args: argparse.Namespace | None = None) -> int:
    """Entry point of ``binlake health`` (called by :mod:`replica.cli`)."""
    url = probe_url(config, "/readyz" if getattr(args, "ready", False) else "/healthz")
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT) as response:  # noqa: S310 - http only
            body = response.read().decode("utf-8", "replace").strip()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace").strip()
        print(f"{url}: {exc.code} {body}", file=sys.stdout)
        return 1
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"{url}: no answer ({reason})", file=sys.stdout)
        return 1
    print(f"{url}: 200 {body}")
    return 0
