"""Logging for the daemon: readable lines or JSON lines, a reopenable file, and no secrets.

* ``human`` (default): ``2026-11-21T08:17:44.123Z INFO replica.core.session: message key=value`` —
  what a person tails in a terminal.
* ``json``: one object per line (``time``, ``level``, ``logger``, ``message``, any ``extra=``
  fields, ``exception``) — what log shippers in a sidecar setup parse without regexes.

Structured context goes in ``extra``: ``log.info("connected", extra={"gtid": "0-1-5"})``; both
formats print it.

A log file is reopened on SIGHUP, so ``logrotate`` can move it away and signal the daemon (the
usual ``postrotate kill -HUP``) without losing lines or copying.

Redaction: a filter on the handler replaces every registered secret (the server password) with
``***`` in the message, its arguments, extra fields, exception text and stack — whichever logger
emitted the record, including third-party ones. :class:`replica.config.Secret` already masks
itself; the filter is the net under it, for a password that reached a log call as plain text (for
example inside a server's error message or a traceback). The same filter also replaces the
password literals of any SQL statement quoted in a record (``IDENTIFIED BY '…'``, ``PASSWORD('…')``,
… — see :func:`protocol.binlog.ddl.redact_secrets`), at every level, debug included, so a
statement that reaches a log line (an error naming it, a warning about it) never shows another
account's password.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from collections.abc import Iterable
from typing import IO, Any

import trio

from protocol.binlog.ddl import redact_secrets
from replica.config import LogConfig

__all__ = [
    "RedactingFilter",
    "HumanFormatter",
    "JsonFormatter",
    "ReopenableFileHandler",
    "LogSetup",
    "setup_logging",
    "reopen_logs_on_sighup",
    "REDACTED",
]

REDACTED = "***"

#: Attributes every LogRecord has; anything else on a record came from ``extra=``.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}

#: ``extra`` fields whose names say they hold a secret are masked whatever their value.
_SECRET_FIELD_WORDS = ("password", "passwd", "secret", "token")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS
            and not k.startswith("_")}


class RedactingFilter(logging.Filter):
    """Replaces registered secrets in a record, in place, before any formatter sees it."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self._secrets: list[str] = []
        for secret in secrets:
            self.add_secret(secret)

    def add_secret(self, secret: str) -> None:
        if secret and secret not in self._secrets:
            self._secrets.append(secret)
            # longest first, so a secret containing another is masked whole
            self._secrets.sort(key=len, reverse=True)

    def redact(self, text: str) -> str:
        text = redact_secrets(text)
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()  # merges args; a bad format raises here as it would later
        record.msg = self.redact(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redact(record.stack_info)
        for name, value in _extras(record).items():
            if any(word in name.lower() for word in _SECRET_FIELD_WORDS):
                setattr(record, name, REDACTED)
            elif isinstance(value, str):
                setattr(record, name, self.redact(value))
            elif not isinstance(value, int | float | bool | type(None)):
                setattr(record, name, self.redact(str(value)))
        return True


def _utc_timestamp(created: float) -> str:
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


class HumanFormatter(logging.Formatter):
    """``<UTC time> <LEVEL> <logger>: <message> key=value ...`` plus an indented traceback."""

    def format(self, record: logging.LogRecord) -> str:
        line = (f"{_utc_timestamp(record.created)} {record.levelname:<7} {record.name}: "
                f"{record.getMessage()}")
        extras = _extras(record)
        if extras:
            line += " " + " ".join(f"{k}={_human_value(v)}" for k, v in extras.items())
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + record.stack_info
        return line


def _human_value(value: Any) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or not text) else text


class JsonFormatter(logging.Formatter):
    """One JSON object per line; ``extra`` fields become top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": _utc_timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _extras(record).items():
            document.setdefault(key, value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            document["exception"] = record.exc_text
        if record.stack_info:
            document["stack"] = record.stack_info
        return json.dumps(document, default=str, ensure_ascii=False)


class ReopenableFileHandler(logging.FileHandler):
    """A file handler whose file can be closed and opened again by path (after logrotate)."""

    def __init__(self, path: str) -> None:
        super().__init__(path, mode="a", encoding="utf-8")

    def reopen(self) -> None:
        self.acquire()
        try:
            old = self.stream
            self.stream = self._open()
            if old is not None:
                old.close()
        finally:
            self.release()


class LogSetup:
    """What :func:`setup_logging` installed: the handler, its redaction filter, and reopen()."""

    def __init__(self, handler: logging.Handler, redactor: RedactingFilter) -> None:
        self.handler = handler
        self.redactor = redactor

    def add_secret(self, secret: str) -> None:
        self.redactor.add_secret(secret)

    def reopen(self) -> None:
        """Reopen the log file (no-op when logging to a stream)."""
        if isinstance(self.handler, ReopenableFileHandler):
            self.handler.reopen()


def setup_logging(config: LogConfig, *, secrets: Iterable[str] = (),
                  stream: IO[str] | None = None) -> LogSetup:
    """Configure the root logger from ``config``; replaces what a previous call installed.

    Args:
      config: format, level and optional file.
      secrets: values that must never appear in a record (``Config.secrets()``).
      stream: where to write when ``config.file`` is unset (stderr by default).
    """
    handler: logging.Handler
    if config.file:
        handler = ReopenableFileHandler(config.file)
    else:
        handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if config.format == "json" else HumanFormatter())
    redactor = RedactingFilter(secrets)
    handler.addFilter(redactor)
    handler.set_name("binlake")

    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == "binlake":
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(_LEVELS[config.level])
    logging.captureWarnings(True)
    global _current
    _current = LogSetup(handler, redactor)
    return _current


_current: LogSetup | None = None


def current_setup() -> LogSetup | None:
    """What the last :func:`setup_logging` installed (the daemon reopens it on SIGHUP)."""
    return _current


async def reopen_logs_on_sighup(setup: LogSetup, *,
                                task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Trio task: reopen the log file each time the process gets SIGHUP. Runs until cancelled."""
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            setup.reopen()
            logging.getLogger(__name__).info("log file reopened on SIGHUP")
