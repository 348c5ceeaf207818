"""attach's import hook, in this process: what it wraps, when, and what it rebinds.

Each test writes small modules into a fresh folder on sys.path, installs a hook for them
and removes both afterwards; calls are recorded by a fake session (the wrapper asks
``offloadprobe.attach.runtime.SESSION``), so only the wiring is tested here.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
import traceback
from pathlib import Path

import pytest

from offloadprobe.attach import hook, runtime
from offloadprobe.attach.wrap import MARK


class FakeSession:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str | None]] = []

    def begin(self, phase: str, target: str):
        return {"phase": phase, "target": target}

    def end(self, frame, error) -> None:
        self.calls.append(
            (frame["phase"], frame["target"], type(error).__name__ if error else None)
        )


@pytest.fixture
def world(tmp_path, monkeypatch):
    """(write(name, source), install(*specs) -> (hook, records), session); undone after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    session = FakeSession()
    monkeypatch.setattr(runtime, "SESSION", session)
    written: list[str] = []
    hooks: list[hook.Hook] = []

    def write(name: str, source: str) -> None:
        path = tmp_path / Path(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        written.append(name)

    def install(*specs: str):
        phases = []
        for spec in specs:
            name, _, target = spec.partition("=")
            module, _, qualname = target.partition(":")
            phases.append({"name": name, "module": module, "qualname": qualname})
        records: list[tuple[str, dict]] = []
        h = hook.install(phases, lambda kind, **fields: records.append((kind, fields)))
        hooks.append(h)
        return h, records

    yield write, install, session
    for h in hooks:
        if h in sys.meta_path:
            sys.meta_path.remove(h)
    for name in list(sys.modules):
        if any(name == w or name.startswith(w + ".") for w in written):
            del sys.modules[name]


def test_a_function_is_wrapped_when_its_module_is_imported(world):
    write, install, session = world
    write("hk_a", "def offload(x):\n    return x * 2\n")
    _, records = install("off=hk_a:offload")
    assert "hk_a" not in sys.modules
    import hk_a

    assert getattr(hk_a.offload, MARK) == "off"
    assert hk_a.offload(21) == 42
    assert session.calls == [("off", "hk_a:offload", None)]
    assert [k for k, _ in records] == ["wrapped"]


def test_from_import_after_the_module_binds_the_wrapper(world):
    write, install, session = world
    write("hk_b", "def offload():\n    return 1\n")
    write("hk_b_user", "from hk_b import offload\n\ndef run():\n    return offload()\n")
    install("off=hk_b:offload")
    import hk_b_user

    hk_b_user.run()
    assert session.calls == [("off", "hk_b:offload", None)]


def test_a_reference_bound_before_the_wrap_is_rebound(world):
    write, install, session = world
    write("hk_c", "def offload():\n    return 1\n")
    write("hk_c_user", "from hk_c import offload as off\n\ndef run():\n    return off()\n")
    import hk_c_user  # imported before the hook exists: holds the original

    _, records = install("off=hk_c:offload")
    hk_c_user.run()
    assert session.calls == [("off", "hk_c:offload", None)]
    assert dict(records)["wrapped"]["rebound"] == 1


def test_a_module_imported_later_with_the_original_is_rebound_at_the_next_import(world):
    write, install, session = world
    write("hk_d", "def offload():\n    return 1\n\nKEPT = [offload]\n")
    write("hk_d_user", "import hk_d\n\nf = hk_d.KEPT[0]\n")  # the original, from a list
    write("hk_d_other", "")
    install("off=hk_d:offload")
    importlib.import_module("hk_d_user")  # binds the original, from the list
    importlib.import_module("hk_d_other")  # the next import sweeps hk_d_user

    sys.modules["hk_d_user"].f()
    sys.modules["hk_d"].KEPT[0]()  # a list is not a module's globals: not caught
    assert session.calls == [("off", "hk_d:offload", None)]


def test_class_methods_static_and_class_methods_keep_their_kind(world):
    write, install, session = world
    write(
        "hk_e",
        """
        class Buffer:
            def offload_to_cpu(self, n):
                return n + 1

            @staticmethod
            def helper(n):
                return n

            @classmethod
            def make(cls):
                return cls()

        class Sub(Buffer):
            pass
        """,
    )
    install("off=hk_e:Buffer.offload_to_cpu", "st=hk_e:Buffer.helper", "cm=hk_e:Buffer.make")
    import hk_e

    assert hk_e.Sub().offload_to_cpu(1) == 2  # a subclass that does not override it
    assert hk_e.Buffer.helper(5) == 5
    assert isinstance(hk_e.Buffer.make(), hk_e.Buffer)
    assert isinstance(hk_e.Buffer.__dict__["helper"], staticmethod)
    assert isinstance(hk_e.Buffer.__dict__["make"], classmethod)
    assert [c[0] for c in session.calls] == ["off", "st", "cm"]


def test_a_module_imported_before_install_is_patched_at_once(world):
    write, install, session = world
    write("hk_f", "def offload():\n    return 1\n")
    import hk_f

    install("off=hk_f:offload")
    hk_f.offload()
    assert session.calls == [("off", "hk_f:offload", None)]


def test_a_raising_call_is_recorded_and_its_traceback_has_no_wrapper_frame(world):
    write, install, session = world
    write("hk_g", "def offload():\n    raise ValueError('boom')\n")
    install("off=hk_g:offload")
    import hk_g

    with pytest.raises(ValueError, match="boom") as info:
        hk_g.offload()
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1] == "offload"
    assert "wrapper" not in frames
    assert session.calls == [("off", "hk_g:offload", "ValueError")]


