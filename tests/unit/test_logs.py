"""replica.observe.logs: human and JSON formats, redaction of secrets everywhere, reopen on SIGHUP."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from replica.config import LogConfig, load_config
from replica.observe.logs import LogSetup, reopen_logs_on_sighup, setup_logging

PASSWORD = "Tr0ub4dor&3-unique"


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def capture(fmt: str, level: str = "info") -> tuple[io.StringIO, LogSetup]:
    stream = io.StringIO()
    setup = setup_logging(LogConfig(format=fmt, level=level), secrets=[PASSWORD], stream=stream)
    return stream, setup


@pytest.mark.usefixtures("restore_root_logger")
def test_human_format_has_time_level_logger_message_and_extras() -> None:
    stream, _ = capture("human")
    logging.getLogger("replica.core.session").info("connected to %s", "db:3306",
                                              extra={"gtid": "0-1-5", "note": "two words"})
    line = stream.getvalue().strip()
    assert line.endswith('INFO    replica.core.session: connected to db:3306 gtid=0-1-5 '
                         'note="two words"')
    assert line[:4].isdigit() and line[23] == "Z"


@pytest.mark.usefixtures("restore_root_logger")
def test_json_format_is_one_object_per_line() -> None:
    stream, _ = capture("json")
    log = logging.getLogger("replica.core.pipeline")
    log.info("landed %d rows", 12, extra={"table": "shop.orders", "rows": 12})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        log.exception("flush failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "info" and first["logger"] == "replica.core.pipeline"
    assert first["message"] == "landed 12 rows"
    assert first["table"] == "shop.orders" and first["rows"] == 12
    assert first["time"].endswith("Z")
    assert second["level"] == "error" and "RuntimeError: boom" in second["exception"]


@pytest.mark.usefixtures("restore_root_logger")
def test_level_filters_records() -> None:
    stream, _ = capture("human", level="warning")
    logging.getLogger("x").info("hidden")
    logging.getLogger("x").warning("shown")
    assert "hidden" not in stream.getvalue() and "shown" in stream.getvalue()


@pytest.mark.parametrize("fmt", ["human", "json"])
@pytest.mark.usefixtures("restore_root_logger")
def test_password_never_reaches_the_output(fmt: str) -> None:
    stream, _ = capture(fmt)
    log = logging.getLogger("anything.third_party")
    log.warning("auth with %s failed", PASSWORD)
    log.warning(f"inline {PASSWORD} in the message")
    log.warning("extra field", extra={"password": "other-pw", "detail": f"x{PASSWORD}y",
                                      "obj": [PASSWORD]})
    try:
        raise ValueError(f"server said: bad password {PASSWORD}")
    except ValueError:
        log.exception("with traceback")
    log.warning("stack", stack_info=True, extra={"hint": PASSWORD})
    config = load_config(env={"BINLAKE_REPLICA_SERVER_ID": "1",
                              "BINLAKE_SERVER_PASSWORD": PASSWORD})
    log.warning("config %r", config)
    output = stream.getvalue()
    assert PASSWORD not in output
    assert "other-pw" not in output
    assert output.count("***") >= 7


@pytest.mark.usefixtures("restore_root_logger")
def test_secrets_added_later_and_setup_is_idempotent() -> None:
    stream, setup = capture("human")
    setup.add_secret("late-secret")
    logging.getLogger("x").info("late-secret here")
    assert "late-secret" not in stream.getvalue()
    stream2, _ = capture("human")
    logging.getLogger("x").info("once")
    assert "once" not in stream.getvalue() and stream2.getvalue().count("once") == 1
    ours = [h for h in logging.getLogger().handlers if h.get_name() == "binlake"]
    assert len(ours) == 1


@pytest.mark.usefixtures("restore_root_logger")
async def test_sighup_reopens_the_log_file(tmp_path: Path) -> None:
    path = tmp_path / "binlake.log"
    setup = setup_logging(LogConfig(format="json", file=str(path)))
    log = logging.getLogger("replica.test")
    log.info("before rotation")
    async with trio.open_nursery() as nursery:
        await nursery.start(reopen_logs_on_sighup, setup)
        os.rename(path, tmp_path / "binlake.log.1")  # what logrotate does
        log.info("after rename, before HUP")  # still goes to the moved file
        os.kill(os.getpid(), signal.SIGHUP)
        with trio.fail_after(5):
            while not path.exists():
                await trio.sleep(0.01)
        log.info("after HUP")
        nursery.cancel_scope.cancel()
    rotated = (tmp_path / "binlake.log.1").read_text()
    fresh = path.read_text()
    assert "before rotation" in rotated and "after rename, before HUP" in rotated
    assert "after HUP" in fresh and "before rotation" not in fresh
    assert all(json.loads(line) for line in fresh.splitlines())


@pytest.mark.usefixtures("restore_root_logger")
def test_log_records_at_every_level_redact_statements() -> None:
    for fmt in ("human", "json"):
        out = io.StringIO()
        setup_logging(LogConfig(format=fmt, level="debug"), stream=out)
        logger = logging.getLogger("binlake.test")
        for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR):
            logger.log(level, "statement %s", "CREATE USER u IDENTIFIED BY 'lg1'",
                       extra={"query": "SET PASSWORD = PASSWORD('lg2')"})
        try:
            raise ValueError("ALTER USER u IDENTIFIED BY 'lg3'")
        except ValueError:
            logger.exception("failed")
        text = out.getvalue()
        # 4 levels x (message + extra field), the exception text and its traceback's source line
        assert text.count("<redacted>") == 10, text
        assert "lg1" not in text and "lg2" not in text and "lg3" not in text
