"""binlake's sans-I/O protocol layer: bytes in, typed events out, and the reverse.

Nothing in this package performs I/O or imports trio. Where it sits among binlake's rooms, and
what it may depend on: ``ARCHITECTURE.md`` at the repository's root.
"""
