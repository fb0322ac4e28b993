"""Shared pytest configuration: the real-server test bed (tests/servers/plugin.py) and the one
SparkSession of the run (tests/spark_fixtures.py)."""

pytest_plugins = ["tests.servers.plugin", "tests.spark_fixtures"]
