"""onite.toml → a frozen, validated Config (keys: docs/configuration.md). A bad value or an unknown key is an
error naming the key and what to write: a typo never falls back to a default.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from datetime import time, timedelta
from types import MappingProxyType

from onite.core.errors import ConfigError, InvalidInput
from onite.core.names import check_name
from onite.core.record import Record
from onite.core.resources import MAX_CPUS, parse_mem, parse_size
from onite.core.rules import compile_cron
from onite.core.timeparse import MAX_DURATION, format_duration, parse_clock, parse_duration
from onite.core.values import is_whole

DEFAULT_SCHEDULE = ("0 20 * * *", "0 23 * * *")
MAX_PRIORITIES = 99  # priority folders P1 … P99 at most; a job's priority is 1 … 99
MAX_RETRIES = 100  # a job is tried at most MAX_RETRIES + 1 times
MAX_SLOTS = 4096  # jobs at once on one host, at most (slots, [hosts.NAME] slots, --slots)
NOTIFY_HOW = ("none", "mail", "command")
NOTIFY_ON = ("failure", "always")
PAM_MODES = ("auto", "required", "off")
MAX_PIDS = 4_194_304  # the kernel's largest pid_max


class SlurmConfig(Record):
    """The ``[slurm]`` table: how the slurm executor hands jobs to the cluster."""

    partition: str | None = None
    account: str | None = None
    sbatch_args: tuple[str, ...] = ()
    max_jobs: int = 100
    poll: timedelta = timedelta(seconds=1)
    nice_step: int = 10_000  # --nice added per onite priority level (P1 and urgent: 0)


class HostConfig(Record):
    """A ``[hosts.NAME]`` table: what overrides the spool's settings on host NAME (None: nothing)."""

    slots: int | None = None
    mem: int | None = None  # MiB jobs may ask for there in all (default: the machine's, minus reserve_mem)
    cpus: int | None = None  # CPUs likewise (default: the machine's, minus reserve_cpus)


class Config(Record):
    """A spool's settings (see docs/configuration.md for each key)."""

    priorities: int = 7
    default_priority: int = 4
    cutoff: time | None = None
    check_lock: bool = False
    keep: int = 50
    max_templates: int = 100  # recurring-job templates of each user but root that are used (the first, by name)
    own_only: bool = True
    shell: str = "/bin/sh"
    slots: int = 1
    schedule: tuple[str, ...] = DEFAULT_SCHEDULE
    until: time | None = None
    admins: tuple[str, ...] = ()
    timeout: timedelta | None = None
    kill_grace: timedelta = timedelta(seconds=10)
    retry_delay: timedelta = timedelta(seconds=30)
    on_interrupt: str = "requeue"
    host: str | None = None
    max_job_size: int = 16 * 1024 * 1024
    max_output: int | None = None  # bytes one run of a local job may write to its output files (None: no limit)
    executor: str = "local"
    stderr_separate: bool = False  # default of submit --stderr-separate
    hosts: Mapping[str, HostConfig] = MappingProxyType({})  # host name → its overrides
    default_mem: int | None = None  # MiB a job that does not say asks for (None: none)
    default_cpus: int | None = None  # CPUs a job that does not say asks for (None: none)
    reserve_mem: int = 0  # MiB of the machine's memory kept out of the jobs' capacity
    reserve_cpus: int = 0  # CPUs likewise
    backfill: bool = False  # a later job may start past a waiting one if it cannot delay it
    order: str = "fifo"  # within a priority: "fifo" (first in, first out) or "fair" (onite.core.queue.fair_order)
    slurm: SlurmConfig = SlurmConfig()
    notify: str = "none"  # how a job's owner is told it finished: "none", "mail", "command"
    notify_on: str = "failure"  # "failure" or "always" (also done and cancelled)
    notify_command: tuple[str, ...] = ()  # the admin's hook: an absolute path and its arguments
    sendmail: str | None = None  # None: the first of SENDMAIL_PATHS that exists
    notify_timeout: timedelta = timedelta(seconds=30)
    contain: bool = True  # every process a job starts ends with it (onite.exec.contain)
    max_pids: int = 4096  # processes and threads one local job may have at once (its cgroup's pids.max; 0: no limit)
    pam: str = "auto"  # a PAM session for each local job's owner: "auto" (where the service exists), "required", "off"
    pam_service: str = "onite"  # the PAM service those sessions open (/etc/pam.d/NAME)
    metrics_file: str | None = None  # where the driver writes Prometheus metrics (onite.drain.metrics)
    metrics_users: bool = False  # metrics by user too (a ``user`` label)

    def slots_for(self, host: str) -> int:
        """Slots on ``host``: its ``[hosts.NAME]`` override, else ``slots``."""
        override = self.hosts.get(host)
        return override.slots if override is not None and override.slots is not None else self.slots


