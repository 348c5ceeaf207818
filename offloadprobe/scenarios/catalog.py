"""The scenarios shipped with offloadprobe, found by name or by path.

``offloadprobe plan verl-6193`` and ``offloadprobe repro ci-small`` name a packaged
scenario by its file stem or by a unique prefix of it; an existing path is used as is.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from offloadprobe.core.errors import UsageError

SUFFIX = ".toml"


def folder() -> Path:
    """Where the package's scenario files are installed."""
    return Path(str(resources.files("offloadprobe.scenarios") / "data"))


def packaged() -> list[Path]:
    """Every scenario file installed with the package, sorted by name."""
    return sorted(
        (entry for entry in folder().iterdir() if entry.name.endswith(SUFFIX)),
        key=lambda p: p.name,
    )


def resolve(spec: Path | str) -> Path:
    """A path that exists, or the packaged scenario ``spec`` names (stem or unique prefix)."""
    path = Path(spec)
    if path.exists() or path.suffix == SUFFIX or len(path.parts) > 1:
        return path
    name = str(spec)
    files = packaged()
    exact = [p for p in files if p.stem == name]
    matches = exact or [p for p in files if p.stem.startswith(name)]
    if len(matches) == 1:
        return matches[0]
    names = ", ".join(p.stem for p in files)
    if matches:
        hits = ", ".join(p.stem for p in matches)
        raise UsageError(f"scenario {name!r} could be {hits}: give more of its name")
    raise UsageError(
        f"no scenario file {name!r} and no packaged scenario of that name: choose one of "
        f"{names}, or give a path to a .toml file (offloadprobe scenarios lists them)"
    )
