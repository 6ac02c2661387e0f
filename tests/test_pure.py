"""Pure modules: names, durations, config, policy, eligibility (no files, no processes)."""

import re
from datetime import datetime, time, timedelta, timezone

import pytest

from onite.core.cells import priority_text
from onite.core.config import Config, SlurmConfig, parse_config
from onite.core.errors import ConfigError, InvalidInput
from onite.core.names import check_name, job_label, unique_name
from onite.core.policy import cutoff_state, may_touch, owner_or_root
from onite.core.queue import READY, DepState, Fail, Meta, Wait, evaluate, retry_delay, sort_folder
from onite.core.record import Record
from onite.spool.skeleton import skeleton_config
from onite.core.timeparse import format_duration, parse_clock, parse_duration, parse_stamp, parse_when

UTC = timezone.utc
NOW = datetime(2026, 11, 22, 21, 0, tzinfo=UTC)


# ---- names -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["a", "nightly-report", "backup.2026-11-22", "A_b.c-9", "x" * 100, "9lives"])
def test_valid_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name, why", [
    ("", "it is empty"), ("../x", "must start with an ASCII letter or a digit"), ("a/b", "only ASCII letters"),
    ("café", "only ASCII letters"),
    ("has space", "only ASCII letters"), ("x" * 101, "101 characters long"), ("line\nbreak", "only ASCII letters"),
    (".hidden", "must start with"), ("-opt", "must start with"), ("a@b", "only ASCII letters"), ("ümlaut", "must start"),
    ("tab\t", "only ASCII letters"),
])
def test_hostile_names_are_refused_with_a_reason(name, why):
    with pytest.raises(InvalidInput, match=why):
        check_name(name)


def test_unique_name_skips_taken_ones():
    taken = set()
    names = [unique_name("report", lambda n: n in taken or taken.add(n) or False) for _ in range(20)]
    assert len(set(names)) == 20 and all(n.startswith("report-") and len(n) == len("report-") + 6 for n in names)
    assert len(unique_name("x" * 100, lambda n: False)) == 100


def test_job_label_is_the_name_outside_the_spool():
    assert job_label("nightly-report") == "onite:nightly-report"


# ---- durations and times ------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [("90s", 90), ("2h", 7200), ("1h30m", 5400), ("45", 45), ("1d", 86400),
                                           ("1.5h", 5400), (" 10m ", 600)])
def test_durations(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "x", "1x", "-5", "0", "h1", "1h 30m", "1m1h2x", "1h1h", "30m1h", "1s1h"])
def test_bad_durations(text):
    with pytest.raises(InvalidInput, match="^duration '.*': expected a duration"):
        parse_duration(text)


def test_format_duration_round_trips():
    for text in ("1h30m", "90s", "1d2h", "45m"):
        assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)


def test_clock_and_when():
    assert parse_clock("07:00") == time(7, 0)
    with pytest.raises(InvalidInput):
        parse_clock("24:00")
    assert parse_when("+2h", NOW) == NOW + timedelta(hours=2)
    assert parse_when("now", NOW) == parse_when(" NOW ", NOW) == NOW
    assert parse_when("2026-11-23T02:00+00:00", NOW) == datetime(2026, 11, 23, 2, 0, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="^--at 'whenever': expected now, HH:MM"):
        parse_when("whenever", NOW)


def test_stamps_onite_wrote_parse_and_damaged_ones_are_none():
    assert parse_stamp("2026-11-22T21:00:00+00:00") == NOW
    assert parse_stamp(None) is None and parse_stamp("") is None
    assert parse_stamp("21:00 yesterday") is None and parse_stamp(42) is None


