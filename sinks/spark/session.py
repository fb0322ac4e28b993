"""A SparkSession configured the way the lake is meant to be read.

The session time zone is UTC so that ``TIMESTAMP`` columns (landed as UTC instants) print as
the server's UTC values; ``DATETIME`` columns are ``timestamp_ntz`` and print as stored anyway.

A local session binds its driver to the loopback address (``spark.driver.host`` and
``spark.driver.bindAddress``, settings of this session only): a machine whose host name does
not resolve, or resolves to an address it cannot bind, still starts one. The process's
environment is left as it is; a ``SPARK_LOCAL_IP`` the user exported, or ``config``, decides
instead.
"""

from __future__ import annotations

import os
from typing import Any


def spark_session(app_name: str = "binlake", master: str | None = "local[2]",
                  **config: str) -> Any:
    """Get or create a SparkSession (``master=None`` leaves it to ``spark-submit``)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    settings = {"spark.sql.session.timeZone": "UTC", "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "4",
                "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}
    if master is not None and master.startswith("local") and not os.environ.get("SPARK_LOCAL_IP"):
        settings |= {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
    settings |= config
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
