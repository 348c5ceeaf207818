"""Allocator settings: which pinned keys this torch has; unknown keys are bad input."""

import pytest

from offloadprobe.core import alloc_conf
from offloadprobe.core.errors import UsageError

pytestmark = pytest.mark.processes(1)  # an interpreter asked for torch's parser


def test_keys_split_outside_brackets():
    conf = "max_split_size_mb:100,roundup_power2_divisions:[64:8,256:4],expandable_segments:True"
    assert alloc_conf.setting_keys(conf) == [
        "max_split_size_mb",
        "roundup_power2_divisions",
        "expandable_segments",
    ]


def test_every_known_pinned_key_is_listed_once_with_a_verdict():
    settings = alloc_conf.pinned_settings()
    assert [s.key for s in settings] == list(alloc_conf.PINNED_KEYS)
    # every torch since 2.6 has the background-threads setting
    assert {s.key for s in settings if s.exists} >= {"pinned_use_background_threads"}


@pytest.mark.parametrize("conf", ["pinned_use_cuda_host_regster:True", "bogus_key:1", "novalue"])
def test_unknown_or_malformed_setting_is_a_usage_error(conf):
    with pytest.raises(UsageError) as err:
        alloc_conf.validate_alloc_conf(conf)
    assert err.value.exit_code == 2 and conf.split(":")[0] in str(err.value)


def test_a_setting_this_torch_has_passes():
    alloc_conf.validate_alloc_conf("pinned_use_background_threads:True,max_split_size_mb:64")


def test_compare_rejects_an_unknown_setting_before_running(invoke, monkeypatch):
    from tests.fakes import FakeChild, install_child

    child = install_child(monkeypatch, FakeChild())
    result = invoke("compare", "lazy", "--device", "cpu", "--alloc-conf", "pinned_bogus:True")
    assert result.exit_code == 2
    assert len(result.error_lines) == 1 and "pinned_bogus" in result.stderr
    assert result.error_lines[0].startswith("offloadprobe: error: ")
    assert child.specs == []  # refused before any child started


def test_a_parser_that_accepts_any_key_is_not_trusted(monkeypatch):
    # this CPU build's parser accepts anything (a key that cannot exist too): the check
    # asks it, in one interpreter, distrusts it and falls back to the libraries' strings
    monkeypatch.setattr(alloc_conf, "cuda_build", lambda: True)
    said = []
    real = alloc_conf._parser_verdicts
    monkeypatch.setattr(alloc_conf, "_parser_verdicts", lambda confs: said.append(real(confs)))
    with pytest.raises(UsageError, match="pinned_bogus"):
        alloc_conf.validate_alloc_conf("pinned_bogus:1")
    assert said == [None]
