"""Reading squeue's answers and mapping Slurm's endings to outcomes (pure: no cluster needed)."""

from datetime import datetime

import pytest

from onite.exec.squeue import (JobStatus, decode_status, is_unknown_ids, lost, never_reason, never_starts, outcome, parse,
                          parse_search, query_argv, search_argv)


def status(state, raw=0, reason="None", start=None):
    return JobStatus(job_id="42", state=state, status=raw, reason=reason, uid=1000, start=start)


def test_query_asks_once_for_all_ids_including_finished_ones():
    argv = query_argv("/usr/bin/squeue", ["1", "22", "333"])
    assert argv[:6] == ["/usr/bin/squeue", "-h", "-t", "all", "-j", "1,22,333"]
    assert argv[6] == "-O" and argv[7].startswith("JobID:|,State:|,exit_code:|")


def test_a_search_by_name_reads_ids_states_and_comments():
    assert search_argv("/usr/bin/squeue", "onite:j", 1000) == ["/usr/bin/squeue", "-h", "-t", "all", "-u", "1000",
                                                               "-n", "onite:j", "-O", "JobID:|,State:|,Comment:|"]
    text = "12|RUNNING|onite:20261123T010203-vm-1-1:0123456789abcdef|\n13|PENDING|(null)|\n\ngarbage\n"
    assert parse_search(text) == [("12", "RUNNING", "onite:20261123T010203-vm-1-1:0123456789abcdef"),
                                  ("13", "PENDING", "(null)")]


def test_parse_lines_as_squeue_prints_them():
    text = ("28|FAILED|768|NonZeroExitCode|2026-11-22T04:49:19|1000|30000|vm|2026-11-22T04:50:00|0|\n"
            "29|PENDING|0|Priority|2026-11-22T09:00:00|alice(1000)|0||Unknown|0|\n"
            "30|RUNNING|0|None|2026-11-22T04:50:01|0|-5|vm|Unknown|0|\n"
            "garbage\n\n")
    got = parse(text)
    assert set(got) == {"28", "29", "30"}
    assert got["28"].state == "FAILED" and got["28"].status == 768 and got["28"].reason == "NonZeroExitCode"
    assert got["28"].uid == 1000 and got["28"].is_final
    assert got["28"].start == datetime(2026, 11, 22, 4, 49, 19).astimezone()
    assert got["29"].start is None and got["29"].uid == 1000  # a pending job's StartTime is only the scheduler's guess
    assert got["30"].uid == 0 and not got["30"].is_final
    assert [got[job_id].nice for job_id in ("28", "29", "30")] == [30000, 0, -5]  # its owner may lower a positive one
    assert got["28"].end == datetime(2026, 11, 22, 4, 50).astimezone() and got["30"].end is None  # not over yet


@pytest.mark.attack
def test_what_a_jobs_owner_writes_is_never_asked_for_and_a_forged_line_is_never_taken():
    """A user may rename their own Slurm job to any text, newlines included: the name
    ``onite:att\\n596|FAILED|256|None|…|onite:vic`` made squeue's answer hold a second line for
    daemon's job 596, which root then filed as failed while it ran, and a ``²`` for a status crashed
    the driver. The query asks for no field a user can write, a field must look as Slurm writes it,
    and an id told twice is not taken at all."""
    assert "Name" not in query_argv("squeue", ["1"])[-1] and "Comment" not in query_argv("squeue", ["1"])[-1]
    assert parse("31|RUNNING|\u00b2|None|N/A|1|0|vm|Unknown|0|\n") == {}
    assert parse("\u0661|RUNNING|0|None|N/A|1|0|vm|Unknown|0|\n") == {}  # an Arabic-Indic digit to str.isdigit
    assert parse("5|RUNNING|0|None|N/A|1|0|vm|Unknown|0|\n5|FAILED|256|None|N/A|1|0|vm|Unknown|0|\n") == {}
    assert parse("7|running|0|None|N/A|1|0|vm|Unknown|0|\n7 x|RUNNING|0|None|N/A|1|0|vm|Unknown|0|\n") == {}


def test_unparsable_start_time_is_none():
    assert parse("5|FAILED|4021|JobLaunchFailure||1000|0|vm|Unknown|0|\n")["5"].start is None
    assert parse("5|COMPLETED|0|None|N/A|1000|\u00b2|vm|Unknown|0|\n")["5"].start is None
    # no nice is no reason to lose a job
    assert parse("5|COMPLETED|0|None|N/A|1000|\u00b2|vm|Unknown|0|\n")["5"].nice is None


