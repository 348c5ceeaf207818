"""PyTorch allocator settings (``PYTORCH_ALLOC_CONF``): which pinned-allocator keys the
installed torch has, and a check that a setting string is one torch accepts.

On a CUDA build torch's own parser decides: the string is applied in a fresh child
process with ``torch._C._accelerator_setAllocatorSettings`` (torch 2.11 raises
``ValueError: Unrecognized key`` there, where the same string in the environment is
parsed only at the first CUDA allocation). Where the parser accepts any key (a CPU build,
which has no pinned allocator, does), the keys are read from torch's allocator libraries
instead (``libc10*.so`` hold every key their parsers compare against).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from offloadprobe.core.devices import torch_is_cuda_build
from offloadprobe.core.errors import UsageError

PINNED_KEYS: dict[str, tuple[str, str]] = {
    "pinned_use_cuda_host_register": (
        "True",
        "malloc + cudaHostRegister instead of cudaHostAlloc; the size is still rounded",
    ),
    "pinned_num_register_threads": ("8", "threads page-locking one registered block"),
    "pinned_use_background_threads": ("True", "pinned-block events processed on a thread"),
    "pinned_reserve_segment_size_mb": (
        "64",
        "one pinned segment reserved up front; small requests bump-allocated from it",
    ),
    "pinned_max_round_threshold_mb": ("64", "no power-of-two rounding above this size"),
    "pinned_max_cached_size_mb": ("64", "freed blocks above this size are released, not cached"),
}
"""Pinned-allocator keys torch has had (key -> a valid value, what it changes)."""

_KEY = rb"(?<![A-Za-z0-9_])([a-z][a-z0-9_]*[a-z0-9])(?![A-Za-z0-9_])"


@dataclass(frozen=True, kw_only=True, slots=True)
class PinnedSetting:
    """One pinned-allocator key and whether the installed torch has it."""

    key: str
    exists: bool
    meaning: str
    checked_by: str
    """``torch's parser`` (CUDA build) or ``library strings`` (CPU build)."""


def cuda_build() -> bool:
    return torch_is_cuda_build()


def torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "(not installed)"


def _library_words() -> set[str]:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return set()
    lib = Path(spec.origin).parent / "lib"
    words: set[str] = set()
    for path in sorted(lib.glob("libc10*.so*")):
        words |= {m.decode() for m in re.findall(_KEY, path.read_bytes())}
    return words


_PROBE = """
import sys, warnings, torch
warnings.simplefilter("ignore")
setter = getattr(torch.cuda.memory, "_set_allocator_settings", None)
if setter is None:
    setter = torch._C._accelerator_setAllocatorSettings
for conf in sys.argv[1:]:
    try:
        setter(conf)
        print("ok")
    except Exception as exc:
        print("rejected", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
"""


_NO_SUCH_KEY = "offloadprobe_no_such_key:1"


def _parser_verdicts(confs: list[str]) -> list[str] | None:
    """torch's own parser on each string, in a fresh process: ``ok`` or ``rejected ...``;
    None where the parser accepts a key that cannot exist (it does not validate keys)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, *confs, _NO_SUCH_KEY],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != len(confs) + 1:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UsageError(f"cannot check allocator settings with this torch: {tail}")
    return None if lines[-1] == "ok" else lines[:-1]


def pinned_settings() -> list[PinnedSetting]:
    """Every known pinned-allocator key and whether the installed torch accepts it."""
    keys = list(PINNED_KEYS)
    verdicts = (
        _parser_verdicts([f"{k}:{PINNED_KEYS[k][0]}" for k in keys]) if cuda_build() else None
    )
    if verdicts is not None:
        exists = [v == "ok" for v in verdicts]
        how = "torch's parser"
    else:
        words = _library_words()
        exists = [k in words for k in keys]
        how = "library strings"
    return [
        PinnedSetting(key=k, exists=e, meaning=PINNED_KEYS[k][1], checked_by=how)
        for k, e in zip(keys, exists, strict=True)
    ]


def setting_keys(conf: str) -> list[str]:
    """Keys of ``key:value,key:[a:b,c:d]`` (commas inside brackets belong to a value)."""
    parts = re.split(r",(?![^\[]*\])", conf)
    return [p.partition(":")[0].strip() for p in parts if p.strip()]


def validate_alloc_conf(conf: str, *, flag: str = "--alloc-conf") -> None:
    """Exit 2 on a setting the installed torch does not have, instead of ignoring it."""
    keys = setting_keys(conf)
    if not keys or any(":" not in p for p in re.split(r",(?![^\[]*\])", conf) if p.strip()):
        raise UsageError(f"{flag} {conf!r}: give key:value pairs separated by commas")
    version = torch_version()
    verdicts = _parser_verdicts([conf]) if cuda_build() else None
    if verdicts is not None:
        (verdict,) = verdicts
        if verdict != "ok":
            reason = verdict.removeprefix("rejected ").strip()
            raise UsageError(
                f"{flag} {conf!r}: torch {version} rejects it ({reason}); "
                "see `offloadprobe alloc-conf` for its pinned settings"
            )
        return
    words = _library_words()
    unknown = [k for k in keys if k not in words]
    if unknown:
        raise UsageError(
            f"{flag} {conf!r}: torch {version} has no allocator setting "
            + ", ".join(repr(k) for k in unknown)
            + "; see `offloadprobe alloc-conf` for its pinned settings"
        )
