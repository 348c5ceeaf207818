"""The pytest plugin as its users drive it, through pytester in this process.

One test starts a real child (the plugin's point is a fresh process per probe): the
README's example as it stands, in one pytest session with the README's block for naive
and for legacy and a corrupting strategy (those three in this process). The rest of the
plugin's logic runs against ``FakeChild``.
"""

import json
from importlib import metadata

import pytest

from tests.fakes import FakeChild, InProcessChild, import_all, install_child

import_all()  # before pytester's snapshot of sys.modules, which drops what a test imports

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.processes(1)

TINY = 'layers=1, hidden=128, heads=4, vocab=1024, seq_length=32, cycles=1, device="cpu"'


def _plugin_args() -> list[str]:
    installed = any(ep.name == "offloadprobe" for ep in metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "offloadprobe.pytest_plugin.plugin"]


def _keep_torch_imported(pytester, monkeypatch) -> None:
    """pytester drops every module first imported during its inner session. A run in this
    process imports torch's lazy modules there (dynamo's, inductor's), and some register
    operator libraries when imported: imported again, they raise ("Only a single
    TORCH_LIBRARY ...") in every later run in this process, whatever test it is. torch and
    megatron stay imported."""
    from _pytest.pytester import SysModulesSnapshot

    def snapshot() -> SysModulesSnapshot:
        kept = ("zope", "readline", "torch", "megatron")  # the first two: pytester's own
        return SysModulesSnapshot(preserve=lambda name: name.startswith(kept))

    # the inner session's snapshot, and the test's own (taken when pytester was made)
    monkeypatch.setattr(pytester, "_Pytester__take_sys_modules_snapshot", snapshot)
    monkeypatch.setattr(pytester, "_sys_modules_snapshot", snapshot())


@pytest.fixture
def run_plugin(pytester, monkeypatch):
    from tests.conftest import ROOT

    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the children import tests.integration
    _keep_torch_imported(pytester, monkeypatch)

    def go(source: str | None = None, *, args: tuple[str, ...] = (), **files: str):
        pytester.makepyfile(**({"test_offload": source} if source is not None else files))
        return pytester.runpytest_inprocess(
            *_plugin_args(), "-q", "-rfE", "--tb=short", "-p", "no:cacheprovider", *args
        )

    return go


@pytest.fixture
def fake_child(monkeypatch) -> FakeChild:
    return install_child(monkeypatch, FakeChild())


def test_marker_passes_within_budget_and_hands_over_the_run(run_plugin, fake_child):
    fake_child.runs["lazy"] = dict(host_peak_x=1.2)
    result = run_plugin(
        """
import pytest

@pytest.mark.offload_budget(strategy="lazy", max_host_peak="1.5x", payload="64MiB")
def test_lazy(offload_run):
    assert offload_run.summary.integrity_ok
    assert abs(offload_run.summary.host_peak_x - 1.2) < 1e-6
"""
    )
    result.assert_outcomes(passed=1)
    (spec,) = fake_child.specs
    assert spec.config.strategy == "lazy"
    assert 0.9 * 64 * 2**20 < 2 * spec.config.model.param_count < 1.1 * 64 * 2**20
    assert spec.config.cycles == 2  # the plugin's default
    assert spec.config.reference_check  # on unless asked otherwise


def test_the_reference_run_can_be_left_out(run_plugin, fake_child):
    fake_child.runs["lazy"] = dict(host_peak_x=1.0)
    result = run_plugin(
        """
def test_quick(offload_probe):
    offload_probe(strategy="lazy", reference_check=False, max_host_peak="1.5x")
"""
    )
    result.assert_outcomes(passed=1)
    (spec,) = fake_child.specs
    assert spec.config.reference_check is False


