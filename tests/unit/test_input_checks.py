"""Input that would measure the wrong thing exits 2 up front, with the fix: a scenario
size without a unit, a reserve at or above its limit, a bound keyword the user's function
does not take; and help examples that work on this build. In-process, nothing runs."""

from __future__ import annotations

import re

import pytest

from tests.unit.test_scenario_schema import GOOD

LIMIT = 'host_memory_per_node = "88MiB"'


def _plan(invoke, tmp_path, text: str):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return invoke("plan", str(path))


@pytest.mark.parametrize(
    ("new", "says"),
    [
        (
            "host_memory_per_node = 512",
            'limit.host_memory_per_node: 512 has no unit: give a unit, e.g. "512GiB"',
        ),
        ('host_memory_per_node = "512"', "'512' has no unit: give a unit, e.g. \"512GiB\""),
        (
            LIMIT + '\nhost_reserved_per_node = "88MiB"',
            "limit.host_reserved_per_node: '88MiB' is at or above host_memory_per_node '88MiB'",
        ),
        (
            'gpu_memory_per_device = "80GiB"\ngpu_reserved_per_device = "96GiB"',
            "limit.gpu_reserved_per_device: '96GiB' is at or above gpu_memory_per_device",
        ),
    ],
)
def test_a_scenario_that_would_judge_the_wrong_limit_is_exit_2(invoke, tmp_path, new, says):
    result = _plan(invoke, tmp_path, GOOD.replace(LIMIT, new))
    assert result.exit_code == 2, result.stdout
    (line,) = result.error_lines
    assert line.startswith("offloadprobe: error: ") and says in line


def test_a_reserve_below_its_limit_is_fine(invoke, tmp_path):
    result = _plan(
        invoke, tmp_path, GOOD.replace(LIMIT, LIMIT + '\nhost_reserved_per_node = "8MiB"')
    )
    assert result.exit_code in (0, 1), result.stderr  # a verdict, not bad input


def test_a_bound_keyword_the_function_lacks_is_exit_2_before_anything_runs(
    invoke, fake_runner, tmp_path, monkeypatch
):
    (tmp_path / "pair_without_load_grad.py").write_text(
        "def offload(models):\n    pass\n\ndef load(models):\n    pass\n\n"
        "def load_some(models, load_grad=True):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    spec = "pair_without_load_grad:offload,load(load_grad=False)"
    result = invoke("run", "--strategy", spec, "--device", "cpu", "--no-progress")
    assert result.exit_code == 2
    (line,) = result.error_lines
    assert "load() takes no load_grad= (its parameters: models)" in line
    assert fake_runner.configs == []  # no worker was started
    taken = "pair_without_load_grad:offload(),load_some(load_grad=False)"
    assert invoke("run", "--strategy", taken, "--device", "cpu", "--no-progress").exit_code == 0


def test_the_alloc_conf_example_in_help_is_valid_on_this_build(invoke):
    from offloadprobe.core.alloc_conf import validate_alloc_conf

    text = " ".join(invoke("compare", "--help").stdout.split())
    (example,) = re.findall(r"--alloc-conf .*?e\.g\. (\S+?);", text)
    validate_alloc_conf(example)  # exit 2 (UsageError) if this torch lacks the key


def _run_size_flags() -> list[str]:
    """Every size flag of ``run``, from the option model (a new one is covered by itself),
    and the residual budget, a size where 0 means none."""
    from offloadprobe.core.options import RUN, for_verb

    return [o.cli_flag for o in for_verb(RUN) if o.unit == "size"] + ["--max-gpu-residual"]


def test_the_size_flags_of_run_are_all_here():
    known = {"--payload", "--workspace-cache", "--rollout-claim", "--gpu-limit", "--host-limit"}
    assert known | {"--max-gpu-residual"} <= set(_run_size_flags())


@pytest.mark.parametrize("flag", _run_size_flags())
def test_a_size_flag_without_a_unit_is_exit_2_before_anything_runs(invoke, fake_runner, flag):
    """16 was 16 bytes: a payload too small, a 16-byte cache, a cgroup OOM at once."""
    result = invoke("run", "--device", "cpu", "--no-progress", flag, "16")
    assert result.exit_code == 2, result.stdout
    assert result.error_lines == [
        f"offloadprobe: error: {flag} 16 has no unit: give a unit, e.g. 16MiB"
    ]
    assert fake_runner.configs == []


def test_a_scenario_repro_size_without_a_unit_is_exit_2(invoke, tmp_path):
    text = GOOD + '\n[repro]\npayload = "16MiB"\nworkspace_cache = "64"\n'
    (line,) = _plan(invoke, tmp_path, text).error_lines
    assert "repro.workspace_cache: '64' has no unit" in line


def test_a_marker_size_without_a_unit_names_the_keyword():
    from offloadprobe.pytest_plugin.plugin import probe

    with pytest.raises(pytest.UsageError, match=r"^offload_budget: payload= 16 has no unit: "):
        probe(payload=16)
    with pytest.raises(pytest.UsageError, match=r"max_gpu_residual= 5 has no unit: .* 5MiB$"):
        probe(max_gpu_residual="5")
