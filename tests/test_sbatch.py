"""Building the sbatch call for one job (pure: no cluster needed)."""

from datetime import timedelta

import pytest

from onite.core.config import SlurmConfig
from onite.exec.sbatch import (CD_FAILED, CD_GONE, CUT, MAX_ENV_STRING, UNSENT, as_owner_in, export_file, lost_controller,
                          nice_for, output_pattern, oversized_variable, parse_job_id, refusal, run_comment, run_of_comment, sbatch_argv, script_text,
                          time_limit_minutes, unsupported_directive)


def argv(**overrides):
    args = dict(name="nightly", cwd=b"/home/al\xffice", output=b"/var/spool/onite/stdout/nightly", env_fd=7,
                timeout=None, priority=3, urgent=False, slurm=SlurmConfig())
    args.update(overrides)
    return sbatch_argv("/usr/bin/sbatch", **args)


def test_argv_carries_every_promise():
    assert argv() == [
        b"/usr/bin/sbatch", b"--parsable", b"--no-requeue", b"--job-name=onite:nightly", b"--chdir=/home/al\xffice",
        b"--output=/var/spool/onite/stdout/nightly", b"--open-mode=append", b"--export-file=7", b"--nice=20000",
    ]


def test_requests_become_slurms_mem_and_cpus_per_task():
    got = argv(mem=4096, cpus=2)
    assert b"--mem=4096M" in got and b"--cpus-per-task=2" in got
    assert not any(a.startswith((b"--mem", b"--cpus")) for a in argv(mem=None, cpus=None))


def test_a_runs_comment_names_its_run_and_spool_and_is_read_back_only_for_that_spool():
    comment = run_comment("20261123T010203-node-a-4711-3", "/var/spool/onite")
    assert argv(comment=comment)[-1] == f"--comment={comment}".encode()
    assert comment.startswith("onite:20261123T010203-node-a-4711-3:") and "/var" not in comment
    assert run_of_comment(comment, "/var/spool/onite") == "20261123T010203-node-a-4711-3"
    assert run_of_comment(comment, "/srv/other-spool") is None
    assert run_of_comment("", "/var/spool/onite") is None and run_of_comment("a user's note", "/x") is None


def test_a_kept_apart_stderr_gets_its_own_escaped_pattern():
    got = argv(output=b"/spool/100%/stdout/j", error=b"/spool/100%/stdout/j@stderr")
    assert got[got.index(b"--output=/spool/100%%/stdout/j") + 1] == b"--error=/spool/100%%/stdout/j@stderr"
    assert not any(arg.startswith(b"--error") for arg in argv())  # without it stderr goes with stdout


def test_config_comes_first_so_onites_own_options_win():
    slurm = SlurmConfig(partition="night", account="ops", sbatch_args=("--mem=4G", "--output=/elsewhere"))
    got = argv(slurm=slurm, timeout=timedelta(seconds=90))
    assert got[1:6] == [b"--mem=4G", b"--output=/elsewhere", b"--partition=night", b"--account=ops", b"--time=2"]
    assert got.index(b"--output=/var/spool/onite/stdout/nightly") > got.index(b"--output=/elsewhere")


@pytest.mark.parametrize("seconds, minutes", [(1, 1), (59, 1), (60, 1), (61, 2), (90, 2), (3600, 60), (3601, 61)])
def test_time_limit_is_whole_minutes_rounded_up(seconds, minutes):
    assert time_limit_minutes(timedelta(seconds=seconds)) == minutes


@pytest.mark.parametrize("priority, urgent, nice", [(1, False, 0), (2, False, 10_000), (7, False, 60_000),
                                                    (5, True, 0)])
def test_priority_becomes_a_nice_value_users_may_set(priority, urgent, nice):
    assert nice_for(priority, urgent, 10_000) == nice
    assert f"--nice={nice}".encode() in argv(priority=priority, urgent=urgent)


def test_nice_step_comes_from_the_config():
    assert b"--nice=6" in argv(priority=4, slurm=SlurmConfig(nice_step=2))