DEFAULTS = Config()  # each default is stated once, as its field's


def parse_config(text: str, source: str = "onite.toml", skipped: list[ConfigError] | None = None) -> Config:
    """Parse and validate an onite.toml. Given ``skipped`` (commands that only read), a wrong key or table takes
    its default and its error goes there. Raises ConfigError: bad TOML, an unknown key, or a bad value."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        return _refused(_set_twice(text, source) or ConfigError(f"{source} is not valid TOML: {err}",
                                                                "fix the line it names"), skipped)
    except RecursionError:  # tomllib recurses into nested arrays and tables: "a = [[[[…"
        return _refused(ConfigError(f"{source} nests arrays or tables too deeply", "flatten it"), skipped)
    while True:
        try:
            return _config_of(data, source, text)
        except ConfigError as err:
            if skipped is None or err.key not in data:
                return _refused(err, skipped)
            skipped.append(err)
            data = {key: value for key, value in data.items() if key != err.key}


def _refused(err: ConfigError, skipped: list[ConfigError] | None) -> Config:
    if skipped is None:
        raise err
    skipped.append(err)
    return DEFAULTS


# compiled only when a fault is located; each part matches one way only, so a line of spaces is read in linear time
_BARE_KEY = r"\s*([A-Za-z0-9_.-]+)\s*="
_TABLE_LINE = r"[ \t]*\[([ \t]*[A-Za-z0-9_.-][A-Za-z0-9_. \t-]*)\][ \t]*(#.*)?$"


def _assignments(text: str):
    """(line number, table, key) of each ``key = …`` line, key None for a ``[table]`` line: to say where a fault is."""
    table, table_line, bare_key = "", re.compile(_TABLE_LINE), re.compile(_BARE_KEY)
    for number, line in enumerate(text.splitlines(), 1):
        header = table_line.match(line)
        if header:
            table = "".join(header.group(1).split())
            yield number, table, None
        elif assign := bare_key.match(line):
            yield number, table, assign.group(1)


def _set_twice(text: str, source: str) -> ConfigError | None:
    """A key (or a [table]) set twice, with both its lines (tomllib says only "Cannot overwrite a value"), or None."""
    seen: dict[str, int] = {}
    for number, table, key in _assignments(text):
        name = f"[{table}]" if key is None else f"[{table}] {key}" if table else key
        if name in seen:
            return ConfigError(f"{source}: line {number}: {name} is set twice (also at line {seen[name]})",
                               "keep one of the two lines")
        seen[name] = number
    return None


def _config_of(data: dict, source: str, text: str = "") -> Config:
    reader = _Reader(data, source, DEFAULTS, text=text)
    priorities = reader.integer("priorities", low=1, high=MAX_PRIORITIES)
    config = Config(
        priorities=priorities,
        default_priority=reader.integer("default_priority", low=1, high=priorities),
        cutoff=reader.clock("cutoff"),
        check_lock=reader.boolean("check_lock"),
        keep=reader.integer("keep", low=0, high=10_000_000),
        max_templates=reader.integer("max_templates", low=1, high=10_000_000),
        own_only=reader.boolean("own_only"),
        shell=reader.path("shell"),
        slots=reader.integer("slots", low=1, high=MAX_SLOTS),
        schedule=reader.schedule("schedule"),
        until=reader.clock("until"),
        admins=reader.strings("admins"),
        timeout=reader.duration("timeout"),
        kill_grace=reader.duration("kill_grace"),
        retry_delay=reader.duration("retry_delay"),
        on_interrupt=reader.choice("on_interrupt", ("requeue", "fail")),
        host=reader.host("host"),
        max_job_size=reader.size("max_job_size"),
        max_output=reader.size("max_output", unset=True),
        executor=reader.choice("executor", ("local", "slurm")),
        stderr_separate=reader.boolean("stderr_separate"),
        hosts=reader.hosts("hosts"),
        slurm=reader.slurm("slurm"),
        contain=reader.boolean("contain"),
        max_pids=reader.integer("max_pids", low=0, high=MAX_PIDS),
        pam=reader.choice("pam", PAM_MODES),
        pam_service=reader.pam_service("pam_service"),
        default_mem=reader.mem("default_mem"),
        default_cpus=reader.cpus("default_cpus"),
        reserve_mem=reader.mem("reserve_mem", zero=True),
        reserve_cpus=reader.cpus("reserve_cpus", zero=True),
        backfill=reader.boolean("backfill"),
        order=reader.choice("order", ("fifo", "fair")),
        metrics_file=reader.path("metrics_file", "/var/lib/prometheus/node-exporter/onite.prom", unset=True),
        metrics_users=reader.boolean("metrics_users"),
        **reader.notify(),
        sendmail=reader.path("sendmail", "/usr/sbin/sendmail", unset=True),
        notify_timeout=reader.duration("notify_timeout"),
        notify_on=reader.choice("notify_on", NOTIFY_ON),
    )
    reader.no_unknown_keys()
    if config.cutoff is not None and config.cutoff == (config.until or time(0, 0)):
        # closed from the cutoff until the next such time: a whole day, every day
        reopen = f'until = "{config.until:%H:%M}"' if config.until else "midnight (until is unset)"
        raise ConfigError(f'{source}: cutoff = "{config.cutoff:%H:%M}" is when spooling would open again, '
                          f"at {reopen}, so it would never open",
                          "set cutoff before until (e.g. cutoff = \"19:30\", until = \"07:00\"), or leave it out",
                          "cutoff")
    return config


MAX_SIZE = 1024**4  # 1T: max_job_size beyond this is a typo, not a job
_TOP_KEYS = frozenset(Config._fields)  # every key of onite.toml is a field of Config


class _Reader:
    """Typed access to parsed TOML: a key left out takes its ``defaults``' value; a bad value is a ConfigError."""

    def __init__(self, data: dict[str, object], source: str, defaults: object, within: str | None = None,
                 text: str = "") -> None:
        self.data = data
        self.text = text  # to say on which line a key is
        self.source = source
        self.defaults = defaults
        self.within = within  # the top-level key of the table read, if it is one: where its faults are

    def _default(self, key: str):
        return getattr(self.defaults, key)

    def _bad(self, key: str, value: object, want: str) -> ConfigError:
        # a boolean as the file spells it (reserve_mem = false), not as Python does (False)
        shown = ("true" if value else "false") if isinstance(value, bool) else repr(value)
        return ConfigError(f"{self.source}: {key} = {shown} is not valid", f"write {want}",
                           self.within or key.split(".")[0])

    def _checked(self, key: str, ok, want: str):
        value = self.data.get(key, self._default(key))
        if not ok(value):
            raise self._bad(key, value, want)
        return value

    def integer(self, key: str, *, low: int, high: int) -> int:
        return self._checked(key, lambda value: is_whole(value, low, high), f"a whole number from {low} to {high}")

    def boolean(self, key: str) -> bool:
        return self._checked(key, lambda value: isinstance(value, bool), "true or false")

    def _parsed(self, key: str, parse, want: str, unset: tuple = ("",)):
        """``parse(value)``, or the default where the key is left out or ``unset``."""
        value = self.data.get(key)
        if key not in self.data or (value in unset and not isinstance(value, bool)):  # False == 0: no reserve
            return self._default(key)
        try:
            return parse(value)
        except (InvalidInput, TypeError):
            raise self._bad(key, value, want) from None

    def clock(self, key: str) -> time | None:
        return self._parsed(key, lambda value: value.replace(second=0, microsecond=0) if isinstance(value, time)
                            else parse_clock(str(value), what=key), '"HH:MM", e.g. "07:00", or leave it out')

    def duration(self, key: str) -> timedelta | None:
        return self._parsed(key, lambda value: parse_duration(str(value), what=key),
                            f'a duration longer than zero and at most "{format_duration(MAX_DURATION)}", such as '
                            '"90s", "30m" or "2h" (a bare number is seconds)')

    def path(self, key: str, example: str = "/bin/sh", *, unset: bool = False) -> str | None:
        """An absolute path; ``unset``: leaving it out (or "") means none."""
        if unset and self.data.get(key, "") == "":
            return self._default(key)
        return self._checked(key, lambda value: isinstance(value, str) and value.startswith("/") and "\0" not in value,
                             f'an absolute path such as "{example}"')

    def strings(self, key: str, example: str = '["alice", "%wheel"]', what: str = "strings") -> tuple[str, ...]:
        return tuple(self._checked(key, lambda value: isinstance(value, (list, tuple))
                                   and all(isinstance(v, str) and v for v in value),
                                   f"a list of {what}, none empty, e.g. {example}"))

    def schedule(self, key: str) -> tuple[str, ...]:
        exprs = self.strings(key, '["0 20 * * *", "0 23 * * *"]', "cron expressions")
        for expr in exprs:
            try:
                compile_cron(expr)  # one that cannot parse, or never fires, is refused here, not first at night
            except InvalidInput as err:
                raise ConfigError(f"{self.source}: {key}: {err.what}", err.hint, key) from None
        return exprs

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        return self._checked(key, lambda value: value in choices, " or ".join(f'"{c}"' for c in choices))

    def host(self, key: str) -> str | None:
        return self._parsed(key, lambda value: check_name(value, what="host name"),
                            "a host name of letters, digits, '.', '_' and '-'")

    def pam_service(self, key: str) -> str:
        return self._checked(key, lambda value: isinstance(value, str) and value.isascii()
                             and value[:1] not in ("", ".") and all(c.isalnum() or c in "._-" for c in value),
                             'the name of a file in /etc/pam.d, e.g. "onite"')

    def size(self, key: str, *, unset: bool = False) -> int | None:
        """A size in bytes from 1K to 1T; ``unset``: leaving it out (or "") means none."""
        want = 'a size from 1K to 1T such as "16M" or "1G" (a bare number is MiB)'
        size = self._parsed(key, lambda value: parse_size(str(value), what=key), want, ("",) if unset else ())
        if size is not None and not 1 <= size <= MAX_SIZE:
            raise self._bad(key, self.data[key], want)
        return size

    def _table(self, table: str, label: str, entry: object, keys: tuple[str, ...], want: str) -> None:
        """Raises ConfigError: ``entry`` is no table, or holds a key not of ``keys``."""
        if not isinstance(entry, dict):
            raise self._bad(table, entry, want)
        stray = sorted(set(entry) & (_TOP_KEYS - set(keys)))
        if stray:
            line = next((f"line {number}: " for number, where, key in _assignments(self.text)
                         if where == table and key == stray[0]), "")
            raise ConfigError(f"{self.source}: {line}{stray[0]} is a top-level key, but it is inside [{table}]",
                              "move it above the first [table] line: a key below one belongs to that table",
                              table.split(".")[0])
        unknown = sorted(set(entry) - set(keys))
        if unknown:
            raise ConfigError(f"{self.source}: unknown key {table}.{unknown[0]}",
                              f"the [{label}] keys are {', '.join(keys[:-1])} and {keys[-1]}", table.split(".")[0])

    def hosts(self, key: str) -> dict[str, HostConfig]:
        table = self.data.get(key, {})
        if not isinstance(table, dict):
            raise self._bad(key, table, "tables like [hosts.node1] with slots = 4")
        result = {}
        for name, entry in table.items():
            try:  # a table no driver's host name can match would set nothing, or keep a job waiting for it
                check_name(name, what="host name")
            except InvalidInput as err:
                raise ConfigError(f"{self.source}: a [hosts.NAME] table has an {err.what}", err.hint, key) from None
            self._table(f"{key}.{name}", "hosts.NAME", entry, HostConfig._fields,
                        'a table holding slots = N, mem = "64G", cpus = N')
            sub = _Reader(entry, f"{self.source} [hosts.{name}]", HostConfig(), key)
            host = HostConfig(slots=sub.integer("slots", low=1, high=MAX_SLOTS) if "slots" in entry else None,
                              mem=sub.mem("mem"), cpus=sub.cpus("cpus"))
            if host != HostConfig():  # an empty [hosts.NAME] overrides nothing
                result[name] = host
        return result

    def mem(self, key: str, *, zero: bool = False) -> int | None:
        """A memory size in MiB; ``zero``: 0 is allowed too."""
        return self._parsed(key, lambda value: parse_mem(str(value), what=key),
                            'a size such as "4G" or "512M" (a bare number is MiB)', ("", 0, "0") if zero else ("",))

    def cpus(self, key: str, *, zero: bool = False) -> int | None:
        """A CPU count; ``zero``: 0 is allowed too."""
        if key not in self.data:  # integer() would refuse default_cpus' None
            return self._default(key)
        return self.integer(key, low=0 if zero else 1, high=MAX_CPUS)

    def slurm(self, key: str) -> SlurmConfig:
        table = self.data.get(key, {})
        self._table(key, key, table, SlurmConfig._fields, "a [slurm] table")
        sub = _Reader(table, f"{self.source} [slurm]", SlurmConfig(), key)
        for optional in ("partition", "account"):
            if optional in table and not isinstance(table[optional], str):
                raise self._bad(f"slurm.{optional}", table[optional], "a string")
        return SlurmConfig(
            partition=table.get("partition") or None,  # "" is unset, as left out
            account=table.get("account") or None,
            sbatch_args=sub.strings("sbatch_args", '["--qos=night"]', "sbatch options"),
            max_jobs=sub.integer("max_jobs", low=1, high=1_000_000),
            poll=sub.duration("poll"),
            # 98 steps (P99) must stay below Slurm's largest nice, 2147483645
            nice_step=sub.integer("nice_step", low=0, high=20_000_000),
        )

    def notify(self) -> dict:
        """``notify`` and ``notify_command``, checked together: "command" needs a command."""
        how = self.choice("notify", NOTIFY_HOW)
        command = self.data.get("notify_command", "")  # the default: none (DEFAULTS.notify_command, ())
        if not isinstance(command, str):
            raise self._bad("notify_command", command, 'a command line such as "/usr/local/bin/onite-hook --chat"')
        argv = ()
        if command:  # shlex only for a hook set: it imports string, whose Template compiles a regex at import
            import shlex

            try:
                argv = tuple(shlex.split(command))
            except ValueError as err:
                raise self._bad("notify_command", command, f"a command line with balanced quotes ({err})") from None
        if argv and not argv[0].startswith("/"):
            raise self._bad("notify_command", command, 'an absolute path first, e.g. "/usr/local/bin/onite-hook"')
        if how == "command" and not argv:
            raise ConfigError(f'{self.source}: notify = "command" needs notify_command',
                              'set notify_command = "/path/to/hook", or use notify = "mail"', "notify")
        return {"notify": how, "notify_command": argv}

    def no_unknown_keys(self) -> None:
        unknown = sorted(set(self.data) - _TOP_KEYS)
        if unknown:
            import difflib

            close = difflib.get_close_matches(unknown[0], sorted(_TOP_KEYS), n=1)
            hint = f"did you mean {close[0]!r}?" if close else "see docs/configuration.md for the keys"
            raise ConfigError(f"{self.source}: unknown key {unknown[0]!r}", hint, unknown[0])
