"""``binlake run``: connect, register, stream, land — until stopped, across reconnects.

The daemon is a loop around one :class:`~replica.core.pipeline.Pipeline` (which owns the lake):

1. open the lake; its checkpoint, if any, is where streaming resumes (the configured start
   point is used only for a new lake);
2. connect and register (:class:`~replica.core.session.ReplicationSession`), stream into the
   pipeline;
3. on a failure :func:`replica.core.backoff.classify` decides: network errors, stalls and server
   restarts are retried after an exponential, jittered delay, resuming from the lake's
   durable checkpoint (so nothing is lost or landed twice); permanent errors (authentication,
   privileges, purged binlogs, configuration) end the daemon with a non-zero exit instead of a
   retry storm.

SIGTERM/SIGINT stop reading at once; the open transaction is abandoned (it is not in the
checkpoint and will be streamed again), everything complete is flushed and committed, pending
semi-sync ACKs are sent, and the process exits 0 — all within ``replica.stop_timeout``.
SIGHUP reopens the log file.

What it tells the operator: beside the stream, a side connection reads the server's end (binlog
position, GTID state, clock) every few seconds for the lag (:mod:`replica.observe.lag`), which
/readyz, /metrics and the progress lines share. A lost connection is one WARNING, its return
one INFO; the failed attempts in between are DEBUG lines, summed up in a WARNING once a minute
while it lasts. The stop is summed up in one line.
"""

from __future__ import annotations

import contextlib
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import trio

from protocol.binlog import native as native_rows
from protocol.errors import (
    GtidDiverged,
    GtidNotInBinlog,
    GtidStrictModeHole,
    ProtocolError,
    ServerError,
)
from protocol.gtid import GtidSet
from replica.config import Config, FilterConfig
from replica.core import early_stop
from replica.core.backoff import Backoff, Disposition, classify
from replica.core.connection import Connection, ConnectOptions
from replica.core.pipeline import Pipeline, PipelineOptions
from replica.core.resume import Resume, diverged_from_dump, plan_resume
from replica.core.schema_source import SchemaSource
from replica.core.session import (
    ReplicationSession,
    SemiSyncMode,
    SessionOptions,
    StartFrom,
    StartPoint,
)
from replica.core.signals import Signal
from replica.core.snapshot import (
    REQUEST_POLL,
    STORE_REQUEST_POLL,
    DirectoryRequests,
    RequestBox,
    SnapshotCoordinator,
    SnapshotReader,
    list_tables,
    pending_tables,
    plan_state,
    requests_done,
    table_key,
)
from replica.errors import ConnectionLost, NoWritablePrimary, describe, sole_exception
from replica.observe import logs
from replica.observe.lag import query_server_end
from replica.observe.metrics import Metrics, serve_http
from replica.observe.progress import (
    Landed,
    Progress,
    SnapshotProgress,
    Work,
    format_duration,
    format_summary,
)
from sinks.contract import Checkpoint, FilterRecord, Sink, StoreRefused, TableProgress
from sinks.factory import (
    COMPACT_LOCK,
    build_sink,
    compact_lake,
    object_requests,
    prefer_jemalloc,
    recover_compaction_if_idle,
)

log = logging.getLogger("binlake.daemon")

_T = TypeVar("_T")

#: Seconds between reads of the server's end (for the lag), at most.
SERVER_END_INTERVAL = 2.0
#: The domain of the GTID a MariaDB dump refused ("... start from GTID 0-1-105, which ...").
_REFUSED_DOMAIN = re.compile(r"GTID (\d+)-\d+-\d+")
#: While reconnecting, a WARNING that sums up the failed attempts this often (seconds).
OUTAGE_REPORT_INTERVAL = 60.0

__all__ = ["Daemon", "open_sink", "run"]


def open_sink(config: Config, give_up: threading.Event | None = None) -> Sink:
    """The daemon's sink (not open yet): flushes past a size or row threshold are left to the
    pipeline, which runs them on the sink worker. ``give_up``: set once a stop has spent its
    budget, so that an object store's failing calls are no longer retried."""
    lake = config.lake
    return build_sink(
        lake.path,
        file_size_bytes=lake.flush_bytes,
        flush_rows=lake.flush_rows,
        flush_interval_s=lake.flush_interval,
        catch_up_interval_s=lake.catch_up_flush_interval,
        compression=lake.compression,
        flush_in_handle=False,
        transform=config.column_transform(),
        s3=lake.s3.settings(),  # how to reach an s3:// lake (unused for a directory)
        log_snapshot_records=lake.s3.log_snapshot_records,
        lease_duration_s=lake.s3.lease_duration,
        give_up=give_up,
    )


def pipeline_options(config: Config) -> PipelineOptions:
    filters = config.filter
    filtered = bool(filters.include or filters.exclude)
    return PipelineOptions(
        accepts=filters.accepts if filtered else None,
        accepts_database=filters.accepts_database if filtered else None,
        skip_server_ids=frozenset(filters.skip_server_ids),
        skip_gtid_domains=frozenset(filters.skip_gtid_domains),
        semi_sync=SemiSyncMode(config.semi_sync.mode),
        tick=PipelineOptions.tick_for(config.lake.flush_interval),
        signal_table=(tuple(config.snapshot.signal_table.split(".", 1))  # type: ignore[arg-type]
                      if config.snapshot.signal_table else None),
    )


