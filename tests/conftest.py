"""Shared pytest configuration: the real-server test bed (tests/servers/plugin.py), its Ceph S3
gateway (tests/servers/ceph.py) and the one SparkSession of the run (tests/spark_fixtures.py)."""

pytest_plugins = ["tests.servers.plugin", "tests.servers.ceph", "tests.spark_fixtures"]