def test_a_record_is_a_namedtuple_of_its_annotated_fields():
    class Pair(Record):
        """Two numbers."""

        low: int
        high: int = 9
        LIMIT = 100  # not annotated: a class attribute, no field

        def __new__(cls, low: int, high: int = 9) -> "Pair":
            return super().__new__(cls, min(low, high), max(low, high))

        def width(self) -> int:
            return self.high - self.low

    pair = Pair(5, 2)
    assert (pair, pair.width(), tuple(pair), Pair(3)) == (Pair(2, 5), 3, (2, 5), (3, 9))
    assert (Pair._fields, Pair._field_defaults, Pair.LIMIT, Pair.__doc__) == (("low", "high"), {"high": 9}, 100,
                                                                             "Two numbers.")
    assert pair._replace(high=7) == (2, 7) and repr(pair) == "Pair(low=2, high=5)" and not hasattr(pair, "__dict__")
    with pytest.raises(AttributeError):
        pair.low = 1
    with pytest.raises(TypeError, match="follows one with a default"):
        class Bad(Record):  # noqa: F841 - the class statement is what fails
            first: int = 0
            second: int


def test_priority_text():
    assert [priority_text(True, None), priority_text(False, 3), priority_text(False, None),
            priority_text(False, None, unknown="?")] == ["urgent", "P3", "", "?"]


# ---- config -----------------------------------------------------------------------------------

def test_skeleton_holds_every_default():
    assert parse_config(skeleton_config()) == Config()
    text = skeleton_config()
    for key in ("priorities", "default_priority", "cutoff", "check_lock", "keep", "own_only", "shell", "slots",
                "schedule", "until", "admins", "timeout", "kill_grace", "retry_delay", "on_interrupt", "host",
                "max_job_size", "executor", "stderr_separate"):
        assert f"\n# {key} = " in text or f"\n{key} = " in text, key


def skeleton_settings():
    """(section, key, line, commented) of every ``key = value`` line of spool-skel/onite.toml, set or commented out."""
    section = ""
    for line in skeleton_config().splitlines():
        bare = line.lstrip("#").strip()
        if header := re.fullmatch(r"\[([a-z0-9_.]+)\]", bare):
            section = header.group(1)
        elif setting := re.match(r"([a-z_]+) = ", bare):
            yield section, setting.group(1), bare, line.startswith("#")


def test_skeleton_names_every_key_of_config():
    named = {f"{section}.{key}" if section else key for section, key, _, _ in skeleton_settings()}
    tables = {section.partition(".")[0] for section, _, _, _ in skeleton_settings() if section}
    assert named | tables >= set(Config._fields)
    assert named >= {f"slurm.{name}" for name in SlurmConfig._fields}


def test_skeletons_commented_defaults_are_configs_defaults():
    """A key commented out shows its default, unless it has none (unset): then the value is an example."""
    assert parse_config("") == Config()  # a key left out takes Config's default
    checked = []
    for section, key, line, commented in skeleton_settings():
        if section.startswith("hosts."):
            continue  # an example table: [hosts] is empty by default
        defaults = Config() if not section else getattr(Config(), section)
        default = getattr(defaults, key)
        if commented and default in (None, (), {}):
            continue
        parsed = parse_config(f"[{section}]\n{line}" if section else line)
        assert getattr(parsed if not section else getattr(parsed, section), key) == default, line
        checked.append(f"{section}.{key}" if section else key)
    assert {"priorities", "kill_grace", "max_job_size", "notify_timeout", "slurm.max_jobs", "slurm.poll",
            "slurm.nice_step"} <= set(checked)


def test_seed_defaults():
    config = Config()
    assert (config.priorities, config.default_priority, config.keep, config.slots) == (7, 4, 50, 1)
    assert config.schedule == ("0 20 * * *", "0 23 * * *") and config.own_only and not config.check_lock


