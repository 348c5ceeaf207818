"""Budgets on hand-made records: what breaches, what cannot be judged, the exit codes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from offloadprobe.attach import cells, verdict
from offloadprobe.attach.verdict import Budgets
from offloadprobe.core.errors import UsageError
from tests.unit import attach_fakes as fake

MIB = 1024**2


def test_limits_parse_bytes_and_ratios_and_refuse_the_rest_in_one_line():
    b = Budgets.parse(host_peak="1.1x", host_growth="1GiB", node_peak="1700GiB")
    assert b.host_peak.ratio == 1.1 and b.host_peak.nbytes is None
    assert b.host_growth.nbytes == 1024**3
    assert b.node_peak.nbytes == 1700 * 1024**3
    assert b.words == ("--max-host-peak 1.1x", "--max-host-growth 1GiB", "--max-node-peak 1700GiB")
    with pytest.raises(UsageError, match=r"^cannot parse --max-node-peak '2x': .* 512MiB"):
        Budgets.parse(host_peak=None, host_growth=None, node_peak="2x")
    with pytest.raises(UsageError, match=r"like 1\.1x or a size like 6GiB"):
        Budgets.parse(host_peak="lots", host_growth=None, node_peak=None)
    with pytest.raises(UsageError, match=r"^--max-node-peak 1700 has no unit: .* 1700MiB$"):
        Budgets.parse(host_peak=None, host_growth=None, node_peak="1700")
    with pytest.raises(UsageError, match=r"^--max-host-peak '40' has no unit: write 40x .* 40GiB"):
        Budgets.parse(host_peak="40", host_growth=None, node_peak=None)


@pytest.mark.parametrize("text", ["1.1x", "1.1X", "1.1×", "6GiB", "40", "lots", "0"])
def test_the_host_peak_grammar_is_every_verbs(text):
    """``attach --max-host-peak`` reads a word as ``run``'s does: the same multiple, the
    same size, the same one-line refusal."""
    from offloadprobe.core.budgets import parse_host_peak

    def parsed(parse):
        try:
            return parse(), None
        except UsageError as exc:
            return None, str(exc)

    ours, our_error = parsed(
        lambda: Budgets.parse(host_peak=text, host_growth=None, node_peak=None)
    )
    run, run_error = parsed(lambda: parse_host_peak(text))
    assert our_error == run_error
    if run is not None:
        assert (ours.host_peak.ratio, ours.host_peak.nbytes) == (run.limit_x, run.limit_bytes)


def test_saved_budget_words_parse_back_and_anything_else_is_one_line():
    words = ("--max-host-peak 1.1x", "--max-node-peak 1700GiB")
    assert Budgets.from_words(words, where="f.json").words == words
    with pytest.raises(UsageError, match=r"^f.json: budget '--max-gpu-residual 1GiB' is not"):
        Budgets.from_words(("--max-gpu-residual 1GiB",), where="f.json")
    with pytest.raises(UsageError, match=r"^f.json: its budgets: cannot parse --max-node-peak"):
        Budgets.from_words(("--max-node-peak 2x",), where="f.json")


def test_an_absolute_host_peak_breach_names_the_call():
    record = verdict.judge(
        fake.job(), Budgets.parse(host_peak="40MiB", host_growth=None, node_peak=None)
    )
    assert [(b.strategy, b.budget, b.message, b.kind) for b in record.breaches] == [
        ("offload #2 (rank 0)", "--max-host-peak", "host peak 64.00 MiB > 40.00 MiB", "over budget")
    ]
    assert record.budgets == ("--max-host-peak 40MiB",)
    assert verdict.outcome(record).kind == "over budget"
    assert verdict.exit_code(record) == 1


def test_a_ratio_judges_only_calls_whose_device_bytes_were_measured():
    job = fake.job()
    record = verdict.judge(job, Budgets.parse(host_peak="1.5x", host_growth=None, node_peak=None))
    # offload #2 peaked at 64 MiB for 32 MiB moved (2.00x); load #1 moved none
    assert [(b.strategy, b.message) for b in record.breaches] == [
        ("offload #2 (rank 0)", "host peak 2.00x > 1.50x")
    ]
    assert record.unjudged and "1 of 4 call(s) not judged" in record.unjudged[0]


def test_growth_and_node_peak():
    record = verdict.judge(
        fake.job(), Budgets.parse(host_peak=None, host_growth="10MiB", node_peak="100MiB")
    )
    where = sorted(b.strategy for b in record.breaches)
    assert where == ["node vm0 (cgroup v1 memory.max_usage_in_bytes)", "offload #1 (rank 0)"]


def test_exit_codes():
    """Every verb's policy: 0 ok, 1 any failure (the job's own, whatever its status), and
    128+N where attach itself was stopped by signal N; the job's status stays its own."""
    from offloadprobe.attach.report_json import attach_json

    ok = fake.job()
    assert verdict.exit_code(verdict.judge(ok, Budgets())) == 0
    assert verdict.outcome(ok).kind == "ok"
    crashed, killed = fake.job(exit_code=3), fake.job(exit_code=-9)
    assert (verdict.outcome(crashed).kind, verdict.exit_code(crashed)) == ("crashed", 1)
    assert (verdict.outcome(killed).kind, verdict.exit_code(killed)) == ("killed", 1)
    assert verdict.exit_code(fake.job(exit_code=2)) == 1  # never read as attach's bad input
    doc = attach_json(killed)
    assert (doc["exit_code"], doc["job_exit_code"], doc["job_signal"]) == (1, 137, 9)
    stopped = replace(fake.job(exit_code=-15), interrupted=15)
    assert (verdict.outcome(stopped).kind, verdict.exit_code(stopped)) == ("interrupted", 143)
    called_never = fake.job(require_calls=False, never=True, never_status="never called")
    assert verdict.exit_code(called_never) == 0
    assert verdict.exit_code(replace(called_never, require_calls=True)) == 1
    failed_first = fake.job(exit_code=3, never=True)
    assert verdict.outcome(failed_first).kind == "crashed"  # the job's failure first


