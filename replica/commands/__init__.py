"""The ``binlake`` subcommands other than ``run``: check, status, decode, demo.

Each module has a ``run`` that :mod:`replica.cli` imports only when that command is used.
"""
