"""Check that offloadprobe's imports only go downward through its layers (see
docs/contributing.md), that no module outgrows one concept (500 lines; the runner 350),
and that the package reads at most one ``OFFLOADPROBE_*`` environment variable (options
are flags, keywords and scenario keys: ``core/options.py``). Prints ``layers ok`` or
every breach; exit 1 then."""

from __future__ import annotations

import re
import sys
from pathlib import Path

LAYERS = [
    ("core", "schemas"),
    ("layout",),
    ("measure",),
    ("engine",),
    ("engines",),
    ("isolation",),
    ("scenarios", "plan", "compare", "repro"),
    ("report", "attach"),
    ("cli", "pytest_plugin"),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
# verbs of one layer may use each other in this order only (no cycles)
VERB_ORDER = {"scenarios": 0, "plan": 1, "compare": 1, "repro": 2}
IMPORT = re.compile(r"^\s*(?:from|import) offloadprobe\.(\w+)", re.M)
WING = re.compile(r"^\s*(?:from|import) offloadprobe\.engines\.(\w+)", re.M)
"""An import of an engine's wing (``offloadprobe.engines.<wing>``): wings never import
each other; the harness (``engine/``, below them) never imports one (an upward import)."""


def violations(root: Path) -> list[str]:
    bad = []
    for path in sorted((root / "offloadprobe").rglob("*.py")):
        parts = path.relative_to(root).parts
        if len(parts) < 3 or parts[1] not in RANK:
            continue
        me = parts[1]
        for other in IMPORT.findall(path.read_text()):
            if other not in RANK or other == me:
                continue
            up = RANK[other] > RANK[me]
            same = RANK[other] == RANK[me]
            if up or (same and VERB_ORDER.get(other, 0) > VERB_ORDER.get(me, 0)):
                bad.append(f"{path.relative_to(root)}: {me} imports {other}")
        if me == "engines" and len(parts) > 3:
            wing = parts[2]
            for other in WING.findall(path.read_text()):
                if other != wing:
                    bad.append(f"{path.relative_to(root)}: engine {wing} imports engine {other}")
    return bad


MAX_LINES = 500
MAX_LINES_OF = {"offloadprobe/engine/runner.py": 349}
ENV = re.compile(r"OFFLOADPROBE_[A-Z][A-Z_]*")


def sizes(root: Path) -> list[str]:
    bad = []
    for path in sorted((root / "offloadprobe").rglob("*.py")):
        name = path.relative_to(root).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES_OF.get(name, MAX_LINES):
            bad.append(f"{name}: {lines} lines (at most {MAX_LINES_OF.get(name, MAX_LINES)})")
    return bad


def variables(root: Path) -> list[str]:
    found = {
        v for path in (root / "offloadprobe").rglob("*.py") for v in ENV.findall(path.read_text())
    }
    return (
        [f"{len(found)} OFFLOADPROBE_ variables, at most 1: {sorted(found)}"]
        if len(found) > 1
        else []
    )


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    bad = violations(root) + sizes(root) + variables(root)
    print("\n".join(bad) if bad else "layers ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
