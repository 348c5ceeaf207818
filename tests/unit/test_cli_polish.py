"""What a new user meets first: --version, plain flags in --help, named scenarios, quiet
third-party libraries. In-process, no model."""

from __future__ import annotations

import logging
import warnings

import pytest

from offloadprobe import __version__
from offloadprobe.cli import main
from offloadprobe.core.chatter import quiet_third_party as _quiet_third_party_warnings
from offloadprobe.core.errors import UsageError
from offloadprobe.scenarios.catalog import packaged, resolve


def run_main(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stop:
        main(list(args))
    out, err = capsys.readouterr()
    return stop.value.code, out, err


def test_version(capsys):
    code, out, _ = run_main(capsys, "--version")
    assert code == 0 and out.strip() == f"offloadprobe {__version__}"


def test_help_shows_no_type_next_to_plain_flags(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    code, out, _ = run_main(capsys, "plan", "--help")
    assert code == 0
    assert "--no-terms" in out and "--probe" in out
    assert "<bool>" not in out
    assert "<int>" in out  # options that take a value still say what kind


def test_scenarios_ship_with_the_package_and_resolve_by_name(tmp_path, monkeypatch):
    names = [p.stem for p in packaged()]
    assert {"ci-small", "verl-6193-pinned-peak", "verl-6635-master-param"} <= set(names)
    monkeypatch.chdir(tmp_path)  # not the repository: the name must still resolve
    assert resolve("verl-6193").name == "verl-6193-pinned-peak.toml"
    assert resolve("ci-small").is_file()
    local = tmp_path / "mine.toml"
    assert resolve(str(local)) == local  # a path is used as given


@pytest.mark.parametrize(("spec", "says"), [("verl", "could be"), ("nope", "choose one of")])
def test_unknown_or_ambiguous_scenario_is_a_usage_error(spec, says):
    with pytest.raises(UsageError, match=says):
        resolve(spec)


def test_plan_names_a_packaged_scenario_from_any_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_main(capsys, "plan", "verl-6193", "--no-terms")
    assert code == 0, err
    assert "naive" in out and "1805.85 GiB > 1700.00 GiB" in out


def test_scenarios_command_lists_them(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run_main(capsys, "scenarios")
    assert code == 0
    assert "verl-6635-master-param" in out and "ci-small" in out


def _warn_from(module: str) -> None:
    exec("import warnings\nwarnings.warn('backend missing', UserWarning)", {"__name__": module})


def test_third_party_chatter_is_silenced_and_ours_stays(caplog):
    loggers = ["megatron", "transformer_engine", "apex", "torch.distributed"]
    levels = {name: logging.getLogger(name).level for name in loggers}
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            _quiet_third_party_warnings()
            _warn_from("megatron.core.models.backends")
            _warn_from("transformer_engine.pytorch")
            _warn_from("megatronic")  # a different package that merely starts alike
            _warn_from("offloadprobe.engine.runner")
        assert sorted(str(w.message) for w in seen) == ["backend missing"] * 2
        with caplog.at_level(logging.INFO):
            gpt = logging.getLogger("megatron.core.models.gpt.gpt_model")
            gpt.warning("GPTModel IS DEPRECATED")
            logging.getLogger("megatron.core").error("a real error")
            logging.getLogger("offloadprobe").warning("our own note")
        messages = [r.getMessage() for r in caplog.records]
        assert "GPTModel IS DEPRECATED" not in messages
        assert "a real error" in messages and "our own note" in messages
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def test_torchs_no_cuda_chatter_is_dropped_and_its_other_records_stay(caplog):
    """What a CUDA build of torch says on a host without a driver when megatron-core's
    imports reach ``torch.utils.cpp_extension`` (a log record) and our device checks reach
    ``torch.cuda.is_available`` (a warning); in offloadprobe's own processes only."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    filters = list(logger.filters)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            _quiet_third_party_warnings()
            once = len(logger.filters)
            _quiet_third_party_warnings()  # the zygote, then its worker: one filter
            warnings.warn(
                "CUDA initialization: Found no NVIDIA driver on your system.", stacklevel=1
            )
            warnings.warn("Failed to initialize NumPy: No module named 'numpy'", stacklevel=1)
            warnings.warn("an unrelated torch warning", UserWarning, stacklevel=1)
        assert [str(w.message) for w in seen] == ["an unrelated torch warning"]
        assert len(logger.filters) == once
        with caplog.at_level(logging.INFO):
            logger.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local")
            logger.warning("Error checking compiler version for c++")
        assert [r.getMessage() for r in caplog.records] == [
            "Error checking compiler version for c++"
        ]
    finally:
        logger.filters[:] = filters
