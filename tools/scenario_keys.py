"""Write docs/scenario-keys.md from the scenario schema's own key definitions
(``offloadprobe/scenarios/keys.py``); ``--check`` exits 1 when the file differs.
tests/unit/test_scenario_keys.py runs the check."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "scenario-keys.md"


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    from offloadprobe.scenarios.keys import markdown

    text = markdown()
    if "--check" in argv:
        same = DOC.exists() and DOC.read_text(encoding="utf-8") == text
        print(
            "docs/scenario-keys.md is up to date" if same else "run python tools/scenario_keys.py"
        )
        return 0 if same else 1
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
