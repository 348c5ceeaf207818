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


def test_check_refuses_an_unknown_name_and_imports_no_plug_in():
    from offloadprobe.core.registry import Registry

    registry = Registry("thing", "offloadprobe.test_no_such_group", lambda name, obj: obj)
    registry.register_module("real", "offloadprobe_no_such_package.real")  # never imported
    registry.check("real")  # a registered name passes without importing its module
    with pytest.raises(
        StrategyError, match=r"unknown thing 'rael' \(did you mean 'real'\?\): choose one of real"
    ):
        registry.check("rael")


def test_a_misspelt_name_fails_before_torch_is_imported():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from offloadprobe.engine.strategies import MODEL_STRATEGIES as M\n"
        "from offloadprobe.engine.optimizer.strategies import OPTIMIZER_STRATEGIES as O\n"
        "for check, name in ((M.check, 'lasy'), (O.check, 'fixd')):\n"
        "    try:\n"
        "        check(name)\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__)\n"
        "M.check('lazy'); M.check('mine.module:Object')\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["StrategyError", "StrategyError", "False"]