@pytest.mark.parametrize(("tests", "session"), [(1, False), (2, True)])
def test_two_offload_tests_make_a_session_that_forks_its_first_worker_too(
    run_plugin, fake_child, monkeypatch, tests, session
):
    """With two offload tests or more (a marker, or the fixture asked for), the plugin says
    the process is a session: its CPU-emulation workers all fork from one zygote, the first
    too (``zygote.expect_a_session``); one offload test starts one fresh worker, as before."""
    from offloadprobe.isolation import zygote

    monkeypatch.setattr(zygote, "_SESSION", [False])
    fake_child.runs["lazy"] = dict(host_peak_x=1.0)
    marked = """
@pytest.mark.offload_budget(strategy="lazy", max_host_peak="1.5x")
def test_marked(offload_run):
    pass
"""
    fixture = """
def test_fixture(offload_probe):
    offload_probe(strategy="lazy", max_host_peak="1.5x")

def test_plain():
    pass
"""
    result = run_plugin("import pytest\n" + marked + (fixture if tests == 2 else ""))
    result.assert_outcomes(passed=tests + (tests == 2))
    assert zygote._SESSION[0] is session


def test_fixture_returns_the_run_and_fails_on_a_breach(run_plugin, fake_child):
    fake_child.runs["mine:S"] = dict(host_peak_x=1.9)
    result = run_plugin(
        mine="class S:\n    def offload(self, models):\n        pass\n\n"
        "    def load(self, models):\n        pass\n",  # found, and read, before any run
        test_offload="""
def test_user(offload_probe):
    run = offload_probe(strategy="mine:S", max_host_peak="2.5x")
    assert run.strategy == "mine:S" and run.summary.integrity_ok

def test_user_breach(offload_probe):
    offload_probe(strategy="mine:S", max_host_peak="1.5x")
""",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED *test_user_breach - Failed: mine:S + none: over budget*"])


def test_a_residual_keyword_does_not_turn_partly_offloaded_into_a_pass(run_plugin, fake_child):
    """(issue 35, e) The marker's ``max_gpu_residual`` is the same budget as the flag: it
    only adds to the rule that fails grad_data left on the device, with or without it."""
    fake_child.runs["lazy"] = dict(left_on_device={"param_data": 0, "grad_data": 2 * 2**20})
    result = run_plugin(
        """
import pytest

@pytest.mark.offload_budget(strategy="lazy", max_gpu_residual="4MiB")
def test_budget():
    pass

@pytest.mark.offload_budget(strategy="lazy")
def test_plain():
    pass
"""
    )
    result.assert_outcomes(failed=2)
    for test in ("test_budget", "test_plain"):
        result.stdout.fnmatch_lines([f"FAILED *{test} - Failed: lazy + none: partly offloaded*"])
    line = "lazy + none: partly offloaded: grad_data 2.00 MiB still on device"
    assert result.stdout.lines.count(line) == 2, result.stdout.str()


def _readme_example() -> str:
    import re

    from tests.conftest import ROOT

    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return next(b for b in blocks if "offload_budget" in b)


class _OneReal:
    """The worker for the README test: the README's block as it stands in a real child,
    the broken ones in this process. Their verdicts (a host peak, an audit, a corrupted
    buffer) do not need a fresh process; the block as it stands shows the real child."""

    def __init__(self, workdir) -> None:
        from offloadprobe.isolation.supervisor import subprocess_spawner

        self.real, self.here = subprocess_spawner, InProcessChild(workdir)
        self.ran: list[tuple[str, str]] = []

    def __call__(self, job, spec):
        pair = (job.config.strategy, job.config.optimizer_strategy)
        in_process = pair != ("lazy", "complete")
        self.ran.append((*pair, "in process" if in_process else "child"))
        return self.here(job, spec) if in_process else self.real(job, spec)


def test_readme_example_and_a_corrupting_strategy(run_plugin, monkeypatch, tmp_path):
    # The README's block as it stands passes; with naive it breaks the host-peak budget, with
    # legacy the master weights stay on the device (partly offloaded, as without a budget); a
    # corrupting strategy through the fixture fails too.
    child = install_child(monkeypatch, _OneReal(tmp_path))
    source = _readme_example()
    naive = source.replace('strategy="lazy"', 'strategy="naive"')
    legacy = source.replace('optimizer_strategy="complete"', 'optimizer_strategy="legacy"')
    assert naive != source and legacy != source
    # each breaks its budget in the first cycle: one cycle each, no reference run (the
    # verdict is a budget's, not the no-offload comparison's; they run in this process), and
    # a quarter of the payload (naive's 2x over 1.1x, legacy's master weights: exact bytes)
    fast = 'payload="4MiB", cycles=1, reference_check=False'
    naive, legacy = (s.replace('payload="16MiB"', fast) for s in (naive, legacy))
    assert fast in naive and fast in legacy
    broken = f"""
def test_broken(offload_probe):
    offload_probe(strategy="tests.integration.user_strategies:FlipsOneBit", {TINY})
"""
    result = run_plugin(test_ok=source, test_naive=naive, test_legacy=legacy, test_broken=broken)
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        ["FAILED test_broken.py::*", "FAILED test_legacy.py::*", "FAILED test_naive.py::*"]
    )
    # each failure's whole explanation is one line: the verdict, in the row's own words
    # the master weights left: the rule judges them with or without max_gpu_residual="0"
    result.stdout.re_match_lines(
        [r"^lazy \+ legacy: partly offloaded: master_param .* still on device$"]
    )
    result.stdout.re_match_lines(
        [r"^naive \+ complete: over budget: host peak \(parameters\) \d\.\d\dx > 1\.10x$"]
    )
    result.stdout.fnmatch_lines(
        ["FAILED test_naive.py::test_offload_stays_within_budget - Failed: naive + *"]
    )
    # under it, the measured phases, for the reader of a CI log
    result.stdout.fnmatch_lines(["*Captured offloadprobe call*", "*cycle*phase*host peak*"])
    result.stdout.fnmatch_lines(["*FlipsOneBit + none: corrupted: *param_data differs*"])
    assert sorted(child.ran) == [
        ("lazy", "complete", "child"),
        ("lazy", "legacy", "in process"),
        ("naive", "complete", "in process"),
        ("tests.integration.user_strategies:FlipsOneBit", "none", "in process"),
    ]