def test_what_cannot_be_wrapped_is_skipped_with_a_reason(world):
    write, install, _ = world
    write(
        "hk_h",
        """
        def gen():
            yield 1

        class Thing:
            pass

        VALUE = 3
        """,
    )
    _, records = install(
        "g=hk_h:gen",
        "missing=hk_h:absent",
        "cls=hk_h:Thing",
        "val=hk_h:VALUE",
        "deep=hk_h:Nope.method",
        "typo=hk_h:gne",
        "method=hk_h:Thing.nope",
    )
    import hk_h  # noqa: F401

    reasons = {fields["phase"]: fields["reason"] for kind, fields in records if kind == "skipped"}
    assert "generator" in reasons["g"]
    assert reasons["missing"] == "hk_h has no absent"
    assert "not a function" in reasons["cls"]
    assert "not a function" in reasons["val"]
    assert reasons["deep"] == "hk_h has no Nope"
    assert reasons["typo"] == "hk_h has no gne; did you mean gen?"
    assert reasons["method"] == "hk_h.Thing has no nope"


def test_a_module_never_imported_stays_pending(world):
    _, install, _ = world
    h, records = install("off=hk_never_imported_anywhere:f")
    assert [(s["module"], s["qualname"]) for s in h.still_pending()] == [
        ("hk_never_imported_anywhere", "f")
    ]
    assert records == []


def test_a_submodule_of_a_package_and_a_circular_import(world):
    write, install, session = world
    write("hk_pkg.__init__", "from hk_pkg.utils import offload\n")
    write(
        "hk_pkg.utils",
        """
        def offload():
            return 1

        import hk_pkg.user  # circular: user binds offload while utils is half done
        """,
    )
    write("hk_pkg.user", "from hk_pkg.utils import offload\n")
    install("off=hk_pkg.utils:offload")
    import hk_pkg

    hk_pkg.offload()
    sys.modules["hk_pkg.user"].offload()
    assert [c[0] for c in session.calls] == ["off", "off"]


def test_outside_a_session_the_wrapper_calls_straight_through(world, monkeypatch):
    write, install, session = world
    write("hk_i", "def offload():\n    return 7\n")
    install("off=hk_i:offload")
    import hk_i

    monkeypatch.setattr(runtime, "SESSION", None)
    assert hk_i.offload() == 7
    assert session.calls == []