def describe_start(start: StartPoint, session: ReplicationSession,
                   resolved_from: StartFrom | None = None) -> str:
    """Where a dump started, for people: the position (and what it was resolved from:
    ``start`` itself, or ``resolved_from`` when the start was resolved before the dump)."""
    where: StartPoint | None = start
    if isinstance(start, StartFrom):
        where, resolved_from = session.start_position, start
    text = where.to_text(",") if isinstance(where, GtidSet) else str(where)  # one line
    if resolved_from is None:
        return text
    label = f"the {'oldest binlog' if resolved_from is StartFrom.EARLIEST else 'current end'}"
    return f"{text} ({label})" if where is not None else label


@dataclass(slots=True)
class _Attempt:
    """What one connection achieved, for the backoff and for logs."""

    started: float
    streamed: bool = False


@dataclass(slots=True)
class _Outage:
    """The time without a stream, from the first failure to the next stream."""

    started: float
    attempts: int = 0
    reported: float = 0.0  # when the last summary WARNING was logged


class Daemon:
    """One ``binlake run``. ``await Daemon(config).run()`` returns the exit code."""

    def __init__(self, config: Config, *, metrics: Metrics | None = None,
                 snapshot_tables: Sequence[tuple[str, str]] | None = None,
                 snapshot_request: str | None = None) -> None:
        """``snapshot_tables``: ``binlake snapshot`` — snapshot these tables (as request
        ``snapshot_request``) while streaming, and stop once they are done."""
        prefer_jemalloc()  # a start-up step; `binlake run` took it before pyarrow's import
        self.config = config
        self.snapshot_tables = list(snapshot_tables) if snapshot_tables is not None else None
        self.snapshot_request = snapshot_request
        self.snapshots: SnapshotCoordinator | None = None  # once the lake is open
        #: The finished entries of snapshot_tables (``binlake snapshot``'s outcome).
        self.snapshot_results: list[TableProgress] = []
        self._planned = False
        self._new_lake = False
        self._seen_requests: set[str] = set()
        self._requests: RequestBox | None = None  # built on first use (a store client)
        self._requests_read = float("-inf")  # when (monotonic) requests were last read
        self.metrics = metrics or Metrics(ready_max_lag=config.metrics.ready_max_lag)
        #: Set once the daemon is ending and ``replica.stop_timeout`` has passed since it
        #: began to (:meth:`_count_stop_budget`): the object store's transient failures are
        #: then given up instead of retried, so an unreachable store cannot keep the process
        #: alive (the flush it held fails with StoreAbandoned: exit 1, nothing of it committed).
        self._give_up = threading.Event()
        self._stop_budget: threading.Timer | None = None
        self.sink = open_sink(config, self._give_up)
        self.pipeline = Pipeline(self.sink, pipeline_options(config), self.metrics)
        self.pipeline.on_signal = self._signal
        self.lag = self.pipeline.lag
        self.metrics.lag = self.lag.measure
        #: Seconds between reads of the server's end (for the lag).
        self.server_end_interval = min(SERVER_END_INTERVAL, config.log.progress_interval)
        # A heartbeat or an end read proves "at the end" this long (a few missed ones).
        self.lag.fresh_for = max(2 * config.replica.heartbeat_period,
                                 3 * self.server_end_interval) + 1.0
        self.started = time.monotonic()
        self._outage: _Outage | None = None
        #: Set once a stream started: the side connection waits for proof that the server
        #: takes our credentials (a wrong password must cost one attempt, not two).
        self._streamed = trio.Event()
        self.backoff = Backoff.from_config(config.reconnect)
        self._stopping = False
        #: Set by :meth:`stop`, read by worker threads (a background compaction stops at once).
        self._halting = threading.Event()
        self._stream_scope: trio.CancelScope | None = None
        self._setup_scope: trio.CancelScope | None = None
        self._session: ReplicationSession | None = None
        #: Set once the metrics endpoint listens: (host, port).
        self.metrics_address: tuple[str, int] | None = None
        self.progress = Progress(self.started, live_lag=config.lake.flush_interval + 1.0)
        #: server.host's candidates, and the index of the one followed (tried first).
        self.candidates = config.server.candidates
        self._followed = 0
        #: The stream was ended because its server became read-only (see _follow_another).
        self._demoted = False
        self._filters_checked = False

    def stop(self) -> None:
        """Ask the daemon to stop (what SIGTERM does): finish safely, then return 0."""
        self._stopping = True
        self._halting.set()
        self._count_stop_budget()
        if self._stream_scope is not None:
            self._stream_scope.cancel()
        if self._setup_scope is not None:
            self._setup_scope.cancel()

    def _count_stop_budget(self) -> None:
        """Start counting ``replica.stop_timeout`` (once: from the first stop request, or from
        the final flush of a daemon ending otherwise). When it runs out, :attr:`_give_up` is
        set: a flush in progress is not cut short, but a store call of it that fails is no
        longer retried, so the worker call returns and the daemon exits. A timer thread, not a
        trio deadline: the flush may hold the loop's task (the sink worker's call is not
        cancellable), and the timer must fire regardless."""
        if self._stop_budget is not None:
            return
        timer = threading.Timer(self.config.replica.stop_timeout, self._give_up.set)
        timer.daemon = True
        timer.name = "binlake-stop-budget"
        self._stop_budget = timer
        timer.start()

    @contextlib.contextmanager
    def _abandoned_on_stop(self) -> Iterator[trio.CancelScope]:
        """A scope that :meth:`stop` cancels: connecting, registering and backoff delays hold
        nothing worth finishing, so SIGTERM must not wait for them (a delay can be a minute)."""
        with trio.CancelScope() as scope:
            self._setup_scope = scope
            if self._stopping:
                scope.cancel()
            try:
                yield scope
            finally:
                self._setup_scope = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> int:
        checkpoint = await self._open_lake()
        self._new_lake = checkpoint is None
        self._clean_compaction_leftovers()
        native_rows.warn_once(log.warning)
        self.snapshots = self.pipeline.snapshots = SnapshotCoordinator(self.sink,
                                                                       self.pipeline.worker)
        if checkpoint is not None:
            log.info("lake %s: resuming after transaction %d (%s, GTID state %s)",
                     self.config.lake.path, checkpoint.seq, checkpoint.position,
                     checkpoint.gtid_state or "-")
        else:
            log.info("lake %s is new: starting from %s", self.config.lake.path,
                     self.config.start.from_)
        try:
            async with trio.open_nursery() as nursery:
                await self._start_services(nursery)
                task_status.started()
                await self._replicate()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise sole_exception(group) from None
        finally:
            self._count_stop_budget()
            try:
                with trio.CancelScope(shield=True):  # what is complete lands, however we stop
                    final = await self.pipeline.close()
            finally:
                if self._stop_budget is not None:
                    self._stop_budget.cancel()
            where = (f"; the lake is complete up to transaction {final.seq} ({final.position})"
                     if final is not None else "")
            log.info("stopped: %s%s", format_summary(self.landed, time.monotonic() - self.started),
                     where)
        return 0

    async def _open_lake(self) -> Checkpoint | None:
        """``pipeline.open()``, with SIGTERM/SIGINT heard meanwhile: an object store that does
        not answer is retried for as long as it takes, and a stop must not wait for it for
        ever — it gives up once the stop budget is spent (:meth:`_count_stop_budget`). A
        signal heard here, or recorded before (``early_stop``), stops the daemon as soon as
        the lake is open."""
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_signals)
                checkpoint = await self.pipeline.open()
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise sole_exception(group) from None
        return checkpoint

    @property
    def landed(self) -> Landed:
        stats = self.pipeline.stats
        return Landed(stats.landed_transactions, stats.landed_rows)

    def work(self, now: float) -> Work:
        """Decoded and buffered work, for the progress lines (never the metrics)."""
        stats = self.pipeline.stats
        pending = self.pipeline.pending(now, behind=self.lag.stream_behind())
        return Work(stats.transactions, stats.rows, stats.bytes, pending.transactions,
                    pending.bytes, pending.lands_in, pending.flush_bytes)

    async def _start_services(self, nursery: trio.Nursery) -> None:
        nursery.start_soon(self._watch_signals)
        nursery.start_soon(self._watch_server_end)
        nursery.start_soon(self._report_progress)
        if self.config.lake.compact_interval > 0:
            nursery.start_soon(self._compact_in_background)
        setup = logs.current_setup()
        if setup is not None:
            await nursery.start(logs.reopen_logs_on_sighup, setup)
        address = self.config.metrics.address
        if address:
            listeners = await nursery.start(serve_http, self.metrics, self.config.metrics.host,
                                            self.config.metrics.port)
            # serve_http reports its listeners: the bound port matters when the config says 0.
            port = listeners[0].socket.getsockname()[1]
            self.metrics_address = (self.config.metrics.host, int(port))
            log.info("metrics on http://%s:%s/metrics", self.config.metrics.host, port)

    def _clean_compaction_leftovers(self) -> None:
        """A ``binlake compact`` killed -9 leaves its staging and commit record; clean them now
        rather than at the next compaction (which may be a cron day away), unless a compaction
        is running — it holds ``_compact.lock`` and cleans them itself."""
        try:
            done = recover_compaction_if_idle(self.config.lake.path)
        except OSError as exc:  # the next compaction retries; landing matters more
            log.warning("could not clean up after an interrupted compaction (the next "
                        "`binlake compact` will): %s", exc)
            return
        if done:
            log.info("cleaned up after an interrupted compaction (%s)", self.config.lake.path)
        elif done is False:
            log.info("an interrupted compaction's leftovers are left to the compaction running "
                     "now (it holds %s)", COMPACT_LOCK)

    async def _compact_in_background(self) -> None:
        """``lake.compact_interval``: the same compaction as ``binlake compact``, in a worker
        thread, so landing goes on meanwhile. On disk it swaps partitions under the publish
        lock. On object storage it is one commit record taken beside the writer without its
        lease, which the writer steps over exactly as it does a ``binlake compact`` process's
        (nothing is shared in-process: the log's conditional creates decide); its first run
        comes at start, as that is where a killed compaction's files are removed there (a
        compaction's first step). A failed run is logged and retried at the next interval —
        landing matters more — except a store's permanent refusal, which stops the daemon
        (exit 4) as any lake error does."""
        from replica.commands.compact import options_from

        lake = self.config.lake
        options = options_from(self.config)
        wait = not lake.on_object_store
        while True:
            if wait:
                await trio.sleep(lake.compact_interval)
            wait = True
            try:
                stats = await _in_thread(
                    lambda stop: compact_lake(
                        lake.path, options, s3=lake.s3.settings(),
                        stop=lambda: stop() or self._halting.is_set()),
                    wait_on_cancel=self.config.replica.stop_timeout if lake.on_object_store
                    else 0.0)
            except StoreRefused:
                raise
            except Exception as exc:  # noqa: BLE001 - reported, retried next interval
                log.warning("background compaction failed (retried in %.0f s): %s",
                            lake.compact_interval, exc)
                continue
            if stats.partitions:
                log.info("compacted %d partitions: %d files -> %d", stats.partitions,
                         stats.files_in, stats.files_out)

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            if early_stop.requested() and not self._stopping:
                log.info("SIGTERM before start: stopping")
                self.stop()
            async for signum in signals:
                log.info("%s: stopping (flushing what is complete)", signal.Signals(signum).name)
                self.stop()

    async def _report_progress(self) -> None:
        """A progress line every ``log.progress_interval`` while catching up, and one per table
        being snapshotted (see :mod:`replica.observe.progress`)."""
        snapshots = SnapshotProgress()
        while True:
            await trio.sleep(self.config.log.progress_interval)
            if self.snapshots is not None:
                for snapshot_line in snapshots.sample(time.monotonic(), self.snapshots.state,
                                                      self.snapshots.staged_rows):
                    log.info("%s", snapshot_line)
            if not self.lag.connected:
                continue  # the reconnect lines say what is going on
            now = time.monotonic()
            line = self.progress.sample(now, self.landed, self.lag.measure(), self.work(now))
            if line is not None:
                log.info("%s", line)

    async def _watch_server_end(self) -> None:
        """Read the server's end every few seconds on a side connection, for the lag.

        Failures are DEBUG lines: the stream's own connection reports the server's trouble,
        and without fresh reads the lag only grows (it never claims a false 0). It starts once
        the first stream did. With several candidates in server.host it also watches
        ``@@read_only``: a followed primary that was demoted but stays up would keep the stream
        (it sends no more transactions unless it replicates the new primary), so the stream is
        ended and the candidates are tried again.
        """
        await self._streamed.wait()
        conn: Connection | None = None
        reading = self._followed
        try:
            while True:
                try:
                    if conn is not None and reading != self._followed:  # a new primary
                        await _close_quietly(conn)
                        conn = None
                    if conn is None:
                        reading = self._followed
                        conn = await Connection.open(self._connect_options(
                            read_timeout=min(self.config.server.read_timeout, 10.0)))
                    self.lag.server_end(await query_server_end(conn))
                    if len(self.candidates) > 1 and await _read_only(conn):
                        self._follow_another(reading)
                except (OSError, ProtocolError, ValueError, IndexError) as exc:
                    log.debug("reading the server's end for the lag failed: %s", describe(exc))
                    await _close_quietly(conn)
                    conn = None
                await trio.sleep(self.server_end_interval)
        finally:
            await _close_quietly(conn)

    def _follow_another(self, demoted: int) -> None:
        """The followed server is read-only now: end its stream (a reconnect, not a stop)."""
        scope = self._stream_scope
        if scope is None or demoted != self._followed or self._demoted:
            return
        log.warning("the followed server %s is read-only now (demoted): trying server.host's "
                    "candidates for the writable primary", self._address())
        self._demoted = True
        scope.cancel()

    async def _read_server_end(self, conn: Connection) -> None:
        """The server's end before streaming: from the first event on, the lag knows whether
        the stream is behind (a backlog, landed by size: see ``Pipeline``), instead of waiting
        for the side connection's first read. A refusal only leaves that unknown."""
        try:
            self.lag.server_end(await query_server_end(conn))
        except (ServerError, ValueError, IndexError) as exc:  # as the side connection's reads
            log.debug("reading the server's end before streaming failed: %s", describe(exc))

    async def _check_filters(self, conn: Connection) -> None:
        """Once per daemon: say which filter patterns match no table on the server. An include
        pattern that matches nothing is usually a typo, and a typo in a filter lands nothing
        while the checkpoint moves on: a warning, naming the pattern. (An exclude pattern that
        matches nothing is harmless: info.)"""
        filters = self.config.filter
        if self._filters_checked or not (filters.include or filters.exclude):
            return
        self._filters_checked = True
        try:
            rows = await conn.query(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                "WHERE TABLE_TYPE NOT IN ('VIEW', 'SYSTEM VIEW')")
        except ServerError as exc:
            log.warning("cannot check filter.include/exclude against the server's tables: %s",
                        exc)
            return
        include, exclude = filters.unmatched((_text(row[0]), _text(row[1])) for row in rows)
        for pattern in include:
            log.warning("filter.include pattern %r matches no table on the server: nothing "
                        "lands for it until such a table exists (patterns are case-sensitive "
                        "database.table globs; a bare name means a whole database)", pattern)
        for pattern in exclude:
            log.info("filter.exclude pattern %r matches no table on the server", pattern)

    async def _schema_source_for(self, conn: Connection) -> SchemaSource | None:
        """A schema source for column names, unless the binlog carries them itself (FULL);
        with ``[types] tinyint1_as_boolean`` always, for the display widths no binlog has."""
        try:
            rows = await conn.query("SELECT @@GLOBAL.binlog_row_metadata")
            metadata = _text(rows[0][0]).upper()
        except (ServerError, IndexError):  # older servers: no optional metadata at all
            metadata = "absent"
        widths = self.config.types.tinyint1_as_boolean
        if metadata == "FULL":
            if widths:
                log.info("[types] tinyint1_as_boolean: TINYINT display widths come from "
                         "information_schema (COLUMN_TYPE), read as each table is first seen")
                return SchemaSource(self._connect_options(), display_widths=True)
            return None
        log.info("binlog_row_metadata is %s, not FULL: column names, ENUM/SET labels and keys "
                 "come from information_schema where it matches the binlog", metadata)
        return SchemaSource(self._connect_options(), display_widths=widths)

    async def _replicate(self) -> None:
        while not self._stopping:
            attempt = _Attempt(started=time.monotonic())
            try:
                finished = await self._connect_and_stream(attempt)
                if finished:
                    return
            except Exception as exc:
                disposition = classify(exc)
                if self._stopping and disposition is Disposition.RETRY:
                    return  # the connection broke as we stopped: what landed is checkpointed
                if disposition is Disposition.STOP:
                    raise  # also when stopping: a lake or a bug that failed the final flush
                self.metrics.count_reconnect(exc)
                if attempt.streamed and (time.monotonic() - attempt.started
                                         >= self.config.reconnect.healthy_after):
                    self.backoff.reset()
                self.backoff.failed()
                if self.backoff.exhausted:
                    log.error("giving up after %d attempts: %s", self.backoff.failures,
                              describe(exc))
                    raise
                delay = self.backoff.next_delay()
                self._note_failure(exc, delay, lost=attempt.streamed)
                with self._abandoned_on_stop():
                    await trio.sleep(delay)

    def _note_failure(self, exc: BaseException, delay: float, *, lost: bool) -> None:
        """One WARNING when the stream is lost (or the first connection fails); DEBUG for
        every further attempt, and a summary WARNING once a minute while it lasts."""
        now = time.monotonic()
        outage = self._outage
        if outage is None:
            self._outage = _Outage(started=now, attempts=1, reported=now)
            what = "connection to the server lost" if lost else "cannot connect to the server"
            log.warning("%s (%s); reconnecting in %.1f s", what, describe(exc), delay)
            return
        outage.attempts += 1
        log.debug("reconnect attempt %d failed (%s); next in %.1f s", outage.attempts,
                  describe(exc), delay)
        if now - outage.reported >= OUTAGE_REPORT_INTERVAL:
            outage.reported = now
            log.warning("still not streaming after %d attempts over %s (last: %s); "
                        "reconnecting", outage.attempts, format_duration(now - outage.started),
                        describe(exc))

    def _note_streaming(self) -> None:
        outage, self._outage = self._outage, None
        if outage is not None:
            log.info("streaming again after %s (%d failed attempts)",
                     format_duration(time.monotonic() - outage.started), outage.attempts)

    async def _connect_and_stream(self, attempt: _Attempt) -> bool:
        """One connection: True when the daemon is done (stopped or caught up)."""
        config = self.config
        conn: Connection | None = None
        schema_source: SchemaSource | None = None
        resume: Resume | None = None
        with self._abandoned_on_stop():
            conn = await self._open_primary()
        if conn is None:  # stopped while connecting
            return True
        try:
            with self._abandoned_on_stop():
                await self.pipeline.worker.idle()  # plan_resume may record in the sink
                resume = await plan_resume(conn, self.sink, config, self._address())
                if self.sink.flush_wanted:  # a divergence recorded: committed at once
                    await self.pipeline.flush()
            if resume is None:  # stopped while asking
                return True
            start = resume.start
            if resume.changed:
                self.lag.server_changed()
            self.metrics.follow(self._address(), resume.server.server_id,
                                resume.server.server_uuid,
                                say_in_readiness=len(self.candidates) > 1)
            options = SessionOptions(
                server_id=config.replica.server_id,
                start=start,
                heartbeat_period=config.replica.heartbeat_period,
                semi_sync=SemiSyncMode(config.semi_sync.mode),
                report_host=config.replica.report_host or "",
                report_port=config.replica.report_port,
                gtid_strict_mode=config.start.gtid_strict_mode,
                gtid_ignore_duplicates=config.start.gtid_ignore_duplicates,
                non_blocking=config.replica.stop_at_end,
            )
            session: ReplicationSession | None = None
            with self._abandoned_on_stop():
                await self._check_filters(conn)
                await self._read_server_end(conn)
                if not self._planned:
                    await self._plan_snapshots(conn)
                    self._planned = True
                if self._snapshots_pending():
                    options = replace(options, non_blocking=False)  # stop when they are done
                schema_source = await self._schema_source_for(conn)
                session = await ReplicationSession.start(conn, options)
            if session is None:  # stopped while registering
                return True
            if self._outage is None:
                log.info("streaming from %s (server %s)",
                         describe_start(start, session, resume.resolved_from),
                         conn.server_version)
            else:
                log.debug("streaming from %s",
                          describe_start(start, session, resume.resolved_from))
            self._note_streaming()
            self._streamed.set()
            attempt.streamed = True
            self._session = session
            with trio.CancelScope() as scope:
                self._stream_scope = scope
                if self._stopping:
                    scope.cancel()
                try:
                    finished = await self._stream_and_snapshot(session, schema_source)
                except (GtidNotInBinlog, GtidDiverged, GtidStrictModeHole) as exc:
                    if not resume.from_lake_gtids:
                        raise
                    await self.pipeline.worker.idle()
                    await self._after_refused_gtids(exc, resume)
                    return False  # the next attempt starts where both histories agree
                if finished:
                    log.info("snapshots done; stopping")
                    self._stopping = True
                    self._count_stop_budget()
                    with trio.move_on_after(config.replica.stop_timeout) as budget:
                        budget.shield = True
                        await self.pipeline.close()
                        await self.pipeline.ack_durable(session)
                    return True
                if not options.non_blocking:
                    # A blocking dump never ends by itself: the server ended it (shutdown,
                    # KILL of the dump thread). That is a reason to reconnect, not to stop.
                    raise EOFError("the server ended the binlog dump (shutting down, or the "
                                   "dump thread was killed)")
                log.info("caught up with the server's binlog end; stopping")
                return True
            if self._demoted and not self._stopping:
                self._demoted = False
                raise ConnectionLost(f"the followed server {self._address()} became read-only")
            # Cancelled by stop(): land what is complete and ACK it while still connected.
            with trio.move_on_after(config.replica.stop_timeout) as budget:
                budget.shield = True
                await self.pipeline.close()
                await self.pipeline.ack_durable(session)
            return True
        finally:
            self._stream_scope = None
            self._session = None
            with trio.move_on_after(1.0) as closing:
                closing.shield = True
                try:
                    if schema_source is not None:
                        await schema_source.aclose()
                    await conn.close()
                except Exception:  # a broken connection: the error that broke it is raised
                    pass


    # --- the server followed ---------------------------------------------------------------------

    def _connect_options(self, **overrides: object) -> ConnectOptions:
        """How to reach the server followed now (the candidate that was a writable primary)."""
        server = self.config.server
        if server.socket is None and len(self.candidates) > 1:
            server = server.following(*self.candidates[self._followed])
        return ConnectOptions.from_config(server, **overrides)

    def _address(self) -> str:
        server = self.config.server
        if server.socket is not None:
            return server.socket
        host, port = self.candidates[self._followed]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    async def _open_primary(self) -> Connection:
        """A connection to the server to stream from: the one host; or, from a list of
        candidates, the first (from the one followed last, in turn) that answers and is a
        writable primary (``@@read_only`` = 0) — a replica, or a demoted primary, is
        passed over. None answering so is a retryable :class:`NoWritablePrimary`."""
        if self.config.server.socket is not None or len(self.candidates) <= 1:
            return await Connection.open(self._connect_options())
        count = len(self.candidates)
        passed: list[str] = []
        for step in range(count):
            index = (self._followed + step) % count
            host, port = self.candidates[index]
            server = self.config.server.following(host, port)
            try:
                conn = await Connection.open(ConnectOptions.from_config(server))
            except Exception as exc:
                if classify(exc) is Disposition.STOP:
                    raise  # wrong password, TLS: the same on every candidate
                passed.append(f"{host}:{port} ({describe(exc)})")
                continue
            try:
                read_only = await _read_only(conn)
            except BaseException:
                await _close_quietly(conn)
                raise
            if read_only:
                passed.append(f"{host}:{port} (read_only: a replica)")
                await _close_quietly(conn)
                continue
            if index != self._followed:
                log.info("server.host candidate %s:%s is the writable primary now", host, port)
            self._followed = index
            return conn
        raise NoWritablePrimary("none of server.host's candidates is a writable primary: "
                                + "; ".join(passed))

    async def _after_refused_gtids(self, exc: ProtocolError, resume: Resume) -> None:
        """The dump refused the lake's GTID state (MariaDB: a GTID the server's binlog lacks,
        while it has higher sequence numbers from another writer): the histories diverged.
        Stop with GtidDiverged; or, by choice, record it and let the next attempt go on from
        where both histories agree (``@@gtid_slave_pos``, see protocol.failover)."""
        from protocol.failover import mariadb_fork
        from protocol.gtid import GtidPosition

        durable = self.pipeline.durable
        lake_state = durable.gtid_state if durable is not None else self.sink.gtid_seed
        fork = None
        if resume.server.flavor == "mariadb" and lake_state:
            refused = frozenset(int(m) for m in _REFUSED_DOMAIN.findall(str(exc)))
            fork = mariadb_fork(GtidPosition.parse(lake_state), resume.server_binlog,
                                resume.server_slave, refused or frozenset(
                                    GtidPosition.parse(lake_state).domains))
        if self.config.start.on_divergence != "continue" or fork is None:
            raise diverged_from_dump(exc, resume, lake_state) from None
        log.warning("the server %s lacks a transaction the lake holds (%s); "
                    "start.on_divergence = continue: going on from %s (where both histories "
                    "agree), recorded in the lake's checkpoint", resume.server, exc, fork)
        self.sink.diverge(str(fork), {"server": resume.server.to_json(), "lost": str(exc),
                                      "lake_gtid_state": lake_state,
                                      "resumed_from": str(fork)})
        await self.pipeline.flush()  # committed at once, on the sink worker

    # --- snapshots -------------------------------------------------------------------------------

    def _snapshots_pending(self) -> bool:
        """A snapshot to finish before a batch run (stop_at_end, ``binlake snapshot``) stops."""
        if self.snapshots is None:
            return False
        if self.snapshot_tables is not None:
            return True
        return self.config.replica.stop_at_end and bool(pending_tables(self.snapshots.state))

    async def _plan_snapshots(self, conn: Connection) -> None:
        """Decide what to snapshot, once per run: ``binlake snapshot``'s tables; every included
        table of a new lake with ``start.from = snapshot``; tables ``filter.include`` gained
        since the lake last ran. Tables pending from an interrupted run go on anyway."""
        assert self.snapshots is not None
        config = self.config
        filters = config.filter
        recorded = FilterRecord(tuple(filters.include), tuple(filters.exclude))
        before = self.snapshots.state.filter
        # The server is asked first, so that the plan is made from the state as it is then,
        # with no await between reading and recording it.
        if self.snapshot_tables is not None:
            planned: list[tuple[str, str]] | None = None
        elif self._new_lake and config.start.from_ == "snapshot":
            planned = [t for t in await list_tables(conn) if filters.accepts(*t)]
        elif not self._new_lake and before is not None and before != recorded:
            old = FilterConfig(include=before.include, exclude=before.exclude)
            planned = [t for t in await list_tables(conn)
                       if filters.accepts(*t) and not old.accepts(*t)]
        else:
            planned = None
        state = self.snapshots.state
        if self.snapshot_tables is not None:
            state = plan_state(state, self.snapshot_tables, reason="binlake snapshot",
                               one_time=lambda d, t: not filters.accepts(d, t),
                               request=self.snapshot_request)
            for database, table in self.snapshot_tables:
                if not filters.accepts(database, table):
                    log.warning("%s.%s is excluded by the filters: it gets a one-time copy, its "
                                "later changes will not land", database, table)
        elif planned is not None and self._new_lake:
            state = plan_state(state, planned, reason="start.from = snapshot")
            log.info("start.from = snapshot: %d tables to snapshot while streaming from the "
                     "server's binlog end", len(planned))
        elif planned is not None:
            names = ", ".join(f"{d}.{t}" for d, t in planned)
            if planned and config.snapshot.on_new_tables:
                state = plan_state(state, planned, reason="new in filter.include")
                log.info("filter.include gained %d tables since the lake last ran; "
                         "snapshotting them: %s", len(planned), names)
            elif planned:
                log.warning("filter.include gained %d tables since the lake last ran, and "
                            "snapshot.on_new_tables is false: their existing rows are not in "
                            "the lake (run `binlake snapshot --table DB.TABLE`): %s",
                            len(planned), names)
        if self.snapshot_tables is None:
            state = replace(state, filter=recorded)
        pending = pending_tables(state)
        if pending and self.snapshot_tables is None:
            log.info("snapshots pending: %s", ", ".join(e.name for e in pending))
        self.snapshots.set_state(state)

    async def _stream_and_snapshot(self, session: ReplicationSession,
                                   schema_source: SchemaSource | None) -> bool:
        """Stream, and snapshot beside it; True once a batch run's snapshots are done."""
        done = False

        async def snapshot_loop(cancel: trio.CancelScope) -> None:
            nonlocal done
            await self._snapshot_loop()
            done = True
            cancel.cancel()

        try:
            async with trio.open_nursery() as nursery:
                if self._snapshots_pending() or self.snapshot_tables is None:
                    nursery.start_soon(snapshot_loop, nursery.cancel_scope)
                await self.pipeline.stream(session, schema_source)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise sole_exception(group) from None
        return done

    async def _snapshot_loop(self) -> None:
        """Run pending snapshots; a daemon then waits for requests, a batch run returns."""
        assert self.snapshots is not None
        reader = SnapshotReader(self.snapshots, self._connect_options(),
                                chunk_rows=self.config.snapshot.chunk_rows,
                                chunk_pause=self.config.snapshot.chunk_pause)
        batch = self._snapshots_pending()
        while True:
            if self.snapshot_tables is None:
                await self._take_requests()
            await reader.run()
            if batch and not pending_tables(self.snapshots.state):
                if self.snapshot_tables is not None:
                    wanted = {f"{d}.{t}" for d, t in self.snapshot_tables}
                    self.snapshot_results = [e for e in self.snapshots.state.tables or ()
                                             if e.name in wanted]
                return
            await trio.sleep(REQUEST_POLL)

    def _signal(self, signal: Signal) -> None:
        """A snapshot signal read from the binlog (``snapshot.signal_table``): planned as a
        ``binlake snapshot`` request is, once (a replayed signal's request is known)."""
        snapshots = self.snapshots
        if snapshots is None or self.snapshot_tables is not None:
            log.warning("snapshot signal %r ignored: `binlake snapshot` runs the lake now; "
                        "insert it again once `binlake run` does", signal.id)
            return
        state = snapshots.state
        if any(signal.request in entry.requests for entry in state.tables or ()):
            return  # replayed after a restart: planned already
        filters = self.config.filter
        tables = {entry.name: entry for entry in state.tables or ()}
        for database, table in signal.tables:
            busy = tables.get(table_key(database, table))
            if busy is not None and busy.status in ("pending", "running") and (
                    busy.condition != signal.condition):
                log.warning("snapshot signal %r: %s.%s is being snapshotted already (%s): the "
                            "signal's request waits for that snapshot, its own condition (%s) "
                            "is not applied", signal.id, database, table,
                            f"where {busy.condition}" if busy.condition is not None
                            else "every row", signal.condition or "none")
        snapshots.set_state(plan_state(
            state, signal.tables, reason=f"signal {signal.id}",
            one_time=lambda d, t: not filters.accepts(d, t), request=signal.request,
            condition=signal.condition))
        log.info("snapshot signal %r (%s): snapshot of %s requested%s", signal.id,
                 self.config.snapshot.signal_table,
                 ", ".join(f"{d}.{t}" for d, t in signal.tables),
                 f" where {signal.condition}" if signal.condition is not None else "")

    async def _take_requests(self) -> None:
        """Requests ``binlake snapshot`` left for this daemon (see replica.commands.snapshot),
        read from the lake in a thread (not on the loop: a directory and files in the lake, or
        a LIST and GETs of the store, every :data:`STORE_REQUEST_POLL` seconds there)."""
        assert self.snapshots is not None
        lake = self.config.lake
        if lake.on_object_store:
            now = time.monotonic()
            if now - self._requests_read < STORE_REQUEST_POLL:
                return
            self._requests_read = now
        box = self._requests
        if box is None:
            box = self._requests = await trio.to_thread.run_sync(self._request_box)
        # Abandoned on stop: reading requests holds nothing worth finishing, and with the store
        # unreachable it would retry until the stop budget runs out.
        found = await trio.to_thread.run_sync(box.read, abandon_on_cancel=True)
        state = self.snapshots.state  # as it is now, after the await
        filters = self.config.filter
        changed = False
        for request, tables in found:
            if request in self._seen_requests:
                continue
            self._seen_requests.add(request)
            if requests_done(state, request, tables) is not None:
                if self.pipeline.durable is not None:
                    await trio.to_thread.run_sync(box.remove, request)  # its waiter is gone
                continue
            state = plan_state(state, tables, reason="binlake snapshot",
                               one_time=lambda d, t: not filters.accepts(d, t), request=request)
            log.info("snapshot requested: %s", ", ".join(f"{d}.{t}" for d, t in tables))
            changed = True
        if changed:
            self.snapshots.set_state(state)

    def _request_box(self) -> RequestBox:
        lake = self.config.lake
        if lake.on_object_store:
            return object_requests(lake.path, lake.s3.settings(), give_up=self._give_up)
        return DirectoryRequests(lake.path)


