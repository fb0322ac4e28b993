"""Shared pytest configuration: the real-server test bed's fixtures (tests/servers/plugin.py)."""

pytest_plugins = ["tests.servers.plugin"]
