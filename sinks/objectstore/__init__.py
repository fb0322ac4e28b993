"""A lake on object storage: the store seam, its in-memory model, the rename-free commit protocol.

``store.py`` is the seam, ``memory.py`` its model for tests, ``commit.py`` and ``lease.py`` the
protocol, ``log.py`` its records and ``logstate.py`` the lake as of a record (the log's
snapshots).
"""
