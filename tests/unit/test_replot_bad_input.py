"""``show RESULT --trace T --plot P`` given a broken trace or the wrong result: bad input,
exit 2 with one line, never a traceback, an "aborted" exit 130 or an image drawn from
figures of another run (review of the replot feature)."""

from __future__ import annotations

import gzip
import json

import pytest

from offloadprobe.core.errors import UsageError

TRACK = {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "lazy + none"}}
SPAN = {"ph": "X", "pid": 1, "tid": 0, "name": "offload", "ts": 0, "dur": 5, "args": {}}


def _trace(events) -> str:
    return json.dumps({"traceEvents": events})


def test_a_truncated_gzipped_trace_is_bad_input(tmp_path):
    """gzip raises EOFError on a cut stream; click turns an EOFError into "aborted", 130."""
    from offloadprobe.report.trace_read import read_trace

    whole = gzip.compress(_trace([TRACK, SPAN] * 200).encode())
    (tmp_path / "t.json.gz").write_bytes(whole[: len(whole) // 2])

    with pytest.raises(UsageError, match="not a trace offloadprobe wrote"):
        read_trace(tmp_path / "t.json.gz")


@pytest.mark.parametrize(
    "events",
    [
        [{"ph": "M", "name": "process_name", "pid": 1}],  # a track without its name
        [1, 2],  # events that are not objects
        [TRACK, {"ph": "C", "pid": 1, "name": "host RSS", "ts": 0, "args": {}}],  # no bytes
        [TRACK, {"pid": 1, "name": "offload", "ts": 0}],  # no phase type
        [TRACK, {"ph": "X", "pid": 1, "tid": 0, "name": "offload", "ts": "soon"}],
    ],
)
def test_a_malformed_event_is_bad_input_not_a_traceback(tmp_path, events):
    from offloadprobe.report.trace_read import read_trace

    (tmp_path / "t.json").write_text(_trace(events))
    with pytest.raises(UsageError, match="not a trace offloadprobe wrote"):
        read_trace(tmp_path / "t.json")


def test_a_plan_json_with_trace_fails_before_anything_is_printed(tmp_path):
    from tests.conftest import invoke_cli

    plan = tmp_path / "p.json"
    model = ["--layers", "1", "--hidden", "128", "--heads", "4", "--vocab", "512"]
    made = invoke_cli("plan", "--probe", *model, "--device", "cpu", "--json", str(plan))
    assert made.exit_code == 0, made.stderr
    (tmp_path / "t.json").write_text(_trace([TRACK, SPAN]))
    args = [str(plan), "--trace", str(tmp_path / "t.json"), "--plot", str(tmp_path / "p.png")]
    result = invoke_cli("show", *args)
    assert result.exit_code == 2, result.stderr
    (line,) = result.error_lines
    assert "plan" in line and "run or compare" in line, line
    assert result.stdout == ""  # nothing rendered for an input that is refused