@pytest.mark.parametrize("text, message", [
    ("slots = 0", "slots = 0 is not valid — write a whole number from 1 to 4096"),
    ("slot = 2", "unknown key 'slot' — did you mean 'slots'?"),
    ('cutoff = "25:00"', "cutoff = '25:00' is not valid"),
    ("default_priority = 9", "default_priority = 9 is not valid — write a whole number from 1 to 7"),
    ('schedule = ["0 20 * *"]', "schedule: cron expression '0 20 * *' has 4 fields, not 5 — write five fields"),
    ('on_interrupt = "retry"', 'write "requeue" or "fail"'),
    ("priorities = [", "not valid TOML"),
    ("check_lock = 1", "write true or false"),
    ('stderr_separate = "yes"', "write true or false"),
    ("max_pids = -1", "max_pids = -1 is not valid — write a whole number from 0 to 4194304"),
    ("max_pids = true", "max_pids = true is not valid"),
    ("max_templates = 0", "max_templates = 0 is not valid — write a whole number from 1 to 10000000"),
    ('max_templates = "50"', "max_templates = '50' is not valid"),
    ('pam = "yes"', 'write "auto" or "required" or "off"'),
    ('pam_service = "../shadow"', "pam_service = '../shadow' is not valid — write the name of a file in /etc/pam.d"),
    ('pam_service = ""', "pam_service = '' is not valid"),
])
def test_config_errors_name_key_and_fix(text, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("*", r"\*").replace("?", r"\?")):
        parse_config(text)


def test_a_key_set_twice_names_the_key_and_both_lines():
    # The shipped onite.toml sets every key, so an admin who appends "slots = 2" at its end sets it twice:
    # tomllib says only "Cannot overwrite a value", at "end of document" when the file has no last newline.
    for text in ("priorities = 7\nslots = 1\nkeep = 5\nslots = 2", "slots = 1\n\nslots = 2\n"):
        with pytest.raises(ConfigError) as caught:
            parse_config(text, "/srv/onite/onite.toml")
        first, second = [n + 1 for n, line in enumerate(text.splitlines()) if line.startswith("slots")]
        assert str(caught.value) == (f"/srv/onite/onite.toml: line {second}: slots is set twice (also at line "
                                     f"{first}) — keep one of the two lines")
    with pytest.raises(ConfigError, match=r"line 4: \[slurm\] is set twice \(also at line 1\)"):
        parse_config('[slurm]\npartition = "a"\n\n[slurm]\naccount = "b"\n')
    with pytest.raises(ConfigError, match=r"line 3: \[hosts.node1\] slots is set twice \(also at line 2\)"):
        parse_config("[hosts.node1]\nslots = 1\nslots = 2\n")


