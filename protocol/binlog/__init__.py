"""Binlog events: framing, headers, event bodies, row images, transactions."""