async def _in_thread(work: Callable[[Callable[[], bool]], _T], *,
                     wait_on_cancel: float) -> _T:
    """``work(stop)`` in a worker thread; its exception, if any, as it is (never grouped).
    Cancelled: with ``wait_on_cancel`` seconds its ``stop()`` turns true and the thread is
    waited for that long at most (the background compaction on object storage removes the
    files it wrote before any record names them, so a clean stop leaves no object outside the
    log); otherwise, or once that time has passed, the thread is abandoned (a compaction on
    disk is crash-safe: the next start recovers it; one on object storage leaves files no
    record names, which the next compaction run removes)."""
    stopping = threading.Event()
    finished = threading.Event()

    def run() -> _T:
        try:
            return work(stopping.is_set)
        finally:
            finished.set()

    try:
        return await trio.to_thread.run_sync(run, abandon_on_cancel=True)
    except trio.Cancelled:
        if wait_on_cancel > 0:
            stopping.set()
            with trio.move_on_after(wait_on_cancel) as budget:
                budget.shield = True
                await trio.to_thread.run_sync(finished.wait, abandon_on_cancel=True)
            if budget.cancelled_caught:
                log.warning("stopping with a background compaction still running after %g "
                            "s: the files it wrote are removed by the next compaction run",
                            wait_on_cancel)
        raise


async def _read_only(conn: Connection) -> bool:
    rows = await conn.query("SELECT @@GLOBAL.read_only")
    return _text(rows[0][0]) not in ("0", "OFF")


async def _close_quietly(conn: Connection | None) -> None:
    if conn is None:
        return
    with trio.move_on_after(1.0) as closing:
        closing.shield = True
        with contextlib.suppress(Exception):
            await conn.close()


def _text(value: str | bytes | None) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def run(config: Config) -> int:
    """Entry point of ``binlake run`` (called by :mod:`replica.cli`)."""
    return await Daemon(config).run()
