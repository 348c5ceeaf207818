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
        "def offload(models):\n    pass\n\ndef load(models):\n    pass\n"
    )
    monkeypatch.chdir(tmp_path)
    spec = "pair_without_load_grad:offload,load(load_grad=False)"
    result = invoke("run", "--strategy", spec, "--device", "cpu", "--no-progress")
    assert result.exit_code == 2
    (line,) = result.error_lines
    assert "load() takes no load_grad= (its parameters: models)" in line
    assert fake_runner.configs == []  # no worker was started
    taken = "pair_without_load_grad:offload(),load(models=None)"
    assert invoke("run", "--strategy", taken, "--device", "cpu", "--no-progress").exit_code == 0


def test_the_alloc_conf_example_in_help_is_valid_on_this_build(invoke):
    from offloadprobe.core.alloc_conf import validate_alloc_conf

    text = " ".join(invoke("compare", "--help").stdout.split())
    (example,) = re.findall(r"--alloc-conf .*?e\.g\. (\S+?);", text)
    validate_alloc_conf(example)  # exit 2 (UsageError) if this torch lacks the key
