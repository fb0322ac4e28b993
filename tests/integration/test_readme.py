"""The README's examples work as written: its minimal ``binlake.toml`` loads into the settings it
claims, and its three Spark snippets (changes, streaming, current state) run against a lake with
the rows it says (only the lake's path and the stream's checkpoint swapped for the test's)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from protocol.binlog.coltypes import FieldType as T
from replica.config import load_config
from sinks.parquet import ParquetSink
from sinks.parquet.testing import StreamBuilder, col

README = Path(__file__).resolve().parents[2] / "README.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(encoding="utf-8"),
                      re.MULTILINE | re.DOTALL)


def test_the_minimal_config_loads(tmp_path: Path) -> None:
    (toml,) = blocks("toml")
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    path = tmp_path / "binlake.toml"
    path.write_text(toml.replace("/run/secrets/binlake-password", str(secret)))
    config = load_config(path, env={})
    assert (config.server.host, config.server.user, config.server.tls_mode) == (
        "db.internal", "binlake", "verify-ca")
    assert config.server.password is not None and config.server.password.reveal() == "s3cret"
    assert (config.replica.server_id, config.start.from_, config.lake.path) == (
        4242, "snapshot", "/var/lib/binlake")


def _orders_lake(lake: Path) -> None:
    """shop.orders: three inserts, an update, a delete — current state ids 1 and 3."""
    b = StreamBuilder()
    orders = b.table("shop", "orders", [col(0, T.LONG, "id", pk=True),
                                        col(1, T.VARCHAR, "item", charset=45)])
    sink = ParquetSink(str(lake))
    sink.open()
    for item in [b.begin(), b.insert(orders, [(1, "tea"), (2, "cake"), (3, "jam")]), b.commit(),
                 b.begin(), b.update(orders, [((1, "tea"), (1, "green tea"))]), b.commit(),
                 b.begin(), b.delete(orders, [(2, "cake")]), b.commit()]:
        sink.handle(item)
    sink.close()


@pytest.mark.spark
def test_the_spark_snippets_run(tmp_path: Path, spark: Any,
                                capsys: pytest.CaptureFixture[str]) -> None:
    (snippet,) = [b for b in blocks("python") if "read_current_state" in b]
    lake, ck = tmp_path / "lake", tmp_path / "ck"
    _orders_lake(lake)
    code = snippet.replace('"/var/lib/binlake"', repr(str(lake))).replace('"/tmp/ck"', repr(str(ck)))
    assert code.count(repr(str(lake))) == 3 and code.count(repr(str(ck))) == 1
    names: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), names)  # noqa: S102 - the README's own example
    query = names["query"]
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert names["changes"].count() == 5  # 3 inserts, an update, a delete
    printed = capsys.readouterr().out
    # the current state's table, as show() prints it: exactly its two rows
    assert re.search(r"\| id\|\s+item\|\n\+-+\+-+\+\n\|\s+1\|green tea\|\n\|\s+3\|\s+jam\|\n",
                     printed), printed
    state = {(r["id"], r["item"]) for r in names["read_current_state"](
        spark, str(lake), "shop", "orders").collect()}
    assert state == {(1, "green tea"), (3, "jam")}
