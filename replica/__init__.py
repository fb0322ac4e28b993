"""The binlake daemon: trio I/O driving the protocol state machines, sessions, landing."""
