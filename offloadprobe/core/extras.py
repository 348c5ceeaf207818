"""What a verb needs beyond the base install, and the one line that says how to get it.

The base install (typer, rich, psutil) runs ``attach``, ``show``, ``plan`` (projections)
and ``scenarios``: none of them imports torch. The verbs that build megatron-core's
objects (``run``, ``compare``, ``repro``, ``plan --probe --strategy``) and ``alloc-conf``
(torch's allocator) need the ``megatron`` extra. Each checks with :func:`require` before
anything starts, without importing either package (``importlib.util.find_spec``).
"""

from __future__ import annotations

import importlib.util

from offloadprobe.core.errors import UsageError

INSTALL = "pip install 'offloadprobe[megatron]'"
"""How to add what the measuring verbs need (torch and megatron-core)."""

CPU_FIRST = "without a GPU, install torch's CPU build first: docs/attach.md"

TORCH = ("torch", "torch")
MEGATRON = ("megatron.core", "megatron-core")
MEASURING = (TORCH, MEGATRON)
"""(module, distribution) pairs every measuring verb imports in its workers."""


class MissingExtra(UsageError):
    """A verb needs a package this installation lacks (exit 2, one line)."""


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return False


def missing(needs: tuple[tuple[str, str], ...] = MEASURING) -> list[str]:
    """The distributions of ``needs`` whose module cannot be found here."""
    return [dist for module, dist in needs if not _found(module)]


def message(what: str, dists: list[str]) -> str:
    """The one line for ``what`` (``offloadprobe run``) lacking ``dists``."""
    return f"{what} needs {' and '.join(dists)}, not installed here: {INSTALL} ({CPU_FIRST})"


def require(what: str, needs: tuple[tuple[str, str], ...] = MEASURING) -> None:
    """Raise :class:`MissingExtra` naming what ``what`` lacks, if anything."""
    lacking = missing(needs)
    if lacking:
        raise MissingExtra(message(what, lacking))


ROOTS = {"torch": "torch", "megatron": "megatron-core"}
"""Top-level module -> distribution, for a ``ModuleNotFoundError`` at the CLI's boundary."""


def from_import_error(exc: ModuleNotFoundError, what: str) -> MissingExtra | None:
    """The one-line error for a verb that hit a missing torch or megatron-core anyway
    (a path :func:`require` did not guard); None for any other missing module."""
    root = (exc.name or "").partition(".")[0]
    dist = ROOTS.get(root)
    return MissingExtra(message(what, [dist])) if dist else None
