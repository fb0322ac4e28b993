"""binlake's sans-I/O protocol layer: bytes in, typed events out, and the reverse.

Nothing in this package performs I/O or imports trio. See ``../shared/ARCHITECTURE.md``.
"""
