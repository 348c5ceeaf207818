"""Third-party chatter that is not offloadprobe's output, silenced in every process; and
third-party warnings shown where the code that caused them is, never in our files."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import Any

THIRD_PARTY = ("megatron", "transformer_engine", "apex", "torch.distributed")
"""Packages whose import-time and construction-time chatter is not offloadprobe's output:
megatron-core's deprecation banners (``GPTModel IS DEPRECATED``, logged by
``megatron.core`` loggers) and optional-backend warnings (Transformer Engine, Apex,
``warnings.warn`` in their modules). Our own notes say what was emulated or missing."""

TORCH_LOG_CHATTER = {"torch.utils.cpp_extension": ("No CUDA runtime is found",)}
"""torch's own import-time log lines that offloadprobe's imports cause in its processes
(logger -> message starts): a CUDA build of torch on a host without a driver logs "No CUDA
runtime is found, using CUDA_HOME=..." when megatron-core's ``nccl_allocator`` imports
``torch.utils.cpp_extension``. Dropped by a filter on that logger: its other records stay."""

TORCH_WARNING_CHATTER = (r"CUDA initialization: ", r"Failed to initialize NumPy: ")
"""torch's warnings (message starts) when our device checks (``torch.cuda.is_available``)
find a CUDA build without a driver (the report says which device ran, CPU emulation
too), and when our import of torch finds no numpy (``alloc-conf`` in a base install)."""

OURS = str(Path(__file__).resolve().parents[1])
"""The folder of the offloadprobe package."""


class _DropStarting:
    """A logging filter that drops the records whose message starts with one of ``starts``."""

    def __init__(self, starts: tuple[str, ...]) -> None:
        self.starts = starts

    def filter(self, record: Any) -> bool:
        return not str(record.msg).startswith(self.starts)


def quiet_third_party() -> None:
    """Silence warnings raised in, and log records below ERROR from, ``THIRD_PARTY``, and
    torch's chatter (``TORCH_LOG_CHATTER``, ``TORCH_WARNING_CHATTER``); show the other
    third-party warnings at the code that caused them (``attribute_warnings``). Called in
    offloadprobe's own processes only (the CLI, workers, the zygote): never in a job that
    ``attach`` measures, whose output is its own."""
    import logging

    for package in THIRD_PARTY:
        warnings.filterwarnings("ignore", module=package.replace(".", r"\.") + r"(\.|$)")
        logging.getLogger(package).setLevel(logging.ERROR)
    for name, starts in TORCH_LOG_CHATTER.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropStarting) for f in logger.filters):
            logger.addFilter(_DropStarting(starts))
    for start in TORCH_WARNING_CHATTER:
        warnings.filterwarnings("ignore", message=start, category=UserWarning)
    attribute_warnings()


def _ours(filename: str) -> bool:
    return str(Path(filename).resolve()).startswith(OURS + "/") if filename else False


def _package(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "")).partition(".")[0]


def _raiser(frame: FrameType | None) -> FrameType | None:
    """The frame that called ``warnings.warn``: the first outside the warnings module."""
    while frame is not None and frame.f_code.co_filename == warnings.__file__:
        frame = frame.f_back
    return frame


def blamed(raiser: FrameType) -> FrameType:
    """Where a third party's warning belongs: the first frame outward of ``raiser`` in
    neither its package nor offloadprobe that offloadprobe called into (the user's
    strategy); where only our code led there, the raiser's package's frame our code called.

    A library's ``stacklevel`` counts frames up from itself; when offloadprobe sits in
    between (CPU emulation's torch-function mode calls ``Tensor.storage`` for the user's
    ``.storage()``), the count lands in our file. Frames outward of our outermost one (the
    interpreter's, click's, a test's) called us: they are never to blame.
    """
    frames: list[FrameType] = []
    frame: FrameType | None = raiser
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    ours = [_ours(f.f_code.co_filename) for f in frames]
    outermost = max((i for i, mine in enumerate(ours) if mine), default=0)
    package = _package(raiser)
    for f, mine in zip(frames[:outermost], ours, strict=False):
        if not mine and _package(f) != package:
            return f
    entry = raiser
    for f, mine in zip(frames, ours, strict=True):
        if mine:
            break
        entry = f
    return entry


def attribute_warnings() -> None:
    """Wrap ``warnings.showwarning`` (once): a warning a third party raised that its
    ``stacklevel`` put in one of our files is warned again at :func:`blamed`'s frame,
    under that frame's module, so filters and once-per-place apply there."""
    shown = warnings.showwarning
    if getattr(shown, "_offloadprobe", False):
        return

    def showwarning(
        message: Any,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        raiser = _raiser(sys._getframe(1)) if _ours(filename) else None
        if raiser is None or _ours(raiser.f_code.co_filename):
            shown(message, category, filename, lineno, file, line)
            return
        frame = blamed(raiser)
        registry = frame.f_globals.setdefault("__warningregistry__", {})
        warnings.warn_explicit(
            message,
            category,
            frame.f_code.co_filename,
            frame.f_lineno,
            module=str(frame.f_globals.get("__name__", "")),
            registry=registry,
            module_globals=frame.f_globals,
        )

    showwarning._offloadprobe = True  # type: ignore[attr-defined]
    warnings.showwarning = showwarning