def test_reading_the_lines_for_a_fault_takes_no_time_on_a_long_line():
    # The line reading that says where a fault is (_assignments) matched a [table] line with runs of spaces that
    # could overlap: "[" and 4000 spaces took 40 s, and every onite command reads onite.toml. Run apart, so
    # that the old reading fails here by the bound rather than by running for hours.
    import subprocess
    import sys

    code = ("from onite.core.config import parse_config\n"
            "for text in ('[' + ' ' * 30000 + '\\n', '[' + '\\t' * 30000 + 'x =\\n', 'a = 1\\n' + ' ' * 30000):\n"
            "    try:\n        parse_config(text)\n    except Exception as err:\n        print(type(err).__name__)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.split() == ["ConfigError"] * 3, done.stderr


@pytest.mark.parametrize("text, message", [
    ('[hosts.node1]\nslots = 4\nuntil = "07:00"\n',
     "line 3: until is a top-level key, but it is inside [hosts.node1] — move it above the first [table] line"),
    ('[slurm]\npartition = "b"\n\nslots = 2\n',
     "line 4: slots is a top-level key, but it is inside [slurm] — move it above the first [table] line"),
])
def test_a_top_level_key_below_a_table_says_so(text, message):
    # A key written after a [table] line belongs to that table: appended at the end of a file whose
    # [hosts.NAME] or [slurm] table was uncommented, it was refused as a bad [hosts] table or a
    # "slurm.until" key, and nothing said where it had to go.
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert message in str(caught.value)


@pytest.mark.parametrize("expr, message", [
    ("0 25 * * *", "schedule: bad cron expression '0 25 * * *': '25' is not a valid hour field — the hour field "
                   "takes 0-23"),
    ("0 0 31 2 *", "schedule: cron expression '0 0 31 2 *' never fires: day '31' does not occur in month '2'"),
    ("0 0 30 feb mon", "never fires: day '30' does not occur in month 'feb'"),
    ("0 20 * * 8", "'8' is not a valid day-of-week field"),
    ("@daily", "cron shorthand '@daily' is not supported"),
])
def test_a_schedule_that_cannot_fire_is_a_bad_value_of_onite_toml(expr, message):
    """'0 25 * * *' passed the file's check (five fields): submit took jobs, and only cron, run --scheduled and
    the daemon refused it. It is refused as the file is read, as every bad key is; a reader goes on without it."""
    with pytest.raises(ConfigError) as caught:
        parse_config(f'schedule = ["0 20 * * *", "{expr}"]', "/srv/onite/onite.toml")
    assert str(caught.value).startswith("/srv/onite/onite.toml: ") and message in str(caught.value)
    assert caught.value.key == "schedule" and "\n" not in str(caught.value)
    skipped: list = []
    assert parse_config(f'schedule = ["{expr}"]\nslots = 2', skipped=skipped) == Config(slots=2)
    assert [err.key for err in skipped] == ["schedule"]


def test_reading_the_default_schedule_needs_no_croniter():
    """Every command reads onite.toml: the default schedule (plain daily times) is checked without croniter (a
    fifth of `onite status`); any other form is croniter's to read (onite.core.rules.compile_cron)."""
    import subprocess
    import sys

    code = "import sys; from onite.core.config import parse_config; parse_config(''); print('croniter' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_schedule_that_is_no_list_shows_a_schedule():
    with pytest.raises(ConfigError) as caught:
        parse_config('schedule = "0 20 * * *"')
    assert str(caught.value) == ("onite.toml: schedule = '0 20 * * *' is not valid — write a list of cron "
                                 'expressions, none empty, e.g. ["0 20 * * *", "0 23 * * *"]')
    with pytest.raises(ConfigError, match="admins = .* write a list of strings, none empty"):
        parse_config('admins = [""]')


@pytest.mark.parametrize("text, message", [
    ('timeout = "400d"', "timeout = '400d' is not valid — write a duration longer than zero and at most \"366d\""),
    ('kill_grace = "0s"', "kill_grace = '0s' is not valid — write a duration longer than zero and at most \"366d\""),
    ("reserve_mem = false", "reserve_mem = false is not valid"),
    ("reserve_cpus = false", "reserve_cpus = false is not valid"),
])
def test_an_out_of_range_duration_or_a_boolean_reserve_says_what_is_wrong(text, message):
    # A duration out of range was told only 'write a duration such as "90s"', which "400d" is; and
    # reserve_mem = false and reserve_cpus = false were taken as 0 (False == 0 in Python), a wrong type let by.
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert message in str(caught.value)


@pytest.mark.parametrize("text, message", [
    ("[slurm]\nmax_jobs = 0", "onite.toml [slurm]: max_jobs = 0 is not valid — write a whole number from 1 to 1000000"),
    ('[slurm]\nsbatch_args = "--mem=1G"',
     """onite.toml [slurm]: sbatch_args = '--mem=1G' is not valid — write a list of sbatch options, none empty, e.g. ["--qos=night"]"""),
    ('[hosts.node1]\nmemory = "4G"',
     "onite.toml: unknown key hosts.node1.memory — the [hosts.NAME] keys are slots, mem and cpus"),
])
def test_a_fault_in_a_table_names_the_table_and_its_own_example(text, message):
    # [slurm] max_jobs = 0 was told as a top-level "max_jobs", sbatch_args showed admins' ["alice", "%wheel"],
    # and a misspelt key in [hosts.NAME] was shown as the whole table "is not valid".
    with pytest.raises(ConfigError) as caught:
        parse_config(text)
    assert str(caught.value) == message


def test_pam_and_pids_keys():
    config = parse_config('max_pids = 0\npam = "required"\npam_service = "cron"\n')
    assert (config.max_pids, config.pam, config.pam_service) == (0, "required", "cron")
    assert (Config().max_pids, Config().pam, Config().pam_service) == (4096, "auto", "onite")


def test_max_templates_key():
    assert Config().max_templates == 100 and parse_config("max_templates = 3\n").max_templates == 3


def test_host_tables_override_slots():
    config = parse_config("slots = 2\n[hosts.big]\nslots = 8\n")
    assert config.slots_for("big") == 8 and config.slots_for("small") == 2


# ---- policy ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("clock, closed, reopen_day", [
    ("18:00", False, None), ("19:30", True, 23), ("23:59", True, 23), ("03:00", True, 22), ("07:00", False, None),
])
def test_cutoff_until_morning(clock, closed, reopen_day):
    hour, minute = map(int, clock.split(":"))
    now = datetime(2026, 11, 22, hour, minute, tzinfo=UTC)
    state = cutoff_state(now, time(19, 30), time(7, 0))
    assert state.closed is closed
    if closed:
        assert state.reopens.hour == 7 and state.reopens.day == reopen_day


