"""The ``binlake`` subcommands other than ``run``, one module each (``replica.cli.COMMANDS``).

Each module has a ``run`` that :mod:`replica.cli` imports only when that command is used.
"""
