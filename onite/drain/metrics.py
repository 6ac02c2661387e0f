"""A spool's Prometheus metrics (docs/admin-guide.md, "Metrics"), built from its files with prometheus-client.

Gauges say what the folders and heartbeats say now; counters come from each host's metrics.HOST.state
(onite.spool.counters), which retention never touches. Labels are host, priority, outcome and, with
``metrics_users``, user: never a job's name. ``Metrics`` is the driver's side; a failure there is one
``metrics-failed`` line, and the night goes on.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime
from types import SimpleNamespace

from onite.core.errors import OniteError
from onite.core.state import Result
from onite.spool.counters import BUCKETS, OUTCOMES, Counters, every_host, update_counters
from onite.spool.paths import SpoolDir
from onite.spool.accounts import user_name
from onite.spool.scan import queued_stats, running_entries

MIN_EVERY = 1.0  # seconds between two writes of metrics_file during a drain, at least
COST_FACTOR = 10  # … and at least this many times what the last one took: at most a tenth of the driver's time
WAITS = ("not_before", "retry", "after", "pinned", "resources")  # onite.drain.verdicts' kinds of waiting


def _rank_label(rank: int) -> str:
    return "urgent" if rank == 0 else str(rank)


def collector(spool: SpoolDir, now: datetime, *, euid: int, host: str, counters: dict[str, Counters],
              leaving: str | None = None):
    """A collector of the spool's metrics as ``euid`` may see them (only a job's owner and root read its
    file, to tell whether it waits), the waits as ``host`` sees them. ``counters``: every host's.
    ``leaving``: a host whose driver is exiting, so no longer up. Raises SpoolIOError: a folder cannot be listed."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
    from prometheus_client.utils import floatToGoString

    from onite.drain import heartbeat as hb
    from onite.drain.verdicts import EXAMINE, waiting_jobs

    users = spool.config.metrics_users
    names: dict[int, str] = {}

    def who(uid: int) -> tuple[str, ...]:
        return (names.get(uid) or names.setdefault(uid, user_name(uid)),) if users else ()

    def gauge(name: str, doc: str, labels: list[str], counts: dict[tuple, float]):
        family = GaugeMetricFamily(name, doc, labels=labels + ["user"] * users)
        for key, value in sorted(counts.items()):
            family.add_metric(list(key), value)
        return family

    ranks = [rank for rank, _ in spool.queue_folders()]
    zero = {} if users else {(_rank_label(rank),): 0 for rank in ranks}
    queued, held, waiting, oldest = Counter(zero), Counter(zero), Counter(zero), {}
    stats = queued_stats(spool)
    for rank, ctime_ns, _, uid, is_held in stats:
        key = (_rank_label(rank), *who(uid))
        queued[key] += 1
        if is_held:
            held[key] += 1
        else:
            oldest[key[:1]] = min(oldest.get(key[:1], ctime_ns), ctime_ns)
    for row in waiting_jobs(spool, stats[:EXAMINE], now, euid=euid, host=host):
        if row["kind"] in WAITS:
            waiting[(_rank_label(row["priority"] or 0), *who(row["uid"]))] += 1
    running = Counter((entry.host, *who(entry.uid)) for entry in running_entries(spool))
    alive = {beat.host for beat in hb.live_beats(spool, now)} - {leaving}
    up = {(h,): float(h in alive) for h in {*counters, *(beat.host for beat in hb.beats(spool))}}
    families = [
        gauge("onite_queued_jobs", "Jobs in the queue, held and waiting ones included, by priority.",
              ["priority"], queued),
        gauge("onite_held_jobs", "Queued jobs that are held, by priority.", ["priority"], held),
        gauge("onite_waiting_jobs", "Queued jobs, not held, that cannot start now (a not-before time, a retry "
              f"back-off, a dependency, pinned to another host, no room), among the first {EXAMINE} in queue order.",
              ["priority"], waiting),
        gauge("onite_oldest_queued_job_timestamp_seconds", "When the oldest queued job that is not held got its "
              "place in the queue, by priority (Unix time).", ["priority"],
              {key: ns / 1e9 for key, ns in oldest.items()}),
        gauge("onite_running_jobs", "Jobs running (claimed by a driver), by host.", ["host"], running),
        gauge("onite_driver_up", "1 if a driver (or a daemon) of the host is alive now, by its heartbeat.",
              ["host"], up),
    ]
    finished = CounterMetricFamily("onite_jobs_finished", "Jobs finished, by outcome (done, failed, timeout, "
                                   "cancelled, lost), priority and host.", labels=["host", "outcome", "priority"]
                                   + ["user"] * users)
    per_host = {name: CounterMetricFamily(name, doc, labels=["host"]) for name, doc in (
        ("onite_job_attempts", "Runs of the finished jobs, retries included."),
        ("onite_job_retries", "Runs of the finished jobs that were retries."),
        ("onite_refused_files", "Files the driver set aside in refused/ (they never run)."),
        ("onite_cannot_record_stops", "Drains that stopped starting jobs because a record could not be written "
                                      "(exit 4)."))}
    run_time = HistogramMetricFamily("onite_job_run_seconds", "Run time of the finished jobs' last attempt.",
                                     labels=["host"])
    drains = {name: GaugeMetricFamily(name, doc, labels=["host"]) for name, doc in (
        ("onite_last_drain_start_timestamp_seconds", "When the host's last drain started (Unix time)."),
        ("onite_last_drain_end_timestamp_seconds", "When the host's last drain that ended ended (Unix time)."),
        ("onite_last_drain_exit_status", "The exit status of the host's last drain that ended: 0, or 4 when it "
                                         "could not record a run."),
        ("onite_last_completed_drain_timestamp_seconds", "When the host's last drain that ran to its end (it "
                                                         "drained the queue, or its window closed) ended (Unix time)."))}
    for h, c in sorted(counters.items()):
        rows = Counter() if users else Counter({(o, _rank_label(r)): 0 for o in OUTCOMES for r in ranks})
        for (outcome, priority, user), count in c.finished.items():
            rows[(outcome, priority, *((user,) if users else ()))] += count
        for key, count in sorted(rows.items()):
            finished.add_metric([h, *key], count)
        for name, value in zip(per_host, (c.attempts, c.retries, c.refused, c.cannot_record)):
            per_host[name].add_metric([h], value)
        cumulative = [sum(c.run_buckets[:i + 1]) for i in range(len(BUCKETS))]
        run_time.add_metric([h], [(floatToGoString(b), n) for b, n in zip(BUCKETS, cumulative)]
                            + [("+Inf", sum(c.run_buckets))], c.run_sum)
        for name, value in zip(drains, (c.drain_started, c.drain_ended, c.drain_exit, c.completed)):
            if value is not None:
                drains[name].add_metric([h], value.timestamp() if isinstance(value, datetime) else value)
    families += [finished, *per_host.values(), run_time, *drains.values()]
    return SimpleNamespace(collect=lambda: families)  # a collector of families built beforehand: one look at the spool


