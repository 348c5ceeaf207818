import pytest

from offloadprobe.core.errors import StrategyError
from offloadprobe.engine.strategies import MODEL_STRATEGIES, model_strategy


def test_builtin_names():
    assert {"naive", "lazy", "registered", "pageable"} <= set(MODEL_STRATEGIES.names())


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(StrategyError) as info:
        model_strategy("lasy")
    message = str(info.value)
    for name in ("naive", "lazy", "registered", "pageable"):
        assert name in message
    assert "package.module:object" in message


def test_user_module_that_does_not_import(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StrategyError, match="cannot import 'no_such_pkg_xyz'"):
        model_strategy("no_such_pkg_xyz:Strategy")


def test_user_object_without_load(tmp_path, monkeypatch):
    (tmp_path / "half_strategy.py").write_text(
        "class Half:\n    def offload(self, models):\n        pass\n"
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StrategyError, match="lacks load"):
        model_strategy("half_strategy:Half")