@pytest.mark.parametrize(
    "status", ["module never imported", "not wrapped: offload_pairs has no offload_to_cpuu"]
)
def test_a_named_phase_that_could_not_be_measured_fails_without_require_calls(status):
    record = fake.job(require_calls=False, never=True, never_status=status)
    assert [p.name for p in record.unmeasured] == ["tms_pause"]
    assert verdict.exit_code(record) == 1
    assert cells.verdict_line(record) == "verdict: not measured: phase(s) tms_pause (see above)"


def test_a_job_with_nothing_named_and_no_block_recorded_is_not_ok():
    record = replace(fake.job(), calls=(), phases=(), ranks=(), growth=())
    assert record.nothing_named and verdict.exit_code(record) == 1
    assert cells.verdict_line(record).startswith("verdict: nothing measured: name a function")


def test_an_escape_or_a_peak_reset_fails_and_an_exec_fails_under_require_calls():
    """The three ways a job hides from its figures (``attach_fakes.tricked``): escaped
    and peak reset exit 1 whatever the flags; a process left uninstrumented (a re-exec
    without the bootstrap) exits 1 under --require-calls, and is listed without it."""
    tricked = fake.tricked()
    assert verdict.exit_code(tricked) == 1
    assert cells.verdict_line(tricked).startswith("verdict: escaped: pid 4300")
    reset = replace(tricked, escaped=())
    assert verdict.exit_code(reset) == 1 and "peak reset" in cells.verdict_line(reset)
    execd = replace(reset, peak_resets=())
    assert verdict.exit_code(execd) == 1
    assert cells.verdict_line(execd) == (
        "verdict: not instrumented with --require-calls: pid 4100 (see above)"
    )
    lenient = replace(execd, require_calls=False)
    assert verdict.exit_code(lenient) == 0 and cells.verdict_line(lenient) == "verdict: ok"
    lines = " ".join(cells.status_lines(lenient))
    assert "not instrumented: pid 4100 (parent 4000, seen in process tree, a new image" in lines


def test_budgets_judge_the_larger_of_the_rss_and_cgroup_views():
    """offload #2 of ``tricked`` peaked at 64 MiB of RSS and wrote 32 MiB more into a
    memfd its cgroup held: 96 MiB peak, 32 MiB growth, judged by both budgets."""
    record = replace(fake.tricked(), escaped=(), peak_resets=(), uninstrumented=())
    budgets = Budgets.parse(host_peak="80MiB", host_growth="16MiB", node_peak=None)
    judged = verdict.judge(record, budgets)
    assert sorted((b.budget, b.strategy, b.message) for b in judged.breaches) == [
        ("--max-host-growth", "offload #1 (rank 0)", "host growth 32.00 MiB > 16.00 MiB"),
        ("--max-host-growth", "offload #2 (rank 0)", "host growth 32.00 MiB > 16.00 MiB"),
        ("--max-host-peak", "offload #2 (rank 0)", "host peak 96.00 MiB > 80.00 MiB"),
    ]
    rss_only = verdict.judge(fake.job(gpu=False), budgets)
    assert [b.strategy for b in rss_only.breaches] == ["offload #1 (rank 0)"]


def test_a_stream_cannot_write_the_figures_only_the_parent_reads():
    from offloadprobe.attach.records import PARENT_KEYS, Call

    call = fake.call("offload", 1, peak=MIB, growth=0, moved=None, start=0.0, gpu=False)
    doc = {**call.to_json(), **dict.fromkeys(PARENT_KEYS, 10**15)}
    doc["parent"] = None
    read = Call.from_stream(doc)
    assert all(getattr(read, key) is None for key in PARENT_KEYS)
    assert read.host_peak_bytes == MIB  # the RSS view alone: nothing came from the parent