def test_misspelt_marker_keyword_is_a_usage_error_naming_it(run_plugin, fake_child):
    result = run_plugin(
        """
import pytest

@pytest.mark.offload_budget(strategy="lazy", max_host_peek="1.1x")
def test_typo():
    pass
"""
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown keyword max_host_peek=; did you mean max_host_peak=?*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert fake_child.specs == []


def test_budget_without_unit_in_the_fixture_is_one_line(run_plugin, fake_child):
    result = run_plugin(
        """
def test_no_unit(offload_probe):
    offload_probe(strategy="lazy", max_host_peak="1.1")
"""
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*UsageError: offload_probe: max_host_peak= '1.1' has no unit*"])
    assert "plugin.py" not in result.stdout.str()


# ------------------------------------------------------------------ stored records


def _stored(path, *runs) -> str:
    """A result file as ``run --json`` writes it (fake records: exact figures)."""
    from tests.fakes import fake_report

    path.write_text(json.dumps(fake_report(*runs).to_dict()))
    return str(path)


def test_a_baseline_without_the_marker_s_row_errors_and_baseline_row_names_one(
    run_plugin, fake_child, tmp_path
):
    """The stored file has naive's row only, at half lazy's figures: a marker for lazy
    errors (it used to pass, unchecked); naming the row holds lazy to it."""
    from tests.fakes import fake_run

    stored = _stored(tmp_path / "stored.json", fake_run("naive", host_peak_x=0.5, steady_x=0.5))
    fake_child.runs["lazy"] = dict(host_peak_x=1.0)
    result = run_plugin(
        f"""
import pytest

@pytest.mark.offload_budget(strategy="lazy", baseline_json={stored!r}, max_increase="5%")
def test_own_label():
    pass

@pytest.mark.offload_budget(
    strategy="lazy", baseline_json={stored!r}, max_increase="5%", baseline_row="naive + none",
    payload="48MiB",  # the fakes' payload: a stored row of another model errors up front
)
def test_named_row():
    pass
"""
    )
    result.assert_outcomes(errors=1, failed=1)
    # each is one line, under the test's heading
    result.stdout.re_match_lines(
        [
            r"_+ ERROR at setup of test_own_label _+$",
            f"^offload_budget: baseline_json= {stored} has no row 'lazy \\+ none' \\(it has: "
            r"naive \+ none\): name the stored row with baseline_row=$",
            r"_+ test_named_row _+$",
            r"^lazy \+ none: regressed: host peak 48\.00 MiB vs 24\.00 MiB stored \(\+100\.0% "
            r"> \+5\.0%\); steady host .*$",
        ]
    )
    assert len(fake_child.specs) == 1  # the test without its row measured nothing


def test_baseline_row_without_a_baseline_is_a_usage_error(run_plugin, fake_child):
    result = run_plugin(
        """
import pytest

@pytest.mark.offload_budget(strategy="lazy", baseline_row="lazy + none")
def test_row():
    pass
"""
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*baseline_row= names a row of baseline_json=*"])


MARKED = """
import pytest

@pytest.mark.offload_budget(strategy="lazy", max_host_peak="1.5x", payload="48MiB")
def test_lazy():
    pass

@pytest.mark.offload_budget(strategy="naive", max_host_peak="3x", payload="48MiB")
def test_naive():
    pass
"""


def test_save_then_compare_holds_each_test_to_its_own_record(run_plugin, fake_child, pytester):
    from offloadprobe.schemas import validate

    fake_child.runs.update(lazy=dict(host_peak_x=1.0), naive=dict(host_peak_x=2.0))
    saved = run_plugin(MARKED, args=("--offloadprobe-save=base",))
    saved.assert_outcomes(passed=2)
    path = pytester.path / ".offloadprobe" / "base.json"
    saved.stdout.fnmatch_lines([f"offloadprobe: saved 2 test records to {path}"])
    doc = json.loads(path.read_text())
    validate(doc, "pytest")
    assert [(r["test"], r["label"]) for r in doc["runs"]] == [
        ("test_offload.py::test_lazy", "lazy + none"),
        ("test_offload.py::test_naive", "naive + none"),
    ]
    assert doc["runs"][0]["summary"]["host_peak_x"] == pytest.approx(1.0)

    # lazy grew 20%, naive held; a new test has no record: an error, not a pass
    fake_child.runs["lazy"] = dict(host_peak_x=1.2)
    new = MARKED + '\n@pytest.mark.offload_budget(strategy="lazy")\ndef test_new():\n    pass\n'
    compared = run_plugin(new, args=(f"--offloadprobe-compare={path}",))
    compared.assert_outcomes(passed=1, failed=1, errors=1)
    compared.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_new*",
            f"--offloadprobe-compare {path} has no record of test_offload.py::test_new (it has "
            "test_offload.py::test_lazy, test_offload.py::test_naive): store one with "
            "--offloadprobe-save",
            "*_ test_lazy _*",
            "lazy + none: regressed: host peak 57.60 MiB vs 48.00 MiB stored (+20.0% > +5.0%)",
        ]
    )
    # the threshold is the user's, by name of the file too
    loose = ("--offloadprobe-compare=base", "--offloadprobe-max-increase=25%", "-k", "not new")
    run_plugin(new, args=loose).assert_outcomes(passed=2, deselected=1)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--offloadprobe-compare=nothing",), "cannot read --offloadprobe-compare *nothing.json*"),
        (("--offloadprobe-max-increase=5",), "cannot parse --offloadprobe-max-increase '5'*"),
    ],
)
def test_a_bad_stored_option_is_one_usage_line_before_anything_runs(
    run_plugin, fake_child, args, words
):
    result = run_plugin(MARKED, args=args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {words}"])
    assert "Traceback" not in result.stderr.str() and fake_child.specs == []


def test_the_options_are_pytest_options_with_help(pytester):
    result = pytester.runpytest_inprocess(*_plugin_args(), "--help")
    result.stdout.fnmatch_lines(
        [
            "offload-memory budgets (offloadprobe):",
            "*--offloadprobe-save=NAME*",
            "*--offloadprobe-compare=NAME*",
            "*--offloadprobe-max-increase=PCT*",
        ]
    )


def test_a_saved_entry_travels_on_its_report_as_pytest_xdist_sends_it(pytester):
    """Under pytest-xdist a worker measures, the controller writes: the entry rides on
    the test's report through pytest's own serialization (what xdist sends)."""
    from _pytest.reports import TestReport

    from offloadprobe.pytest_plugin.stored import ATTRIBUTE

    config = pytester.parseconfig(*_plugin_args())
    report = TestReport("t.py::t", ("t.py", 1, "t"), {}, "passed", None, "setup")
    setattr(report, ATTRIBUTE, '{"test": "t.py::t"}')
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    back = config.hook.pytest_report_from_serializable(
        config=config, data=json.loads(json.dumps(data))
    )
    assert getattr(back, ATTRIBUTE) == '{"test": "t.py::t"}'


# ------------------------------------------------------------------ the verdict stands

CORRUPT = dict(integrity=["param_data differs after the round trip (cycle 0)"])
MARKED_BODIES = {
    "the body skips": ("", "offload_run", "    pytest.skip('not on this runner')"),
    "the body calls xfail": ("", "offload_run", "    pytest.xfail('known')"),
    "an xfail marker": ("@pytest.mark.xfail(strict=False)\n", "offload_run", "    pass"),
    "a later fixture skips": ("", "later", "    pass"),
}
LATER = """
@pytest.fixture
def later():
    pytest.skip("no GPU here")
"""


@pytest.mark.parametrize("case", sorted(MARKED_BODIES))
def test_a_measured_corruption_fails_the_marked_test_whatever_its_body_does(
    run_plugin, fake_child, case
):
    """The marker's worker found the data corrupted before the body ran: neither a skip
    nor an xfail (marker, call, or a later fixture's skip) turns that into a pass."""
    decorator, fixture, body = MARKED_BODIES[case]
    fake_child.runs["lazy"] = dict(CORRUPT)
    source = (
        f'import pytest\n{LATER}\n@pytest.mark.offload_budget(strategy="lazy")\n'
        f"{decorator}def test_measured({fixture}):\n{body}\n"
    )
    result = run_plugin(source)
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) == 1, outcomes
    assert not {"skipped", "xfailed", "xpassed", "passed"} & set(outcomes), outcomes
    result.stdout.fnmatch_lines(["*lazy + none: corrupted: param_data differs*"])
    assert len(fake_child.specs) == 1


