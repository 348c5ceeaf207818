"""A third party's warning is shown at the code that caused it, never in offloadprobe's
files: CPU emulation's torch-function mode sits between the user's ``.storage()`` and
torch, and torch's ``stacklevel`` used to land in ``emulation.py``."""

from __future__ import annotations

import warnings

import torch

from offloadprobe.core import chatter


def _recorded(call) -> list[tuple[str, str]]:
    """(file name, message) of each warning ``call`` shows with attribution on."""
    seen: list[tuple[str, str]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, filename, lineno, *rest: seen.append(
            (filename, str(message))
        )
        chatter.attribute_warnings()
        call()
    return seen


def _users_storage_call() -> None:
    """The user's code, as verl's offload functions do it: ``.storage()``."""
    torch.zeros(4).storage()


def test_torchs_deprecation_under_emulation_is_shown_in_the_users_file():
    from offloadprobe.engine.runtime.emulation import _CudaToHost

    always = torch.storage._get_always_warn_typed_storage_removal()
    torch.storage._set_always_warn_typed_storage_removal(True)
    try:

        def under_emulation():
            from offloadprobe.engine.strategies.user import FunctionPair

            pair = FunctionPair(lambda _: _users_storage_call(), lambda _: None, each=False)
            with _CudaToHost():
                pair.offload([])  # offloadprobe calls the user's function, as a run does

        seen = _recorded(under_emulation)
    finally:
        torch.storage._set_always_warn_typed_storage_removal(always)
    assert [name for name, message in seen if "TypedStorage" in message] == [__file__]


def _module(name: str, filename: str, source: str, **names) -> dict:
    scope = {"__name__": name, "warnings": warnings, **names}
    exec(compile(source, filename, "exec"), scope)
    return scope


def test_our_own_warnings_and_ours_alone_keep_their_place():
    """Our warning stays in our file; a library call only our code made is shown in the
    library (its last frame before ours), not in ours."""
    ours = f"{chatter.OURS}/engine/fake_part.py"
    lib = _module(
        "fakelib.api", "/x/fakelib/api.py", "def old():\n    warnings.warn('old', stacklevel=2)\n"
    )
    part = _module(
        "offloadprobe.engine.fake_part",
        ours,
        "def ours():\n    warnings.warn('ours')\ndef via():\n    old()\n",
        old=lib["old"],
    )
    assert _recorded(part["ours"]) == [(ours, "ours")]
    assert _recorded(part["via"]) == [("/x/fakelib/api.py", "old")]