def test_output_path_is_escaped_for_slurms_patterns():
    assert output_pattern(b"/spool/100%/stdout/j") == b"/spool/100%%/stdout/j"
    assert output_pattern(b"/spool/a\\b%j/x") == b"/spool/a\\b%j/x"  # a backslash already turns patterns off


def test_script_gets_the_configured_shell_only_without_a_shebang():
    assert script_text(b"echo hi\n", "/bin/bash") == b"#!/bin/bash\necho hi\n"
    assert script_text(b"", "/bin/sh") == b"#!/bin/sh\n"
    assert script_text(b"#!/usr/bin/env python3\nprint(1)\n", "/bin/sh") == b"#!/usr/bin/env python3\nprint(1)\n"


def test_export_file_is_exact_bytes():
    env = {b"A": b"line1\nline2", b"BASH_FUNC_f%%": b"() { echo; }", b"RAW": b"\xff\xfe$`\"'", b"EMPTY": b""}
    assert export_file(env) == (b"A=line1\nline2\0BASH_FUNC_f%%=() { echo; }\0RAW=\xff\xfe$`\"'\0EMPTY=\0")


def test_oversized_variable_is_named():
    assert oversized_variable({b"A": b"x" * (MAX_ENV_STRING - 3)}) is None  # "A=" + value + NUL fits exactly
    assert oversized_variable({b"OK": b"1", b"BIG": b"x" * MAX_ENV_STRING}) == f"BIG ({MAX_ENV_STRING} bytes)"


@pytest.mark.parametrize("line", [
    "#SBATCH --array=1-3", "#SBATCH --array 1-3", "#SBATCH -a 1-3", "#SBATCH -a1-3", "#SBATCH --wait",
    "#SBATCH -W", "#SBATCH -vW", "#SBATCH --mem=1G --wait", "#SBATCH hetjob",
    # getopt_long takes a long option cut short: sbatch reads these as --array (--arr=zz: "Invalid job array")
    "#SBATCH --arr=1-3", "#SBATCH --ar 1-3", "#SBATCH --arra=1-3",
    # sbatch submits nothing, exits 0 and says "Job 2396 to start at …" on stderr: onite filed that as
    # "sbatch did not accept it: Job 2396 to start at …", naming a job that does not exist
    "#SBATCH --test-only", "#SBATCH --test",
])
def test_directives_that_break_one_job_one_slurm_job_are_refused(line):
    problem = unsupported_directive(f"#!/bin/sh\n#SBATCH --mem=1G\n{line}\necho\n".encode())
    assert problem is not None and problem.startswith("'#SBATCH ")


@pytest.mark.parametrize("text", [
    "#!/bin/sh\n#SBATCH --mem=1G\n#SBATCH --account=a\n#SBATCH -J x\necho\n",
    "#!/bin/sh\necho first\n#SBATCH --array=1-3\n",  # after the first command: not a directive
    "#!/bin/sh\n# SBATCH --wait\necho\n",
    "#!/bin/sh\n#SBATCH --output=/tmp/a-W\n#SBATCH -p wait\n",
    "#!/bin/sh\n#SBATCH --time=5 # --wait in a comment\n",
    "#!/bin/sh\n#SBATCH --wait-all-nodes=1\n#SBATCH --account=arr\n",
    "#!/bin/sh\n#PBS -N t -l walltime=1:00 -A acct\n#PBS -o out-t\n",
    "#!/bin/sh\n#PBS -N \"x -t 1-3\"\n#SBATCH -J 'y --array=1-2'\n",  # one quoted word (sbatch: no array)
    "#!/bin/sh\n#PBS -N x#y -t 1-3\n",  # sbatch's comment starts mid-word (its job name is x, no array)
])
def test_ordinary_directives_pass(text):
    assert unsupported_directive(text.encode()) is None


@pytest.mark.parametrize("line", ["#PBS -t 1-3", "#PBS -J 1-3", "#PBS -t1-3", "#PBS -N x -t 1-3", "#PBS -ht 1-3",
                                  "#PBS --array=1-3", "#PBS --job_array=1-3", "#PBS --job_a=1-3", "#PBS --arr 1-3",
                                  "#PBS -N x\\ -t 1-3", "#PBS  -t 1-3"])
