"""The daemon core: trio's thin I/O layer over the sans-I/O protocol and the sink.

``connection`` moves bytes for :mod:`protocol.handshake` and :mod:`protocol.packets`;
``session`` registers and streams a binlog; ``pipeline`` decodes, groups, filters and lands;
``daemon`` runs the pipeline across reconnects (``backoff``) and signals (``early_stop``);
``schema_source`` reads ``information_schema`` when the binlog does not name columns.
"""
