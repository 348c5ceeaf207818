"""The ``offload_budget`` marker and the ``offload_run`` / ``offload_probe`` fixtures.

Example (paste into a test file; the strategy may be your own ``module:object``)::

    import pytest

    @pytest.mark.offload_budget(strategy="lazy", max_host_peak="1.1x", payload="64MiB")
    def test_param_offload_stays_within_budget(offload_run):
        assert offload_run.summary.integrity_ok

Each marked test runs the strategy on the probe model in a fresh process (so no
pinned cache carries over), then fails with a one-line reason such as
``host peak 2.61x payload > limit 1.10x`` when a budget breaks; the full phase
table is attached to the report as the "offloadprobe" section.
"""

from __future__ import annotations

import io
from typing import Any

import pytest

MARKER = "offload_budget"
_BUDGET_KEYS = ("max_host_peak", "max_gpu_residual", "min_offload_bandwidth")
_MODEL_KEYS = ("payload", "layers", "hidden", "heads", "vocab", "seq_length", "micro_batch")
_RUN_KEYS = ("cycles", "device", "train_steps", "seed", "optimizer_strategy")
_OPTIMIZER_KEYS = ("precision_aware", "exp_avg_dtype", "exp_avg_sq_dtype", "store_param_remainders")
_RESULT = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(strategy='lazy', max_host_peak=None, max_gpu_residual=None, "
        "min_offload_bandwidth=None, payload=None, cycles=2, device='auto', ...): run an "
        "offload strategy on offloadprobe's megatron-core model in a fresh process and fail "
        "the test when a budget breaks",
    )


class OffloadBudgetFailure:
    """What a marked test measured and which budgets it broke."""

    def __init__(self, run: Any, breaches: list[Any], table: str) -> None:
        self.run = run
        self.breaches = breaches
        self.table = table

    @property
    def reason(self) -> str:
        return "; ".join(b.message for b in self.breaches)


def _config(options: dict[str, Any]) -> Any:
    """The marker's options as the run configuration the child reads."""
    from offloadprobe.cli.options import DEFAULT, model_config, optimizer_choice
    from offloadprobe.core.config import RunConfig

    model = model_config(
        layers=options.get("layers", DEFAULT.num_layers),
        hidden=options.get("hidden", DEFAULT.hidden_size),
        heads=options.get("heads", DEFAULT.num_attention_heads),
        vocab=options.get("vocab", DEFAULT.vocab_size),
        seq_length=options.get("seq_length", DEFAULT.seq_length),
        micro_batch=options.get("micro_batch", DEFAULT.micro_batch_size),
        payload=options.get("payload"),
    )
    choice = optimizer_choice(
        precision_aware=bool(options.get("precision_aware", False)),
        exp_avg_dtype=options.get("exp_avg_dtype", "fp32"),
        exp_avg_sq_dtype=options.get("exp_avg_sq_dtype", "fp32"),
        remainders=bool(options.get("store_param_remainders", False)),
    )
    run = {k: options[k] for k in _RUN_KEYS if options.get(k) is not None}
    run.setdefault("cycles", 2)
    return RunConfig(
        model=model, strategy=str(options.get("strategy", "lazy")), optimizer=choice, **run
    )


def _render(run: Any, emulated: bool) -> str:
    from rich.console import Console

    from offloadprobe.report.table import phase_table, summary_line

    buffer = io.StringIO()
    console = Console(file=buffer, width=120, no_color=True, force_terminal=False)
    console.print(phase_table(run, gpu=not emulated))
    console.print(summary_line(run))
    return buffer.getvalue()


def probe(**options: Any) -> tuple[Any, OffloadBudgetFailure | None]:
    """Run one strategy in a child process; return its record and any budget failure."""
    from offloadprobe.core.budgets import budgets_from_flags, check_all
    from offloadprobe.isolation.child import ChildSpec, run_child

    known = {*_MODEL_KEYS, *_RUN_KEYS, *_OPTIMIZER_KEYS, *_BUDGET_KEYS, "strategy", "timeout"}
    unknown = set(options) - known
    if unknown:
        raise pytest.UsageError(f"{MARKER}: unknown option(s) {', '.join(sorted(unknown))}")
    budgets = budgets_from_flags(*(options.get(k) for k in _BUDGET_KEYS))
    config = _config(options)
    spec = ChildSpec(label=config.strategy, config=config, timeout_s=options.get("timeout"))
    outcome = run_child(spec)
    run = outcome.run
    if run is None or outcome.verdict != "ok":
        pytest.fail(f"offloadprobe run failed: {outcome.verdict}\n{outcome.stderr_tail}",
                    pytrace=False)  # fmt: skip
    breaches = check_all(budgets, [run])
    failure = None
    if breaches:
        failure = OffloadBudgetFailure(run, breaches, _render(run, outcome.report["emulated"]))
    return run, failure


@pytest.fixture(autouse=True)
def _offload_budget_marker(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker(MARKER)
    if marker is not None:
        request.node.stash[_RESULT] = probe(**marker.kwargs)


@pytest.fixture
def offload_run(request: pytest.FixtureRequest) -> Any:
    """The ``RunRecord`` the ``offload_budget`` marker measured for this test."""
    if _RESULT not in request.node.stash:
        raise pytest.UsageError("offload_run needs the test to carry @pytest.mark.offload_budget")
    return request.node.stash[_RESULT][0]


@pytest.fixture
def offload_probe(request: pytest.FixtureRequest):
    """Call ``offload_probe(strategy=..., max_host_peak=..., payload=...)`` in a test."""

    def run(**options: Any) -> Any:
        record, failure = probe(**options)
        if failure is not None:
            request.node.add_report_section("call", "offloadprobe", failure.table)
            pytest.fail(failure.reason, pytrace=False)
        return record

    return run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    result = yield
    stored = item.stash.get(_RESULT, None)
    if stored is not None and stored[1] is not None:
        failure = stored[1]
        item.add_report_section("call", "offloadprobe", failure.table)
        pytest.fail(failure.reason, pytrace=False)
    return result