PROBED_BODIES = {
    "caught, then skipped": ("", "    except BaseException:\n        pytest.skip('later')"),
    "caught": ("", "    except BaseException:\n        pass"),
    "an xfail marker": ("@pytest.mark.xfail(strict=False)\n", "    finally:\n        pass"),
}


@pytest.mark.parametrize("case", sorted(PROBED_BODIES))
def test_a_probed_corruption_fails_the_test_whatever_its_body_does(run_plugin, fake_child, case):
    decorator, handler = PROBED_BODIES[case]
    fake_child.runs["lazy"] = dict(CORRUPT)
    result = run_plugin(
        f"import pytest\n\n{decorator}def test_probe(offload_probe):\n    try:\n"
        f'        offload_probe(strategy="lazy")\n{handler}\n'
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*lazy + none: corrupted: param_data differs*"])


def test_an_honest_measurement_keeps_its_skips_and_xfails(run_plugin, fake_child):
    fake_child.runs["lazy"] = dict(host_peak_x=1.0)
    result = run_plugin(
        """
import pytest

@pytest.mark.offload_budget(strategy="lazy")
def test_skips(offload_run):
    pytest.skip("not on this runner")

@pytest.mark.xfail(strict=False)
@pytest.mark.offload_budget(strategy="lazy")
def test_expected(offload_run):
    assert False, "a bug of the test's own"
"""
    )
    result.assert_outcomes(skipped=1, xfailed=1)


# ------------------------------------------------------------------ stored rows, up front


def test_a_stored_record_of_another_model_errors_before_the_worker(
    run_plugin, fake_child, tmp_path
):
    """``--offloadprobe-compare``'s record and ``baseline_row=``'s row measured a model of
    64 MiB; the marker's moves 8 MiB: each test errors in one line, and no worker runs."""
    stored = {"payload_bytes": 64 * 2**20, "summary": {"host_peak_bytes": 2**20}}
    path = tmp_path / "stored.json"
    path.write_text(
        json.dumps(
            {
                "runs": [
                    {"test": "test_offload.py::test_compared", "label": "lazy + none", **stored},
                    {"test": "other", "label": "naive + none", **stored},
                ]
            }
        )
    )
    source = f"""
import pytest

@pytest.mark.offload_budget(strategy="lazy", payload="8MiB")
def test_compared():
    pass

@pytest.mark.offload_budget(
    strategy="lazy", payload="8MiB", baseline_json={str(path)!r}, max_increase="5%",
    baseline_row="naive + none",
)
def test_named_row():
    pass
"""
    compared = run_plugin(source, args=(f"--offloadprobe-compare={path}", "-k", "compared"))
    compared.assert_outcomes(errors=1, deselected=1)
    compared.stdout.fnmatch_lines(
        [f"*--offloadprobe-compare {path} measured lazy + none at a payload of 64.00 MiB*"]
    )
    named = run_plugin(source, args=("-k", "named_row"))
    named.assert_outcomes(errors=1, deselected=1)
    named.stdout.fnmatch_lines([f"*baseline_json= {path} measured naive + none at a payload*"])
    assert fake_child.specs == []


STORED_ROW = {"label": "lazy + none", "test": "test_offload.py::test_lazy"}
UNGATEABLE = {
    "NaN": ('"payload_bytes": 50331648, "summary": {"host_peak_bytes": NaN}', "is nan"),
    "every figure null": (
        '"payload_bytes": 50331648, "summary": {"host_peak_bytes": null}',
        "(every one null)",
    ),
    "no payload": ('"summary": {"host_peak_bytes": 1048576}', "has no payload_bytes"),
    "beyond any size": (
        '"payload_bytes": 50331648, "summary": {"host_peak_bytes": 1e300}',
        "1e+300",
    ),
}


@pytest.mark.parametrize("way", ["baseline_json=", "--offloadprobe-compare"])
@pytest.mark.parametrize("case", sorted(UNGATEABLE))
def test_a_stored_file_that_cannot_gate_is_a_usage_error_before_any_test(
    run_plugin, fake_child, tmp_path, way, case
):
    row, says = UNGATEABLE[case]
    path = tmp_path / "stored.json"
    path.write_text('{"runs": [{' + json.dumps(STORED_ROW)[1:-1] + ", " + row + "}]}")
    keywords = f", baseline_json={str(path)!r}, max_increase='5%'" if way[0] != "-" else ""
    source = (
        "import pytest\n\n"
        f'@pytest.mark.offload_budget(strategy="lazy", payload="48MiB"{keywords})\n'
        "def test_lazy():\n    pass\n"
    )
    args = (f"--offloadprobe-compare={path}",) if way == "--offloadprobe-compare" else ()
    result = run_plugin(source, args=args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    errors = result.stderr.str()
    assert says in errors and str(path) in errors and "Traceback" not in errors
    assert fake_child.specs == []


class _LeavesNoRecord(FakeChild):
    """A worker that exits 1 before writing its record (the plugin fails it in set-up)."""

    def __call__(self, job, spec):
        self.specs.append(job)
        return 1, ""


@pytest.mark.parametrize("case", ["no record", "no stored row"])
def test_what_the_plugin_fails_in_set_up_stands_over_an_xfail_marker(
    run_plugin, monkeypatch, tmp_path, case
):
    """The worker left no record, or the stored file has no row to hold the test to: the
    plugin fails the test before its body; an xfail marker does not turn that into an
    expected failure."""
    child = install_child(monkeypatch, _LeavesNoRecord() if case == "no record" else FakeChild())
    keywords = ""
    if case == "no stored row":
        from tests.fakes import fake_run

        stored = _stored(tmp_path / "stored.json", fake_run("naive"))
        keywords = f", baseline_json={stored!r}, max_increase='5%'"
    result = run_plugin(
        "import pytest\n\n@pytest.mark.xfail(strict=False)\n"
        f'@pytest.mark.offload_budget(strategy="lazy"{keywords})\n'
        "def test_measured():\n    pass\n"
    )
    result.assert_outcomes(errors=1)
    words = "exited early" if case == "no record" else "has no row 'lazy + none'"
    result.stdout.fnmatch_lines([f"*{words}*"])
    assert len(child.specs) == (case == "no record")
