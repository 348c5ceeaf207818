"""Regenerate the command output the README and docs show, from real runs. One command:

    python tools/excerpts.py            # every marked block in README.md and docs/*.md
    python tools/excerpts.py README.md  # one file's
    make excerpts                       # the same, in the Makefile's environment

A block of output is marked by the comment on the line before its fence, naming what
made it::

    <!-- excerpt: make run -->
    ```text
    ...
    ```

The command runs from the repository root at ``COLUMNS=80``, with this interpreter's
``offloadprobe``; ``make TARGET`` runs that target's recipe as the Makefile has it now
(``$(BIN)/offloadprobe`` is this interpreter's), so the excerpt follows the Makefile. The
block becomes the command's stdout (trailing spaces dropped). Options after a ``;``:
``stderr`` (show stderr instead, where ``attach`` prints its report) and ``grep=REGEX``
(only the lines it matches). ``python`` in a command is this interpreter.

Each offloadprobe command that writes a report (``run``, ``compare``, ``plan``,
``repro``) is given ``--json``, and the documents are kept beside the Markdown in
``docs/excerpts/NAME.json`` with the command lines. ``tests/unit/test_excerpts.py`` then
checks, without running anything: that each marker's command is still the one recorded
and still parses, and that today's reporter renders the recorded documents to exactly
the block (numbers are the run's, so nothing varies from one test run to the next).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("README.md", "docs/*.md")
STORE = ROOT / "docs" / "excerpts"
MARKER = re.compile(r"^<!-- excerpt: (?P<spec>.+?) -->$")
REPORTS = ("run", "compare", "plan", "repro")
"""Verbs whose stdout is their ``--json`` document rendered by the table reporter."""
WIDTH = 80


@dataclass(frozen=True, slots=True)
class Excerpt:
    """One marked block: where it is, what made it, and what it shows now."""

    path: Path
    marker_line: int
    """Index of the marker line; the fence opens on the next one."""
    spec: str
    """The command as the marker names it (``make run``)."""
    stream: str
    """``stdout`` or ``stderr``."""
    grep: str | None
    shown: str
    """The block's text as the file has it."""

    @property
    def name(self) -> str:
        """The file stem of its stored documents: the Markdown file and the command."""
        words = re.sub(r"[^a-z0-9]+", "-", self.spec.lower()).strip("-")
        return f"{self.path.stem.lower()}-{words}"[:80]

    def commands(self) -> list[list[str]]:
        """The command lines it stands for (a make target: its recipe's lines)."""
        return resolve(self.spec)

    def select(self, text: str) -> str:
        """``text`` as the block shows it: trailing spaces dropped, ``grep`` applied."""
        lines = [line.rstrip() for line in text.splitlines()]
        if self.grep is not None:
            lines = [line for line in lines if re.search(self.grep, line)]
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines) + "\n"


def markdown_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for pattern in SOURCES for p in root.glob(pattern))


def excerpts(path: Path) -> list[Excerpt]:
    """Every marked block of ``path``; a marker not followed by a fence is an error."""
    lines = path.read_text().splitlines()
    found = []
    for i, line in enumerate(lines):
        match = MARKER.match(line.strip())
        if match is None:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise SystemExit(f"{path}:{i + 1}: an excerpt marker must sit right above a fence")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        spec, _, options = match["spec"].partition(";")
        opts = dict(
            (o.strip().partition("=")[0], o.strip().partition("=")[2])
            for o in options.split(",")
            if o.strip()
        )
        found.append(
            Excerpt(
                path=path,
                marker_line=i,
                spec=spec.strip(),
                stream="stderr" if "stderr" in opts else "stdout",
                grep=opts.get("grep") or None,
                shown="\n".join(lines[i + 2 : end]) + "\n",
            )
        )
    return found


def recipe(target: str, makefile: Path = ROOT / "Makefile") -> list[str]:
    """The recipe lines of ``target`` (``@`` and leading tabs dropped)."""
    lines = makefile.read_text().splitlines()
    start = next(
        (i for i, line in enumerate(lines) if re.match(rf"^{re.escape(target)}\s*:", line)), None
    )
    if start is None:
        raise SystemExit(f"Makefile has no target {target!r}")
    body = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        body.append(line.strip().lstrip("@"))
    return body


def resolve(spec: str) -> list[list[str]]:
    """``make TARGET`` as its recipe's commands, else the command itself, as argv lists
    (``offloadprobe`` and ``$(BIN)/offloadprobe`` both name the tool)."""
    words = shlex.split(spec)
    lines = recipe(words[1]) if words[:1] == ["make"] and len(words) == 2 else [spec]
    out = []
    for line in lines:
        argv = shlex.split(line.replace("$(BIN)/offloadprobe", "offloadprobe"))
        if any("$(" in word for word in argv):
            raise SystemExit(f"{spec}: cannot run make variables in {line!r}")
        out.append(argv)
    return out


def stored(excerpt: Excerpt, store: Path = STORE) -> dict | None:
    path = store / f"{excerpt.name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _run(argv: list[str], json_path: Path | None) -> subprocess.CompletedProcess:
    argv = [sys.executable if word == "python" else word for word in argv]
    if argv[:1] == ["offloadprobe"]:
        argv = [sys.executable, "-m", "offloadprobe", *argv[1:]]
        if json_path is not None:
            argv += ["--json", str(json_path)]
    env = {**os.environ, "COLUMNS": str(WIDTH), "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)


def regenerate(excerpt: Excerpt, store: Path = STORE) -> str:
    """Run the excerpt's commands; store their documents; the block's new text."""
    store.mkdir(parents=True, exist_ok=True)
    entries, text = [], ""
    for index, argv in enumerate(excerpt.commands()):
        reports = argv[:1] == ["offloadprobe"] and len(argv) > 1 and argv[1] in REPORTS
        json_path = store / f"{excerpt.name}-{index}.tmp.json" if reports else None
        proc = _run(argv, json_path)
        text += proc.stdout if excerpt.stream == "stdout" else proc.stderr
        entry: dict = {"command": argv, "exit_code": proc.returncode}
        if json_path is not None and json_path.exists():
            entry["document"] = json.loads(json_path.read_text())
            json_path.unlink()
        entries.append(entry)
        print(f"{excerpt.path.relative_to(ROOT)}: {shlex.join(argv)}: exit {proc.returncode}")
    doc = {"spec": excerpt.spec, "stream": excerpt.stream, "runs": entries}
    (store / f"{excerpt.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return excerpt.select(text)


def write(path: Path, new: dict[int, str]) -> None:
    """Replace the blocks after the marker lines in ``new`` with their texts."""
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        if i in new:
            out.append(lines[i + 1])  # the opening fence, as it was
            end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
            out += new[i].rstrip("\n").split("\n")
            i = end
            continue
        i += 1
    path.write_text("\n".join(out) + "\n")


def main(argv: list[str]) -> int:
    paths = [ROOT / a for a in argv] or markdown_files()
    for path in paths:
        found = excerpts(path)
        if found:
            write(path, {e.marker_line: regenerate(e) for e in found})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
