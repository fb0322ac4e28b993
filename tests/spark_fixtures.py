"""pytest plugin: ONE local SparkSession for the whole run (``spark`` fixture, session scope).

Registered from ``tests/conftest.py`` (``pytest_plugins``).
local[2], bound to 127.0.0.1, no UI, UTC session time zone, few shuffle partitions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

_session: Any = None


def spark_session() -> Any:
    """The run's SparkSession, created on first use."""
    global _session
    if _session is None:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON", "python3"))
        from pyspark.sql import SparkSession

        _session = (
            SparkSession.builder.master("local[2]")
            .appName("binlake-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
            .config("spark.sql.streaming.schemaInference", "false")
            .config("spark.driver.memory", "1g")
            .getOrCreate()
        )
        _session.sparkContext.setLogLevel("ERROR")
    return _session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    session = spark_session()
    yield session
    global _session
    if _session is not None:
        _session.stop()
        _session = None