def test_unknown_ids_are_told_apart_from_an_unreachable_controller():
    assert is_unknown_ids(1, "slurm_load_jobs error: Invalid job id specified\n")
    assert not is_unknown_ids(1, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n")
    assert not is_unknown_ids(0, "")


@pytest.mark.parametrize("raw, decoded", [(0, (0, None)), (768, (3, None)), (9, (None, 9)), (15, (None, 15)),
                                          (143 << 8, (143, None)), (None, (None, None))])
def test_decode_raw_wait_status(raw, decoded):
    assert decode_status(raw) == decoded


def test_completed_and_failed_carry_exit_code_or_signal():
    assert outcome(status("COMPLETED"), stopping=None, cancelled_by=None).ok
    failed = outcome(status("FAILED", 768, "NonZeroExitCode"), stopping=None, cancelled_by=None)
    assert failed.exit_code == 3 and failed.describe() == "exit 3"
    killed = outcome(status("FAILED", 9, "JobLaunchFailure"), stopping=None, cancelled_by=None)
    assert killed.signal == 9 and killed.describe() == "signal 9 (SIGKILL)"


def test_launch_failure_is_explained():
    got = outcome(status("FAILED", 4021, "JobLaunchFailure"), stopping=None, cancelled_by=None)
    assert got.describe().startswith("Slurm could not launch it (JobLaunchFailure")
    assert not got.ok


@pytest.mark.parametrize("stopping, described", [
    ("cancel", "cancelled by alice"), ("timeout", "timeout"), ("shutdown", "interrupted: the driver was stopped"),
    (None, "cancelled by scancel, outside onite"),
])
def test_cancelled_says_who_or_why(stopping, described):
    got = outcome(status("CANCELLED", 15), stopping=stopping, cancelled_by="alice")
    assert got.describe() == described


def test_slurms_own_time_limit_is_a_timeout():
    assert outcome(status("TIMEOUT", 15, "TimeLimit"), stopping=None, cancelled_by=None).describe() == "timeout"


@pytest.mark.parametrize("state", ["NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "DEADLINE"])
def test_cluster_failures_name_the_slurm_state(state):
    got = outcome(status(state, 9, "NodeDown"), stopping=None, cancelled_by=None)
    assert got.describe() == f"ended by Slurm: {state} (NodeDown)" and got.state.value == "failed"
    assert got.retryable is (state in ("NODE_FAIL", "BOOT_FAIL", "PREEMPTED"))  # the cluster failed, not the job


def test_a_job_that_ended_on_its_own_is_recorded_as_it_ended_even_if_cancel_raced():
    assert outcome(status("COMPLETED"), stopping="cancel", cancelled_by="bob").describe() == ""
    assert outcome(status("FAILED", 256), stopping="timeout", cancelled_by=None).describe() == "exit 1"


def test_a_job_that_ended_before_slurm_gave_it_a_node_never_started():
    """Slurm sets the StartTime of a job cancelled while pending to the moment of its cancel: onite
    recorded that as its start ('slurm-start … waited=6.1s', STARTED and TOOK in list) though it never
    ran. Such a job has no node: no start, and its result none."""
    got = parse("9|CANCELLED|0|None|2026-11-22T04:49:19|1000|30000||Unknown|0|\n"
                "10|CANCELLED|15|None|2026-11-22T04:49:19|1000|30000|vm|Unknown|0|\n")
    assert got["9"].start is None and not got["9"].allocated
    assert got["10"].start == datetime(2026, 11, 22, 4, 49, 19).astimezone() and got["10"].allocated
    pending_cancel = outcome(got["9"], stopping="cancel", cancelled_by="alice")
    assert pending_cancel.describe() == "cancelled by alice" and pending_cancel.never_started
    assert not outcome(got["10"], stopping="cancel", cancelled_by="alice").never_started
    assert parse("11|PENDING|0|Priority|2026-11-22T09:00:00|1000|0||Unknown|0|\n")["11"].allocated  # in flight
    assert parse("13|PENDING|0|BeginTime|N/A|1000|0||Unknown|1|\n")["13"].restarts == 1  # requeued once
    assert parse("13|PENDING|0|BeginTime|N/A|1000|0||Unknown|N/A|\n")["13"].restarts == 0
    # an #SBATCH --deadline it could not meet: DEADLINE before it ever had a node (it was filed with a start)
    deadline = outcome(parse("12|DEADLINE|0|DeadLine|2026-11-22T04:49:19|1000|0||Unknown|0|\n")["12"],
                       stopping=None, cancelled_by=None)
    assert deadline.describe() == "ended by Slurm: DEADLINE (DeadLine)" and deadline.never_started


def test_lost_names_the_job():
    assert lost("77").describe() == "lost: Slurm forgot job 77"


def test_only_a_reason_that_means_never_makes_a_pending_job_unstartable():
    """PartitionConfig and its kin mean Slurm can never start the job as the cluster is; Resources, Priority,
    a hold, a QOS limit or a node down (ReqNodeNotAvail) end as things change, and the job waits."""
    assert never_starts(status("PENDING", reason="PartitionConfig"))
    assert never_starts(status("PENDING", reason="BadConstraints"))
    for reason in ("Resources", "Priority", "Dependency", "JobHeldUser", "JobHeldAdmin", "QOSMaxCpuPerUserLimit",
                   "ReqNodeNotAvail, UnavailableNodes:vm", "PartitionDown", "None"):
        assert not never_starts(status("PENDING", reason=reason)), reason
    assert not never_starts(status("CANCELLED", reason="PartitionConfig"))
    job = status("PENDING", reason="PartitionConfig")
    assert never_reason(job, "64|1|\n") == ("Slurm can never start it: PartitionConfig (it asks for 64 CPUs on "
                                            "1 node; it violates a limit of its partition)")
    assert never_reason(job, "") == "Slurm can never start it: PartitionConfig (it violates a limit of its partition)"
    assert never_reason(job, "6\n4|x\n") == never_reason(job, "")  # not as Slurm writes it: no detail


def test_a_started_jobs_nodes_are_taken_only_as_slurm_writes_a_node_list():
    """list and report show where Slurm runs a job: its NodeList, once it started, if it is a node list."""
    def nodes(state, text):
        return parse(f"9|{state}|0|None|2026-11-22T04:50:01|1000|0|{text}|Unknown|0|\n")["9"].nodes

    assert nodes("RUNNING", "vm") == "vm"
    assert nodes("COMPLETED", "n[01-04,07],gpu-2.a_b") == "n[01-04,07],gpu-2.a_b"
    assert nodes("PENDING", "n1") is None  # a pending job's node is only the scheduler's plan
    assert nodes("CANCELLED", "(null)") is None
    for text in ("\x1b[2Jvm", "n1 n2", "n1;id", "n\u00b9", "(null)", "n" * 201):
        assert nodes("RUNNING", text) is None, text
    assert nodes("RUNNING", "n" * 200) == "n" * 200
