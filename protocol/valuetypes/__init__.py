"""One description per column type whose value is more than a ``struct`` unpack.

Each module here is the single, readable statement of what one column type's values are, and
every path that makes or prints such a value uses it:

======================  =========================================================================
module                  the type
======================  =========================================================================
:mod:`.timestamp2`      TIMESTAMP (TIMESTAMP2 and the old 4-byte form)
:mod:`.time2`           TIME (TIME2 and the old 3-byte form)
:mod:`.newdecimal`      DECIMAL (NEWDECIMAL)
:mod:`.binary_json`     MySQL JSON (binary JSON, its text, partial-update diffs)
:mod:`.characters`      character columns: the collation's rule, MySQL's latin1, the legacy
                        charsets of ``protocol.binlog.charsets``
:mod:`.temporal`        what the temporal types share (the zero/invalid value, fractions)
======================  =========================================================================

A module gives, as plain functions: ``decode`` — the stored bytes of a binlog row image → the
value (what ``SELECT`` returns); ``select_expression`` and ``from_text`` — how a snapshot
selects the column exactly and turns that text into the same value; the value's text — what
``binlake decode`` and the Open Protocol output print for it (``timestamp2.text`` and
``iso_text``, ``time2.text``, ``newdecimal.text``, ``JsonDiff.to_call_text`` and
``to_json_text``, ``characters.output_bytes``; the fraction's forms in ``temporal``). The
outputs choose among these by the value's Python type and hold no conversion of their own.

These functions are the reference. The speed paths are twins of them, never a second
definition: the generated row decoder (``protocol.binlog.rows``) and the native row decoder's
readers (``_native_rows.c``: to Python values, to Arrow buffers, a snapshot's text to Arrow).
``tests/unit/test_value_types.py`` compares every twin with these functions on generated
values, and checks that both outputs print every path's value as the server's form of it says.
The outputs print in Python only: a debugging command's text is not the daemon's path.
"""