def test_pbs_lines_that_sbatch_reads_as_a_job_array_are_refused(line):
    """sbatch honours #PBS lines too, and takes Torque's -t and PBS Pro's -J for --array: one onite job ran as a
    Slurm job array (three runs of it for -t 1-3), filed as one done job."""
    problem = unsupported_directive(f"#!/bin/sh\n#PBS -l walltime=1:00\n{line}\necho\n".encode())
    assert problem is not None and problem.startswith("'#PBS "), problem


@pytest.mark.parametrize("line", ["#SBATCH -J x\\ --array=1-2", "#SBATCH --comment=a\\ -W", "#SBATCH -J 'a'\\ --wait"])
def test_a_backslash_before_a_space_joins_no_words_as_sbatch_splits_them(line):
    """sbatch's backslash takes the next character literally but a space still ends the word: 'x\\ --array=1-2' is
    two words to it (an array), one to a shell's splitting, which onite used, and which let it through."""
    problem = unsupported_directive(f"#!/bin/sh\n{line}\necho\n".encode())
    assert problem is not None and problem.startswith("'#SBATCH -"), problem


@pytest.mark.parametrize("line", ["#SBATCH HetJob", "#SBATCH HETJOB", "#SBATCH PackJob"])
def test_a_hetjob_separator_in_any_case_is_refused(line):
    """sbatch reads 'hetjob' in any case as the separator of a heterogeneous job: '#SBATCH HetJob' passed."""
    problem = unsupported_directive(f"#!/bin/sh\n#SBATCH -n1\n{line}\n#SBATCH -n1\necho\n".encode())
    assert problem is not None and "heterogeneous" in problem, problem


def test_wrapper_enters_the_directory_as_the_owner_then_execs_sbatch():
    wrapped = as_owner_in(b"/home/x y", [b"/usr/bin/sbatch", b"--parsable"])
    assert wrapped[:2] == [b"/bin/sh", b"-c"] and wrapped[3:] == [b"onite-sbatch", b"/home/x y", b"/usr/bin/sbatch",
                                                                  b"--parsable"]
    assert str(CD_FAILED).encode() in wrapped[2] and str(CD_GONE).encode() in wrapped[2]


def test_parse_job_id():
    assert parse_job_id(b"127\n") == "127"
    assert parse_job_id(b"128;cluster\n") == "128"
    assert parse_job_id(b"") is None and parse_job_id(b"Submitted batch job 5\n") is None


def test_refusal_is_one_line_without_sbatch_prefixes():
    err = b"sbatch: error: Batch script contains DOS line breaks (\\r\\n)\nsbatch: error: instead of expected UNIX line breaks (\\n).\n"
    assert refusal(err) == "Batch script contains DOS line breaks (\\r\\n) instead of expected UNIX line breaks (\\n)."
    assert refusal(b"") == "no message"


def test_refusal_of_a_big_script_says_why():
    err = b"sbatch: error: Batch job submission failed: Pathname of a file, directory or other parameter too long\n"
    assert refusal(err, 5 << 20).endswith(f"(the job text is {5 << 20} bytes; Slurm takes 4 MiB unless "
                                          "SchedulerParameters=max_script_size allows more)")


def test_what_sbatch_says_of_the_controller_is_told_apart_but_only_sends_the_driver_to_ask():
    """Lost after sending (the job may be submitted) wins over never reached, which an #SBATCH value its
    refusal echoes can also put in its words; neither is taken on its word (onite.exec.slurm asks Slurm)."""
    said = b"sbatch: error: Batch job submission failed: "
    assert lost_controller(said + b"Unable to contact slurm controller (connect failure)\n") == UNSENT
    assert lost_controller(said + b"Zero Bytes were transmitted or received\n") == CUT
    assert lost_controller(said + b"Socket timed out on send/recv operation\n") == CUT
    assert lost_controller(b"sbatch: error: invalid partition specified: connection refused\n" + said
                           + b"Unable to contact slurm controller (receive failure)\n") == CUT
    assert lost_controller(b"sbatch: error: invalid partition specified: connection refused\n") == UNSENT
    assert lost_controller(said + b"Invalid partition name specified\n") is None

