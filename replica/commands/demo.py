"""``binlake demo``: the whole product on a laptop, in one command.

1. start a sandbox MariaDB on loopback (installing Debian's ``mariadb-server`` if it is missing),
2. give it a small shop database with rows in it, then ``RESET MASTER``: like a production
   server, its binlog no longer holds how those rows got there,
3. run the daemon with ``start.from = "snapshot"`` until the tables' existing rows have landed
   (as ``R`` rows) and it has caught up (``replica.stop_at_end``); then run the rest of the shop
   workload (inserts, updates, a primary-key change, deletes, a rolled-back transaction, an
   ``ALTER TABLE``) and the daemon again, which resumes from its checkpoint,
4. read the lake back with Spark and print, per table, the change log by operation and the
   current state next to what ``SELECT`` says on the server — they must agree.

Nothing outside the sandbox's temporary directory and the lake directory is touched. The demo
only ever replaces a lake it made itself: it writes ``DEMO_MARKER`` into every lake it creates and
refuses any other non-empty directory, so a mistyped ``--lake`` can never wipe a real lake.

Server provisioning is developer tooling (:mod:`devtools.sandbox`), not part of the installed
package: the demo runs from a checkout (``scripts/demo.sh``) and says so when it is not there.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import trio

from replica.config import load_config
from replica.core.daemon import Daemon
from sinks.parquet.status import DEMO_MARKER

TABLES = ("customers", "products", "orders")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lake", default=os.path.abspath("demo-lake"),
                        help="directory for the demo's lake: new, empty, or made by an earlier "
                             "demo (then replaced); default: ./demo-lake")
    parser.add_argument("--rows", type=int, default=500,
                        help="orders the workload creates (default: 500)")
    parser.add_argument("--seed", type=int, default=7, help="workload seed (default: 7)")
    parser.add_argument("--no-spark", action="store_true",
                        help="skip reading the lake back with Spark")


def _say(text: str) -> None:
    print(text, flush=True)


def workload_sql(rows: int, seed: int) -> tuple[list[str], list[str]]:
    """The demo's workload as batches of SQL, each run as one client call: what the database
    holds before binlake starts (the schema, customers, products and most orders), and the
    changes made while binlake replicates (the last orders, updates, deletes, an ALTER)."""
    rng = random.Random(seed)
    batches = [
        "CREATE DATABASE shop",
        "CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(64) NOT NULL, "
        "email VARCHAR(128), country CHAR(2), created DATETIME(6) NOT NULL)",
        "CREATE TABLE shop.products (sku VARCHAR(16) PRIMARY KEY, title VARCHAR(128), "
        "price DECIMAL(10,2) NOT NULL, stock INT UNSIGNED NOT NULL, "
        "kind ENUM('book','game','tool') NOT NULL)",
        "CREATE TABLE shop.orders (id BIGINT PRIMARY KEY, customer_id INT NOT NULL, "
        "sku VARCHAR(16) NOT NULL, qty SMALLINT NOT NULL, total DECIMAL(12,2) NOT NULL, "
        "placed TIMESTAMP(3) NOT NULL, note TEXT)",
    ]
    names = ["Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret", "Dennis", "Frances"]
    customers = [
        f"({i}, '{rng.choice(names)} {i}', 'user{i}@example.com', "
        f"'{rng.choice(['DE', 'FR', 'US', 'JP', 'BR'])}', "
        f"'2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)} 12:{rng.randint(10, 59)}:00.{i:06d}')"
        for i in range(1, 51)
    ]
    batches.append("INSERT INTO shop.customers VALUES " + ",".join(customers))
    products = [
        f"('SKU-{i:04d}', 'Item {i}', {rng.randint(100, 9999) / 100:.2f}, {rng.randint(0, 500)}, "
        f"'{rng.choice(['book', 'game', 'tool'])}')"
        for i in range(1, 31)
    ]
    batches.append("INSERT INTO shop.products VALUES " + ",".join(products))
    order_id = 0
    for start in range(0, rows, 50):
        values = []
        for _ in range(min(50, rows - start)):
            order_id += 1
            qty = rng.randint(1, 5)
            values.append(
                f"({order_id}, {rng.randint(1, 50)}, 'SKU-{rng.randint(1, 30):04d}', {qty}, "
                f"{qty * rng.randint(100, 9999) / 100:.2f}, "
                f"'2024-10-{rng.randint(10, 28)} {rng.randint(10, 23)}:00:00.{rng.randint(0, 999):03d}', "
                f"{'NULL' if rng.random() < 0.5 else repr('gift wrap please')})"
            )
        batches.append("BEGIN; INSERT INTO shop.orders VALUES " + ",".join(values) + "; "
                       f"UPDATE shop.products SET stock = stock - 1 WHERE sku = "
                       f"'SKU-{rng.randint(1, 30):04d}' AND stock > 0; COMMIT")
    existing, batches = batches[:-1], batches[-1:]  # the last order batch comes later
    batches += [
        "UPDATE shop.customers SET email = NULL WHERE id % 7 = 0",
        "UPDATE shop.customers SET id = 1000 WHERE id = 1",  # a primary-key change
        "ALTER TABLE shop.products ADD COLUMN discontinued DATE NULL",
        "UPDATE shop.products SET discontinued = '2024-11-01', stock = 0 WHERE kind = 'tool'",
        f"DELETE FROM shop.orders WHERE id % 9 = 0 AND id <= {order_id}",
        "BEGIN; DELETE FROM shop.orders; ROLLBACK",  # leaves no trace in the binlog's data
        "UPDATE shop.orders SET note = 'rush' WHERE qty = 5",
    ]
    return existing, batches


class DemoRefused(Exception):
    """The demo will not run as asked (a directory it did not make, no checkout)."""


def refuse_foreign(path: str) -> None:
    """Raise :class:`DemoRefused` if ``path`` is a non-empty directory no demo made (read only)."""
    if os.path.isdir(path) and os.listdir(path) \
            and not os.path.isfile(os.path.join(path, DEMO_MARKER)):
        raise DemoRefused(
            f"{path} is not empty and was not made by binlake demo; nothing was changed. "
            "Pass --lake with a new or empty directory")


def prepare_lake(path: str) -> None:
    """Make ``path`` an empty demo lake; replace it only if an earlier demo made it."""
    refuse_foreign(path)
    if os.path.isdir(path) and os.listdir(path):
        shutil.rmtree(path)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, DEMO_MARKER), "w") as marker:
        marker.write("made by binlake demo; the next demo run may replace this directory\n")


def _sandbox() -> Any:
    """:mod:`devtools.sandbox`, from the checkout this package was installed from."""
    try:
        import devtools.sandbox as sandbox
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parents[2]
        if not (checkout / "devtools" / "sandbox.py").is_file():
            raise DemoRefused("binlake demo starts a sandbox server with the developer tools of "
                              "a checkout, which this installation does not have: run "
                              "scripts/demo.sh from a binlake checkout") from None
        sys.path.insert(0, str(checkout))
        import devtools.sandbox as sandbox
    return sandbox


def run(args: argparse.Namespace) -> int:
    lake = os.path.abspath(args.lake)
    try:
        refuse_foreign(lake)  # first: before the sandbox, a server or any write
        sandbox = _sandbox()
        prepare_lake(lake)
    except DemoRefused as exc:
        print(f"binlake demo: {exc}", file=sys.stderr)
        return 2
    sandbox.ensure_host_mariadb()
    _say("1/4  starting a sandbox MariaDB on 127.0.0.1 …")
    server = sandbox.start_server()
    try:
        version = server.version()
        _say(f"     {version} on port {server.port} (datadir {server.datadir})")
        password = secrets.token_urlsafe(18)
        server.sql(
            f"CREATE USER 'binlake'@'127.0.0.1' IDENTIFIED BY '{password}'; "
            "GRANT REPLICATION SLAVE, BINLOG MONITOR, SELECT ON *.* TO 'binlake'@'127.0.0.1'"
        )
        existing, changes = workload_sql(args.rows, args.seed)
        _say(f"2/4  a shop database with rows in it (seed {args.seed}), then RESET MASTER: "
             "the binlog no longer has them …")
        started = time.monotonic()
        for batch in existing:
            server.sql(batch)
        server.sql("RESET MASTER")
        _say(f"     done in {time.monotonic() - started:.1f} s")

        _say(f"3/4  binlake: start.from = snapshot into {lake}, then the shop's next changes "
             "(the last orders, updates, deletes, an ALTER) …")
        env = {
            "BINLAKE_SERVER_HOST": "127.0.0.1",
            "BINLAKE_SERVER_PORT": str(server.port),
            "BINLAKE_SERVER_USER": "binlake",
            "BINLAKE_SERVER_PASSWORD": password,
            "BINLAKE_REPLICA_SERVER_ID": str(server.server_id + 1000),
            "BINLAKE_REPLICA_STOP_AT_END": "true",
            "BINLAKE_START_FROM": "snapshot",
            "BINLAKE_LAKE_PATH": lake,
            "BINLAKE_METRICS_ADDRESS": "",
        }
        config = load_config(None, env=env)
        started = time.monotonic()
        trio.run(Daemon(config).run)
        _say(f"     the existing rows of {', '.join(f'shop.{t}' for t in TABLES)} landed as "
             f"snapshot rows in {time.monotonic() - started:.1f} s")
        for batch in changes:
            server.sql(batch)
        daemon = Daemon(config)  # resumes after the snapshot, from the lake's checkpoint
        started = time.monotonic()
        trio.run(daemon.run)
        stats = daemon.pipeline.stats
        _say(f"     {stats.transactions} transactions, {stats.rows} row changes landed in "
             f"{time.monotonic() - started:.1f} s")
        expected = {t: _select_all(server, t) for t in TABLES}
    finally:
        server.stop()
        server.cleanup()

    if args.no_spark:
        _say("4/4  skipped (--no-spark)")
        return 0
    _say("4/4  reading the lake back with Spark …")
    return _spark_summary(lake, expected)


def _select_all(server: Any, table: str) -> int:
    rows = server.sql(f"SELECT COUNT(*) FROM shop.{table}")
    return int(rows[0][0])


def _spark_summary(lake: str, expected: dict[str, int]) -> int:
    from sinks.spark import read_changes, read_current_state, spark_session

    spark = spark_session("binlake-demo")
    ok = True
    try:
        for table in TABLES:
            changes = read_changes(spark, lake, "shop", table)
            by_op = {r["_op"]: r["count"] for r in changes.groupBy("_op").count().collect()}
            state = read_current_state(spark, lake, "shop", table)
            rows = state.count()
            match = "matches" if rows == expected[table] else "DIFFERS FROM"
            ok = ok and rows == expected[table]
            _say(f"\n  shop.{table}: change log R={by_op.get('R', 0)} I={by_op.get('I', 0)} "
                 f"U={by_op.get('U', 0)} D={by_op.get('D', 0)}; current state {rows} rows — "
                 f"{match} "
                 f"SELECT COUNT(*) = {expected[table]}")
            visible = [c for c in state.columns if not c.startswith("_")]
            for row in state.select(*visible).orderBy(visible[0]).limit(3).collect():
                _say("    " + ", ".join(f"{k}={v!r}" for k, v in row.asDict().items()))
    finally:
        spark.stop()
    _say(f"\nThe lake is in {lake}. Read it from Spark with sinks.spark.read_changes / "
         "current_state (see the README).")
    if not ok:
        print("binlake demo: the lake's current state does not match the server", file=sys.stderr)
        return 1
    return 0