def test_cutoff_without_until_reopens_at_midnight():
    state = cutoff_state(datetime(2026, 11, 22, 20, 0, tzinfo=UTC), time(19, 0), None)
    assert state.closed and state.reopens.day == 23 and state.reopens.hour == 0
    assert not cutoff_state(NOW, None, None).closed


def test_who_may_touch_a_job():
    assert may_touch(5, 5, True) and may_touch(0, 5, True) and not may_touch(6, 5, True) and may_touch(6, 5, False)
    assert owner_or_root(5, 5) and owner_or_root(0, 5) and not owner_or_root(6, 5) and not owner_or_root(5, 0)


# ---- ordering and eligibility ---------------------------------------------------------------------------

def test_order_is_urgent_then_priority_then_fifo_then_name():
    jobs = [(3, 10, "c"), (1, 50, "b"), (0, 99, "u"), (1, 20, "a"), (3, 10, "a2")]
    ordered = []
    for rank in sorted({j[0] for j in jobs}):  # the folders in run order, each sorted
        rows = [j for j in jobs if j[0] == rank]
        sort_folder(rows, ctime=1, name=2)
        ordered += rows
    assert [j[2] for j in ordered] == ["u", "a", "b", "a2", "c"]


def deps(states):
    return lambda name: states.get(name, DepState.MISSING)


def test_eligibility():
    later = NOW + timedelta(hours=1)
    assert evaluate(Meta(), held=False, now=NOW, host="h", dependency=deps({})) is READY
    assert evaluate(Meta(), held=True, now=NOW, host="h", dependency=deps({})) == Wait("held")
    assert evaluate(Meta(pin="other"), held=False, now=NOW, host="h", dependency=deps({})) == Wait("pinned to host other")
    assert evaluate(Meta(pin="h"), held=False, now=NOW, host="h", dependency=deps({})) is READY
    waiting = evaluate(Meta(not_before=later), held=False, now=NOW, host="h", dependency=deps({}))
    assert isinstance(waiting, Wait) and waiting.until == later
    assert evaluate(Meta(after=("a",)), held=False, now=NOW, host="h",
                    dependency=deps({"a": DepState.PENDING})) == Wait("after a")
    assert evaluate(Meta(after=("a", "b")), held=False, now=NOW, host="h",
                    dependency=deps({"a": DepState.OK, "b": DepState.OK})) is READY
    assert evaluate(Meta(after=("a", "b")), held=False, now=NOW, host="h",
                    dependency=deps({"a": DepState.OK, "b": DepState.FAILED})) == Fail("dependency b failed")
    assert evaluate(Meta(after=("a",)), held=False, now=NOW, host="h",
                    dependency=deps({"a": DepState.CANCELLED})) == Fail("dependency a was cancelled")
    assert "no longer exists" in evaluate(Meta(after=("gone",)), held=False, now=NOW, host="h",
                                          dependency=deps({})).reason