def metrics_text(spool: SpoolDir, now: datetime) -> str:
    """``onite metrics``: the spool's metrics in Prometheus' text format, from its files alone.
    Raises SpoolIOError: a folder cannot be listed."""
    from prometheus_client import generate_latest

    from onite.spool.settings import default_host

    return generate_latest(collector(spool, now, euid=os.geteuid(), host=default_host(spool.config),
                                    counters=every_host(spool))).decode()


class Metrics:
    """The side of whoever files results (a driver; root cancelling a queued job): what it counts goes to
    its host's counters at each ``flush``; a driver's ``tick`` flushes and writes ``metrics_file`` at most
    every MIN_EVERY seconds (one update a second, not one a job). What could not be saved (a full disk) is
    shown all the same, and saved at a later flush."""

    def __init__(self, spool: SpoolDir, host: str, log, clock) -> None:
        self.spool, self.host, self.log, self.clock = spool, host, log, clock
        self._pending: list = []  # changes to this host's counters, not saved yet
        self._dirty = False  # something changed since metrics_file was last written
        self._due = 0.0  # monotonic
        self._said: str | None = None  # the failure last logged, until a write succeeds

    def _count(self, change) -> None:
        self._pending.append(change)
        self._dirty = True

    def _failed(self, why: str) -> None:
        if why != self._said:
            self._said = why
            self.log.event("metrics-failed", error=why, note="the drain goes on")

    def filed(self, result: Result) -> None:
        self._count(lambda counters: counters.file(result))

    def one_more(self, field: str) -> None:
        """Count one more file set aside (``refused``), or drain stopped for a record (``cannot_record``)."""
        self._count(lambda counters: setattr(counters, field, getattr(counters, field) + 1))

    def drain_started(self, now: datetime) -> None:
        self._count(lambda counters: setattr(counters, "drain_started", now))

    def drain_ended(self, now: datetime, *, exit_status: int, completed: bool, leaving: bool) -> None:
        """Count the drain's end, save, and write the metrics now (``leaving``: this driver exits, so is not up)."""
        def ended(counters: Counters) -> None:
            counters.drain_ended, counters.drain_exit = now, exit_status
            if completed:
                counters.completed = now

        self._count(ended)
        self.tick(final=True, leaving=leaving)

    def _apply(self, counters: Counters) -> None:
        for change in self._pending:
            change(counters)

    def flush(self) -> None:
        """Add what was counted to the host's counters, in one update under their lock."""
        if not self._pending:
            return
        try:
            _, reset = update_counters(self.spool, self.host, self._apply)
        except OniteError as err:
            self._failed(str(err))
            return
        self._pending = []
        if reset:
            self.log.event("metrics-reset", host=self.host, error=reset, note="its counts start again from 0")

    def tick(self, *, final: bool = False, leaving: bool = False) -> None:
        """Flush, and write ``metrics_file``, if something changed and it is due (``final``: now)."""
        started = self.clock.monotonic()
        if not self._dirty or (not final and started < self._due):
            return
        self.flush()
        path = self.spool.config.metrics_file
        try:
            if path is not None:
                from prometheus_client import write_to_textfile

                counters = every_host(self.spool)
                if self._pending:  # not saved: shown all the same
                    self._apply(counters.setdefault(self.host, Counters(host=self.host)))
                write_to_textfile(path, collector(self.spool, self.clock.now(), euid=os.geteuid(), host=self.host,
                                                 counters=counters, leaving=self.host if leaving else None))
        except Exception as err:  # noqa: BLE001 - no failure of the metrics stops a night; it is said once
            self._failed(f"writing {path}: {type(err).__name__}: {err}")
        else:
            self._dirty = False
            if not self._pending:
                self._said = None
        self._due = started + max(MIN_EVERY, COST_FACTOR * (self.clock.monotonic() - started))
