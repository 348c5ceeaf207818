"""Everything checkable is checked before any process starts: exit 2 with one line that
says what is wrong and how to fix it, no worker started, well under a second. A new user's
cases: the user's code of the wrong arity, a flag given twice or cancelled by another, a
stored baseline that cannot gate. In process, nothing runs (``fake_runner`` records any
worker that would have started)."""

from __future__ import annotations

import inspect
import itertools
import json
import sys
import textwrap
import time

import pytest

from offloadprobe.core.errors import StrategyError

USER_CODE = """
    import builtins
    builtins.IMPORTED = getattr(builtins, "IMPORTED", []) + [__name__]

    def offload(models):
        pass

    def load(models, device_id=None):
        pass

    def offload_two(models, extra):
        pass

    def load_kwonly(models, *, device):
        pass

    def takes_nothing():
        pass

    class TooFew:
        def offload(self):
            pass

        def load(self, models):
            pass

    class Fine:
        def __init__(self, runtime=None):
            pass

        def offload(self, models):
            pass

        def load(self, models):
            pass

    class NeedsTwo(Fine):
        def __init__(self, runtime, other):
            pass

    class Static:
        @staticmethod
        def offload(models):
            pass

        @classmethod
        def load(cls, models, extra):
            pass
"""
_names = itertools.count()


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A fresh importable module of ``USER_CODE`` (a new name each time): its name."""
    name = f"up_front_user_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_CODE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield name
    sys.modules.pop(name, None)


def refused(invoke, fake_runner, *args: str) -> str:
    """``offloadprobe ARGS`` exits 2 with one line, fast, and starts no worker: the line."""
    start = time.perf_counter()
    result = invoke(*args)
    took = time.perf_counter() - start
    out = result.stdout + result.stderr
    assert result.exit_code == 2, out
    assert len(result.error_lines) == 1 and "Traceback" not in out, out
    assert fake_runner.configs == [], "a worker was started"
    assert took < 1.0, f"{took:.2f} s"
    (line,) = result.error_lines
    assert line.startswith("offloadprobe: error: ")
    return line


CPU = ("--device", "cpu", "--no-progress")
ARITY = [
    ("{m}:offload_two,load", "offload_two(models, extra) needs extra", "give it a default"),
    ("{m}:offload,load_kwonly", "load_kwonly(models, *, device) needs device", "(load_kwonly("),
    ("{m}:takes_nothing,load", "takes_nothing() takes no positional argument", "give it a"),
    ("{m}:offload,load(models=0)", "binds the parameter offloadprobe passes", "drop models="),
    ("{m}:offload,load(dev=0)", "load() takes no dev= (its parameters: models, device_id)", "drop"),
    ("{m}:offload_two,load@each", "needs extra besides one model chunk", "give it a default"),
    ("{m}:TooFew", "TooFew.offload() takes no positional argument", "give it a parameter"),
    ("{m}:NeedsTwo", "NeedsTwo(runtime, other) needs other", "give it a default"),
    ("{m}:Static", "Static.load(models, extra) needs extra", "give it a default"),
]


@pytest.mark.parametrize("verb", ["run", "plan"])  # read as imported, read as source
@pytest.mark.parametrize(("spec", "says", "fix"), ARITY)
def test_user_code_of_the_wrong_arity_is_refused_up_front(
    invoke, fake_runner, user, verb, spec, says, fix
):
    spec = spec.format(m=user)
    args = {
        "run": ("run", "--strategy", spec),
        "compare": ("compare", "lazy", spec),
        "plan": ("plan", "--probe", "--strategy", spec),
    }[verb]
    line = refused(invoke, fake_runner, *args, *CPU)
    assert f"--strategy {spec!r}: " in line and says in line and fix in line, line


@pytest.mark.parametrize(("spec", "says", "fix"), [ARITY[0], ARITY[6]])
def test_compare_refuses_it_before_its_first_row(invoke, fake_runner, user, spec, says, fix):
    spec = spec.format(m=user)
    line = refused(invoke, fake_runner, "compare", "lazy", spec, *CPU)
    assert f"--strategy {spec!r}: " in line and says in line and fix in line, line


def test_plan_reads_the_users_module_without_running_it(invoke, fake_runner, user):
    import builtins

    line = refused(invoke, fake_runner, "plan", "--probe", "--strategy", f"{user}:TooFew", *CPU)
    assert "TooFew.offload()" in line
    assert user not in getattr(builtins, "IMPORTED", [])  # plan stays torch-free


def test_an_optional_device_id_and_the_each_form_are_fine(invoke, fake_runner, user):
    for spec in (f"{user}:offload,load", f"{user}:offload,load@each", f"{user}:Fine"):
        result = invoke("run", "--strategy", spec, *CPU)
        assert result.exit_code == 0, result.stderr
    assert len(fake_runner.configs) == 3


def test_an_optimizer_pair_says_it_is_given_one_optimizer(invoke, fake_runner, user):
    spec = f"{user}:offload_two,load@each"
    line = refused(invoke, fake_runner, "run", "--optimizer-strategy", spec, *CPU)
    assert f"--optimizer-strategy {spec!r}" in line and "besides one optimizer" in line


def test_the_source_reader_follows_reexports_and_judges_what_it_sees(tmp_path, monkeypatch):
    from offloadprobe.engine.strategies.user_calls import check_unloaded

    pkg = tmp_path / "up_front_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('never run')\n")
    (pkg / "impl.py").write_text(
        "import functools\n\n@functools.lru_cache\ndef two(a, b):\n    pass\n\n"
        "def deco(f):\n    return f\n\n@deco\ndef hidden(a, b):\n    pass\n"
    )
    (pkg / "api.py").write_text("from .impl import two, hidden\nassigned = print\n")
    (pkg / "broken.py").write_text("def f(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(StrategyError, match=r"two\(a, b\) needs b besides the list of model"):
        check_unloaded("up_front_pkg.api:two,assigned", flag="--strategy")
    check_unloaded("up_front_pkg.api:hidden,assigned", flag="--strategy")  # left to the worker
    with pytest.raises(StrategyError, match=r"module 'up_front_pkg.api' has no attribute 'nope'"):
        check_unloaded("up_front_pkg.api:nope,two", flag="--strategy")
    with pytest.raises(StrategyError, match=r"cannot import 'up_front_pkg.broken' \(SyntaxError"):
        check_unloaded("up_front_pkg.broken:f,g", flag="--strategy")
    with pytest.raises(StrategyError, match=r"cannot import 'up_front_pkg.none' \(no module"):
        check_unloaded("up_front_pkg.none:f,g", flag="--strategy")
    assert "up_front_pkg" not in sys.modules


def test_one_rule_reads_both_signatures():
    """The rule over ``inspect.signature`` of a real function and over one read from its
    source are the same (``user_source.Function.signature``)."""
    import ast

    from offloadprobe.engine.strategies.user_calls import call_problem
    from offloadprobe.engine.strategies.user_source import Function

    source = "def f(a, /, b=1, *args, c, d=2, **kw):\n    pass\n"
    namespace: dict = {}
    exec(source, namespace)
    real = inspect.signature(namespace["f"])
    (node,) = ast.parse(source).body
    read = Function(node).signature()
    assert [(p.name, p.kind) for p in read.parameters.values()] == [
        (p.name, p.kind) for p in real.parameters.values()
    ]
    for kwargs in ({}, {"c": 1}, {"b": 1, "c": 1}, {"zz": 1}):
        assert call_problem("f", read, kwargs, "x") == call_problem("f", real, kwargs, "x")


# ------------------------------------------------------------------ flags


FLAGS = [
    (
        ("run", "--strategy", "naive", "--strategy", "lazy"),
        "--strategy is given twice (naive, then lazy) and run takes one",
        "offloadprobe compare naive lazy",
    ),
    (("run", "-s", "naive", "--strategy", "lazy"), "--strategy is given twice", "keep one"),
    (("run", "--payload", "8MiB", "--payload", "16MiB"), "--payload is given twice", "keep one"),
    (("run", "--precision-aware", "--classic"), "--precision-aware and --classic", "keep one"),
    (("compare", "lazy", "--cycles", "1", "--cycles", "2"), "--cycles is given twice", "keep"),
    (("plan", "--probe", "--layers", "1", "--layers", "2"), "--layers is given twice", "keep"),
    (("repro", "ci-small", "--cycles", "1", "--cycles", "2"), "--cycles is given twice", "keep"),
    (
        ("run", "--sequence", "double-offload", "--cycles", "3"),
        "--sequence runs its own steps instead of --cycles",
        "drop --cycles",
    ),
    (
        ("compare", "naive", "lazy", "--cycles", "3", "--sequence", "double-offload"),
        "--cycles would be ignored",
        "drop --cycles",
    ),
    (("run", "--payload", "8MiB", "--hidden", "512"), "--hidden would be ignored", "drop --hidden"),
    (("plan", "--probe", "--payload", "8MiB", "--vocab", "512"), "--vocab would be", "drop"),
    (("run", "--moe-router-topk", "4"), "the model has none", "add --num-experts N"),
    (
        ("run", "--rollout-claim", "1GiB", "--sequence", "double-offload"),
        "--rollout-claim is claimed at the rollout steps of --sequence, and it has none",
        "add rollout",
    ),
    (("run", "--rdzv-endpoint", "h:29500"), "this run has one", "add --nnodes N"),
    (("compare", "lazy", "--optimizer-first"), "no optimizer strategy moves any", "drop it"),
    (
        ("run", "--strategy", "lazy", "--strategy-option", "threads=4"),
        "--strategy-option threads=4: lazy reads no options, so it would be ignored",
        "pipelined, hugepin, relock",
    ),
]


@pytest.mark.parametrize(("args", "says", "fix"), FLAGS, ids=lambda v: " ".join(v)[:40])
def test_flags_that_would_do_nothing_are_refused(invoke, fake_runner, args, says, fix):
    line = refused(invoke, fake_runner, *args, *CPU)
    assert says in line and fix in line, line


def test_the_same_value_twice_is_harmless(invoke, fake_runner):
    result = invoke("run", "--strategy", "lazy", "-s", "lazy", "--no-progress", *CPU)
    assert result.exit_code == 0, result.stderr
    assert fake_runner.last.strategy == "lazy"
    order = ("--optimizer-strategy", "complete", "--optimizer-first")
    assert invoke("run", *order, *CPU).exit_code == 0  # where it orders something, it is fine


def test_help_is_still_help(invoke):
    result = invoke("run", "--strategy", "naive", "--strategy", "lazy", "--help")
    assert result.exit_code == 0 and "--strategy" in result.stdout


def test_repro_cycles_with_a_scenario_sequence_is_refused(invoke, fake_runner, tmp_path):
    from tests.unit.test_scenario_schema import GOOD

    path = tmp_path / "seq.toml"
    path.write_text(GOOD + '\n[repro]\npayload = "16MiB"\nsequence = "double-offload"\n')
    line = refused(invoke, fake_runner, "repro", str(path), "--cycles", "2", "--device", "cpu")
    assert "--cycles would be ignored: seq.toml [repro] sequence = 'double-offload'" in line


def test_marker_keywords_are_checked_as_the_flags_are(user):
    from offloadprobe.pytest_plugin.plugin import check_options

    with pytest.raises(pytest.UsageError, match=r"sequence= runs its own steps .* drop cycles="):
        check_options({"sequence": "double-offload", "cycles": 3})
    with pytest.raises(pytest.UsageError, match=r"strategy='.*': offload_two\(models, extra\)"):
        check_options({"strategy": f"{user}:offload_two,load"})
    with pytest.raises(pytest.UsageError, match=r"did you mean 'lazy'"):
        check_options({"strategy": "lazzy"})
    check_options({"sequence": "double-offload", "strategy": f"{user}:offload,load"})


# ------------------------------------------------------------------ stored baselines

MiB = 2**20


def _row(label="lazy + none", payload: object = 8 * MiB, **summary: object) -> dict:
    figures = {"host_peak_bytes": 9 * MiB, "steady_host_bytes": 9 * MiB}
    row: dict = {"label": label, "summary": {**figures, **summary}}
    if payload is not None:
        row["payload_bytes"] = payload
    return row


BASELINES = {
    "NaN": (
        '{"runs": [{"label": "lazy + none", "payload_bytes": 8388608, "summary": '
        '{"host_peak_bytes": NaN}}]}',
        "host peak (summary.host_peak_bytes) is nan",
    ),
    "inf": (
        '{"runs": [{"label": "lazy + none", "payload_bytes": 8388608, "summary": '
        '{"steady_host_bytes": -Infinity}}]}',
        "steady host (summary.steady_host_bytes)",
    ),
    "text": (json.dumps({"runs": [_row(host_peak_bytes="9MiB")]}), "is '9MiB', not a number"),
    "beyond any size": (  # finite, but no figure grows 5% over it: it would gate nothing
        json.dumps({"runs": [_row(host_peak_bytes=1e300)]}),
        "host peak (summary.host_peak_bytes) is 1e+300, not a number of bytes",
    ),
    "every figure null": (
        json.dumps({"runs": [_row(host_peak_bytes=None, steady_host_bytes=None)]}),
        "has none of host peak, steady host, pinned, GPU left (every one null)",
    ),
    "no payload": (json.dumps({"runs": [_row(payload=None)]}), "has no payload_bytes"),
    "another payload": (
        json.dumps({"runs": [_row(payload=64 * MiB)]}),
        "measured lazy + none at a payload of 64.00 MiB, and this run's model moves 8.02 MiB",
    ),
}


@pytest.mark.parametrize("verb", ["run", "compare"])
@pytest.mark.parametrize("case", sorted(BASELINES))
def test_a_baseline_that_cannot_gate_is_refused_before_anything_runs(
    invoke, fake_runner, tmp_path, verb, case
):
    text, says = BASELINES[case]
    path = tmp_path / "baseline.json"
    path.write_text(text)
    gate = ("--payload", "8MiB", "--baseline-json", str(path), "--max-increase", "5%")
    args = ("run", "--strategy", "lazy") if verb == "run" else ("compare", "lazy")
    line = refused(invoke, fake_runner, *args, *gate, *CPU)
    assert f"--baseline-json {path}" in line and says in line, line
    assert "store it again" in line or "give the model flags the stored run had" in line


def test_a_baseline_of_this_model_gates_the_run(invoke, fake_runner, tmp_path):
    from offloadprobe.core.config import ModelConfig, size_for_payload
    from offloadprobe.plan.probe import probe_payload

    payload = probe_payload(size_for_payload(ModelConfig(), 8 * MiB))
    fake_runner.runs["lazy"] = dict(payload=payload, host_peak_x=2.0)  # as the row would move
    path = tmp_path / "baseline.json"
    stored = _row(payload=payload, host_peak_bytes=payload, steady_host_bytes=None)
    path.write_text(json.dumps({"runs": [stored]}))
    gate = ("--payload", "8MiB", "--baseline-json", str(path), "--max-increase", "5%")
    result = invoke("run", "--strategy", "lazy", *gate, *CPU)
    assert result.exit_code == 1, result.stderr  # the stored row gates: the peak doubled
    assert "regressed" in result.stdout and len(fake_runner.configs) == 1


def test_the_marker_refuses_a_baseline_of_another_model_before_its_worker(tmp_path):
    from offloadprobe.pytest_plugin.plugin import probe

    path = tmp_path / "baseline.json"
    path.write_text(json.dumps({"runs": [_row(payload=64 * MiB)]}))
    gate = {"baseline_json": str(path), "max_increase": "5%", "payload": "8MiB"}
    with pytest.raises(pytest.UsageError, match=r"payload of 64.00 MiB, and this run's model"):
        probe(strategy="lazy", device="cpu", **gate)