def test_retry_backoff_doubles_and_caps():
    assert [retry_delay(30, a) for a in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert retry_delay(30, 20) == 3600


def test_slurm_table():
    config = parse_config('executor = "slurm"\n[slurm]\npartition = "night"\nsbatch_args = ["--mem=1G"]\n'
                          'max_jobs = 8\npoll = "0.5s"\nnice_step = 500\n')
    slurm = config.slurm
    assert (slurm.partition, slurm.sbatch_args, slurm.max_jobs, slurm.nice_step) == ("night", ("--mem=1G",), 8, 500)
    assert slurm.poll.total_seconds() == 0.5 and parse_config("").slurm.nice_step == 10_000


@pytest.mark.parametrize("text, message", [
    ("[slurm]\nnice = 5", "unknown key slurm.nice"),
    ("[slurm]\nnice_step = -1", "nice_step = -1 is not valid"),
    ("[slurm]\nmax_jobs = 0", "max_jobs = 0 is not valid"),
])
def test_slurm_table_errors(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


# ---- report --since ------------------------------------------------------------------

EVENING = datetime(2026, 11, 22, 21, 0).astimezone()  # local: HH:MM times are the machine's wall clock


@pytest.mark.parametrize("text, since", [
    (None, EVENING - timedelta(hours=24)),
    ("12h", EVENING - timedelta(hours=12)),
    ("19:00", datetime(2026, 11, 22, 19, 0).astimezone()),  # this evening
    ("22:00", datetime(2026, 11, 21, 22, 0).astimezone()),  # not yet today: yesterday's
    ("2026-11-20T08:00+00:00", datetime(2026, 11, 20, 8, 0, tzinfo=UTC)),
])
def test_report_since(text, since):
    from onite.app.report import parse_since

    assert parse_since(text, EVENING) == since


@pytest.mark.parametrize("text", ["+2h", "tomorrow 08:00", "xyz"])
def test_report_since_refuses_the_future_and_nonsense(text):
    from onite.app.report import parse_since

    with pytest.raises(InvalidInput, match=r"^--since '.*': expected a duration such as 12h"):
        parse_since(text, EVENING)


# ---- wall-clock times across DST, in the machine's zone --------------------------------


@pytest.mark.parametrize("start, until, closes", [
    # 2026-03-29 02:00 CET -> 03:00 CEST: a skipped time is the jump, never an hour before it
    ("2026-03-28T22:00", time(2, 30), "2026-03-29T03:00:00+02:00"),
    ("2026-03-28T22:00", time(2, 0, 30), "2026-03-29T03:00:00+02:00"),
    ("2026-03-28T22:00", time(3, 30), "2026-03-29T03:30:00+02:00"),
    # 2026-10-25 03:00 CEST -> 02:00 CET: a repeated time is its first pass
    ("2026-10-24T22:00", time(2, 30), "2026-10-25T02:30:00+02:00"),
])
def test_the_drivers_window_end_follows_the_dst_policy_of_the_schedule(berlin_tz, start, until, closes):
    from onite.core.policy import window_end
    from onite.core.schedule import window_of

    begin = datetime.fromisoformat(start).astimezone()
    assert window_end(begin, until).isoformat() == closes
    assert window_of(begin, until).closes == window_end(begin, until)  # the daemon's window agrees


def test_an_at_time_the_clocks_skip_is_the_jump(berlin_tz):
    before = datetime(2026, 3, 29, 0, 0).astimezone()
    assert parse_when("02:30", before).isoformat() == "2026-03-29T03:00:00+02:00"
    assert parse_when("2026-03-29T02:30", before).isoformat() == "2026-03-29T03:00:00+02:00"


def test_a_change_of_state_off_the_machine_is_refused_before_anything_moves(tmp_path):
    from onite.spool.files import change_state
    from onite.core.state import InvalidTransition, JobState

    src, dst = tmp_path / "a", tmp_path / "b"
    src.write_text("x")
    with pytest.raises(InvalidTransition, match="cannot go from done to running"):
        change_state("a", JobState.DONE, JobState.RUNNING, src, dst, "claiming")
    assert src.exists() and not dst.exists()
    change_state("a", JobState.QUEUED, JobState.RUNNING, src, dst, "claiming")
    assert dst.exists() and not src.exists()


def test_an_empty_hosts_table_keeps_the_spools_slots():
    from onite.core.config import parse_config

    config = parse_config("slots = 3\n[hosts.node1]\n[hosts.node2]\nslots = 8\n")
    assert (config.slots_for("node1"), config.slots_for("node2"), config.slots_for("other")) == (3, 8, 3)


# ---- outcomes ------------------------------------------------------------------------------

def test_a_stop_by_onite_keeps_how_the_attempt_ended_and_says_why():
    from onite.core.state import Outcome, stopped_outcome

    ended = Outcome(signal=15)
    assert stopped_outcome(ended, "timeout", None) == Outcome(signal=15, timed_out=True)
    assert stopped_outcome(ended, "cancel", "bob") == Outcome(signal=15, cancelled_by="bob")
    assert stopped_outcome(Outcome(exit_code=143), "cancel", None) == Outcome(exit_code=143, cancelled_by="?")
    shutdown = stopped_outcome(ended, "shutdown", None)
    assert shutdown.describe() == "interrupted: the driver was stopped" and shutdown.signal == 15
    assert stopped_outcome(ended, None, None) is None


# ---- spool files ------------------------------------------------------------------------------

def test_a_file_being_spooled_is_settling_not_a_problem_until_it_is_claimed():
    import os
    import stat

    from onite.spool.filecheck import SETTLING, file_problem

    now_ns = 10**18

    def st(nlink, ctime_ns=now_ns - 10**8):
        return os.stat_result((stat.S_IFREG | 0o644, 1, 1, nlink, 1000, 1000, 10, 0, 0, 0, 0.0, 0.0, 0.0, 0, 0, ctime_ns))

    def problem(s, **kw):
        return file_problem(s, max_size=1 << 20, resolve_uid=lambda uid: None, **kw)

    assert problem(st(1)) == ""
    assert problem(st(2)) is SETTLING
    assert problem(st(2), may_settle=False) == "has 2 hard links"
    # how long it may settle is the caller's to bound (the driver counts from its first sight of it:
    # the ctime is the owner's to keep fresh with chmod)
    assert problem(st(2, ctime_ns=now_ns - 3 * 10**9)) is SETTLING
    assert problem(st(3)) == "has 3 hard links"


def test_urgent_needs_an_admin():
    from onite.core.errors import Refused
    from onite.core.identity import Identity
    from onite.core.policy import check_urgent, may_be_urgent, urgent_refusal

    alice = Identity(uid=1000, gid=1000, name="alice", home="/home/alice", shell="/bin/sh", groups=())
    root = Identity(uid=0, gid=0, name="root", home="/root", shell="/bin/sh", groups=())
    assert may_be_urgent(root, ()) and may_be_urgent(alice, ("alice",)) and not may_be_urgent(alice, ("bob",))
    wheel = Identity(uid=1000, gid=1000, name="alice", home="/", shell="/bin/sh", groups=(10,), group_names=lambda: ["wheel"])
    assert may_be_urgent(wheel, ("%wheel",)) and not may_be_urgent(alice, ("%wheel",))
    assert not may_be_urgent(wheel._replace(group_names=lambda: ["users"]), ("%wheel", "bob"))

    def unasked():
        raise AssertionError("groups looked up where admins names no %group")

    assert not may_be_urgent(alice._replace(group_names=unasked), ("bob",))
    assert may_be_urgent(root._replace(group_names=unasked), ("%wheel",))
    check_urgent(alice, ("alice",), "spool urgent jobs")
    with pytest.raises(Refused, match="only root and the admins named in onite.toml may spool urgent jobs"):
        check_urgent(alice, ("bob",), "spool urgent jobs")
    assert urgent_refusal("alice") == "urgent jobs need an admin; alice is not one"


def test_the_result_of_a_job_that_never_ran():
    from onite.core.state import JobState, unrun_result

    rec = unrun_result(name="alice:j", uid=1000, user="alice", state=JobState.FAILED, reason="refused: x", host="h", now=NOW)
    assert (rec.exit_code, rec.signal, rec.queued, rec.started, rec.duration) == (None, None, None, None, None)
    assert rec.submitted == rec.finished == NOW and (rec.priority, rec.urgent, rec.attempt, rec.attempts) == (0, False, 1, ())
    assert (rec.run_id, rec.recur, rec.stderr, rec.executor) == ("", None, "merged", "local")
    started = NOW - timedelta(hours=1)
    rec = unrun_result(name="alice:j", uid=1000, user="alice", state=JobState.CANCELLED, reason="cancelled by bob", host="",
                       now=NOW, priority=3, submitted=started - timedelta(hours=1), started=started, run_id="r1")
    assert rec.to_json()["duration"] == 3600.0 and rec.priority == 3 and rec.run_id == "r1"


def test_the_result_of_a_job_that_never_ran_takes_what_its_job_file_says():
    from onite.core.job import Attempt, Job
    from onite.core.state import JobState, unrun_result

    spooled = NOW - timedelta(hours=5)
    tried = Attempt(attempt=1, started=spooled, finished=spooled, host="h", exit_code=1)
    job = Job(name="alice:j", priority=6, submitted=spooled, host="h", umask=0o22, cwd=b"/", env={}, body=b"true\n",
              retries=1, attempt=2, tried=(tried,), recur="alice:nightly", stderr_separate=True)
    rec = unrun_result(name="alice:j", uid=1000, user="alice", state=JobState.FAILED, reason="x", host="h", now=NOW,
                       job=job, priority=1)
    assert (rec.priority, rec.submitted, rec.attempt, rec.attempts) == (6, spooled, 2, (tried,))
    assert (rec.recur, rec.stderr, job.stderr_mode) == ("alice:nightly", "separate", "separate")


def test_a_run_id_names_its_host_even_one_with_dashes():
    from datetime import datetime

    from onite.core.names import make_run_id, run_id_host

    run_id = make_run_id(datetime(2026, 11, 23, 1, 2, 3), "node-a-1", 4711, 3)
    assert run_id == "20261123T010203-node-a-1-4711-3" and run_id_host(run_id) == "node-a-1"
    assert run_id_host("not-one") is None


def test_a_job_key_is_user_colon_name_and_a_command_resolves_a_name_to_it():
    from onite.core.errors import InvalidInput
    from onite.core.names import is_valid_key, resolve, shown, split_key

    assert split_key("alice:build") == ("alice", "build")
    for good in ("alice:build", "_svc-1.x:b", "machine$:b"):
        assert is_valid_key(good), good
    for bad in ("", "build", ":build", "alice:", "a b:build", "alice:../x", "9lives:x:y", "alice:b c",
                "x" * 33 + ":b", "alice:b@run"):
        assert not is_valid_key(bad), bad
    assert resolve("build", "alice") == "alice:build" and resolve("bob:build", "alice") == "bob:build"
    for bad in ("", "a b", "bob:", ":x", "-x:build", ".x:build", "bob:a/b"):
        with pytest.raises(InvalidInput):
            resolve(bad, "alice")
    # an account useradd makes by default and POSIX allows may start with a digit: its jobs have keys too
    for account in ("9x", "1u", "123", "u-1", "a.b", "m$"):
        assert is_valid_key(f"{account}:build") and resolve(f"{account}:build", "alice") == f"{account}:build"
        assert resolve("build", account) == f"{account}:build" and shown(f"{account}:build", account) == "build"
    assert shown("alice:build", "alice") == "build" and shown("alice:build", "bob") == "alice:build"


def test_a_reason_names_its_jobs_as_its_reader_writes_them():
    from onite.core.queue import cycle_reason, reason_as_read

    assert reason_as_read("dependency build failed", "alice", "bob") == "dependency alice:build failed"
    assert reason_as_read("dependency bob:build was cancelled", "alice", "bob") == "dependency build was cancelled"
    assert reason_as_read("dependency build failed", "alice", "alice") == "dependency build failed"
    assert reason_as_read("dependency build failed", "alice", None) == "dependency build failed"
    damaged = "the result record of dependency b is damaged: whether it succeeded is unknown"
    assert reason_as_read(damaged, "alice", "root") == damaged.replace(" b ", " alice:b ")
    cycle = cycle_reason(["alice:a", "bob:b", "alice:a"], "alice")
    assert cycle == "dependency cycle: a → bob:b → a (none of them could ever run)"
    assert reason_as_read(cycle, "alice", "bob") == "dependency cycle: alice:a → b → alice:a (none of them could ever run)"
    for other in ("exit 3", "timeout", "cannot enter its directory /x: no such file", "dependency cycle: x"):
        assert reason_as_read(other, "alice", "bob") == other
