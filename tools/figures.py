"""Write the measured figures README.md and docs/ show from committed results. One command:

    python tools/figures.py            # every marked figure and table in README.md, docs/*.md
    python tools/figures.py README.md  # one file's
    make excerpts                      # the command output (tools/excerpts.py), then these

A figure in prose is an HTML comment that names where it comes from, right before the
value it writes (GitHub shows the value alone)::

    naive peaks at <!-- figure: h200-2026-12-01-compare-5gib.json naive host_peak_x -->4.22x

The three words (shell-quoted where a row's name has spaces): a result file (in
``benchmarks/results/``, or a path from the repository root such as
``docs/excerpts/readme-make-run.json``, where the first run's document is read;
``ARCHIVE.tar.gz:MEMBER`` reads a member), the row (``-`` for the document itself;
a word that is a row's label, strategy, row or name; or ``key=value,...``) among its
``runs`` or ``rows``, and a dotted key in it (looked up under ``summary`` too). A fourth
word picks the format (``FORMATS``); by default ``_x`` keys are multiples (``4.22x``),
``_bytes`` keys sizes (``21.10 GiB``), ``gbps`` keys one decimal.

A whole table is a marker on the line before it (indented as the table is), naming its
generator in ``TABLES``::

    <!-- table: h200-compare -->
    | strategy | host peak | ...

``tests/unit/test_figures.py`` regenerates every marked figure and table in memory
(nothing runs, the files are read) and fails where the Markdown differs, and it fails on
a measured figure in README.md or a page listed in ``STRICT`` that no marker wrote.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import sys
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SOURCES = ("README.md", "docs/*.md")
STRICT = ("README.md", "docs/field-offloads.md", "docs/strategies.md")
"""Pages where every measured figure must be a marked one (the others are partly notes)."""
VALUE = r"(?:n/a|-|-?\d[\d,]*(?:\.\d+)?(?:x| [KMG]iB| B| GB/s)?)"
FIGURE = re.compile(rf"<!-- figure: (?P<spec>[^>]+?) -->(?P<value>{VALUE})?")
TABLE = re.compile(r"^<!-- table: (?P<name>[\w-]+) -->$")
MEASURED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:x(?!\w)| ?[KMG]iB\b| ?GB/s\b)")
"""What a measured figure looks like in prose: a multiple, a size or a rate."""
GiB = 1 << 30


class FigureError(SystemExit):
    """A marker that names nothing the results hold (exit 1 with the reason)."""


def format_bytes(n: float | None) -> str:
    from offloadprobe.core.units import format_bytes as fmt

    return fmt(None if n is None else int(n))


FORMATS: dict[str, Callable[[Any], str]] = {
    "x": lambda v: f"{v:.2f}x",
    "x1": lambda v: f"{v:.1f}x",
    "x3": lambda v: f"{v:.3f}x",
    "bytes": format_bytes,
    "gib": lambda v: f"{v / GiB:.2f} GiB",
    "gbps": lambda v: f"{v:.1f}",
    "f2": lambda v: f"{v:.2f}",
    "int": lambda v: f"{int(v)}",
}


def default_format(key: str, value: Any) -> str:
    last = key.rsplit(".", 1)[-1]
    if last.endswith("_x") or last == "peak_x":
        return "x"
    if any(part.endswith("_bytes") or "_bytes_" in part for part in key.split(".")):
        return "bytes"
    if "gbps" in last:
        return "gbps"
    return "int" if isinstance(value, int) else "f2"


# ---------------------------------------------------------------- reading the results


@functools.cache
def document(source: str) -> Any:
    """A result file's JSON: ``benchmarks/results/NAME``, a path from the repository root,
    or ``ARCHIVE.tar.gz:MEMBER``; an excerpt's store gives its first run's document."""
    name, _, member = source.partition(":")
    path = ROOT / name if "/" in name else RESULTS / name
    if not path.is_file():
        raise FigureError(f"figures: no result file {source!r} ({path})")
    if member:
        with tarfile.open(path) as archive:
            found = next((m for m in archive.getnames() if m.lstrip("./") == member), None)
            handle = archive.extractfile(found) if found else None
            if handle is None:
                raise FigureError(f"figures: {name} has no member {member!r}")
            doc = json.loads(handle.read())
    else:
        doc = json.loads(path.read_text())
    if isinstance(doc, dict) and "spec" in doc and "runs" in doc:  # tools/excerpts.py's store
        doc = next(r["document"] for r in doc["runs"] if "document" in r)
    return doc


def entries(doc: Any) -> list[dict]:
    for key in ("runs", "rows", "calls"):
        if isinstance(doc, dict) and isinstance(doc.get(key), list):
            return doc[key]
    raise FigureError("figures: the result has no runs, rows or calls to choose from")


def row(doc: Any, selector: str) -> Any:
    """The entry ``selector`` names (``-``: the document)."""
    if selector == "-":
        return doc
    if "=" in selector:
        wanted = dict(pair.split("=", 1) for pair in selector.split(","))
        found = [e for e in entries(doc) if all(str(e.get(k)) == v for k, v in wanted.items())]
    else:
        found = []
        for key in ("label", "strategy", "row", "name"):
            found = [e for e in entries(doc) if e.get(key) == selector]
            if found:
                break
    if len(found) != 1:
        raise FigureError(f"figures: row {selector!r} matches {len(found)} entries, not one")
    return found[0]


def lookup(entry: Any, key: str) -> Any:
    """``key`` (dotted; list items by index) in ``entry``, or under its ``summary``."""
    for start in (entry, entry.get("summary") if isinstance(entry, dict) else None):
        value = start
        for part in key.split("."):
            if isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            elif isinstance(value, dict) and part in value:
                value = value[part]
            else:
                value = None
                break
        if value is not None:
            return value
    raise FigureError(f"figures: no key {key!r} in that row")


def figure(spec: str) -> str:
    """The text a ``<!-- figure: SPEC -->`` marker writes."""
    words = shlex.split(spec)
    if len(words) not in (3, 4):
        raise FigureError(f"figures: {spec!r}: give FILE ROW KEY [FORMAT]")
    source, selector, key = words[:3]
    value = lookup(row(document(source), selector), key)
    name = words[3] if len(words) == 4 else default_format(key, value)
    if name not in FORMATS:
        raise FigureError(f"figures: {spec!r}: format {name!r} is not one of {sorted(FORMATS)}")
    return FORMATS[name](value)


# ---------------------------------------------------------------- tables


def _markdown(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *["| " + " | ".join(r) + " |" for r in rows],
    ]


def _x_and_bytes(summary: dict, key: str) -> str:
    return f"{summary[key + '_x']:.2f}x ({format_bytes(summary[key + '_bytes'])})"


def _rate(first: float | None, steady: float | None) -> str:
    return "-" if first is None or steady is None else f"{first:.1f} / {steady:.1f}"


def h200_compare() -> list[str]:
    """README: the problem and the fix at 5 GiB on the H200."""
    runs = document("h200-2026-12-01-compare-5gib.json")["runs"]
    rows = [
        [
            f"`{r['strategy']}`",
            _x_and_bytes(r["summary"], "host_peak"),
            _x_and_bytes(r["summary"], "steady_host"),
            format_bytes(r["summary"]["pinned_reserved_bytes"]),
            _rate(r["summary"]["first_offload_gbps"], r["summary"]["offload_gbps"]),
        ]
        for r in runs
    ]
    head = ["strategy", "host peak", "steady host", "pinned", "offload GB/s, first / later"]
    return _markdown(head, rows)


def field_strategies() -> list[str]:
    """docs/field-offloads.md, docs/h200-results.md: benchmarks/field_table.py's rows."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("field_table", ROOT / "benchmarks/field_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _markdown(module.HEAD, module.rows())


def first_offload() -> list[str]:
    """docs/field-offloads.md: every parameter strategy's first offload and what it holds
    while training, at 5 GiB."""
    doc = document("h200-2026-12-01-first-offload.json")
    rows = []
    for r in doc["rows"]:
        if r["size"] != "5GiB" or r["verdict"] != "ok":
            continue
        later = ", ".join(f"{g:.1f}" for g in r["offload_gbps_by_cycle"][1:])
        rows.append(
            [
                f"`{r['strategy']}`",
                f"{r['first_offload_gbps']:.1f}",
                later,
                f"{r['load_gbps']:.1f}",
                f"{r['host_peak_x']:.2f}x",
                f"{format_bytes(r['held_while_training_bytes'])} "
                f"({r['held_while_training_x']:.3f}x)",
            ]
        )
    head = ["strategy", "first offload GB/s", "later", "load GB/s", "host peak", "held in training"]
    return _markdown(head, rows)


def ranks_node() -> list[str]:
    """docs/ranks.md: two ranks on one node, each rank's peak, their sum, the node's."""
    rows = []
    for r in document("h200x2-2026-11-30-ranks-compare-5gib.json")["runs"]:
        node = r["world"]["nodes"][0]
        rank = max(r["world"]["ranks"], key=lambda k: k["summary"]["host_peak_bytes"])
        rows.append(
            [
                r["strategy"],
                f"{format_bytes(rank['summary']['host_peak_bytes'])} "
                f"({rank['summary']['host_peak_x']:.2f}x)",
                format_bytes(node["rank_peak_sum_bytes"]),
                f"{format_bytes(node['peak_bytes'])} ({node['peak_x']:.2f}x)",
                format_bytes(node["steady_bytes"]),
            ]
        )
    head = ["strategy", "host peak per rank", "sum of the ranks", "node measured", "node steady"]
    return _markdown(head, rows)


ATTACH = "h200-2026-12-01-attach-example.tar.gz"
ATTACH_PAIRS = (
    ("pre", "pre-fix (`param_data.cpu().pin_memory()`)"),
    ("post", "post-fix (one pinned buffer, `copy_`)"),
    ("mcore", "megatron-core's own `offload_to_cpu`"),
)


def attach_example() -> list[str]:
    """docs/attach.md: the example job's offload calls at 5 GiB on the H200."""
    rows = []
    for name, what in ATTACH_PAIRS:
        doc = document(f"{ATTACH}:example-{name}.json")
        calls = [c for c in doc["calls"] if c["phase"] == "offload"]
        rows.append(
            [
                what,
                " / ".join(format_bytes(c["host_peak_bytes"]) for c in calls),
                format_bytes(calls[-1]["pinned_after_bytes"]),
                str(doc["job_exit_code"]),
            ]
        )
    head = ["offload functions", "peak of call 1 / 2 / 3", "pinned after", "job exit"]
    return _markdown(head, rows)


def strategies() -> list[str]:
    """docs/strategies.md: every registered strategy, from the registries."""
    from offloadprobe.report.strategy_list import strategy_lines, strategy_markdown

    return strategy_markdown(strategy_lines())


TABLES: dict[str, Callable[[], list[str]]] = {
    "h200-compare": h200_compare,
    "field-strategies": field_strategies,
    "first-offload": first_offload,
    "ranks-node": ranks_node,
    "attach-example": attach_example,
    "strategies": strategies,
}


# ---------------------------------------------------------------- the Markdown files


@dataclass(frozen=True, slots=True)
class Drift:
    """A marked figure or table whose text is not what the results give."""

    path: Path
    line: int
    what: str
    shown: str
    wanted: str

    def __str__(self) -> str:
        where = f"{self.path.relative_to(ROOT)}:{self.line}"
        return f"{where}: {self.what} shows {self.shown!r}, the results give {self.wanted!r}"


def markdown_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for pattern in SOURCES for p in root.glob(pattern))


def rewrite(path: Path) -> tuple[str, list[Drift]]:
    """``path``'s text with every marked figure and table regenerated, and what changed."""
    lines, out, drift = path.read_text().splitlines(), [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        match = TABLE.match(line.strip())
        if match is not None:
            name = match["name"]
            if name not in TABLES:
                raise FigureError(f"{path}:{i + 1}: no table {name!r} (one of {sorted(TABLES)})")
            indent = line[: len(line) - len(line.lstrip())]
            end = i + 1
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            shown, wanted = lines[i + 1 : end], [indent + row for row in TABLES[name]()]
            if shown != wanted:
                joined = "\n".join(shown), "\n".join(wanted)
                drift.append(Drift(path, i + 1, f"table {name}", *joined))
            out += [line, *wanted]
            i = end
            continue

        code = [c.span() for c in re.finditer(r"`[^`]*`", line)]

        def fill(m: re.Match, number: int = i + 1, code: list = code) -> str:
            if any(a <= m.start() < b for a, b in code):
                return m.group(0)  # shown as code (how to write one), not a marker
            wanted = figure(m["spec"])
            if m["value"] != wanted:
                drift.append(Drift(path, number, m["spec"], m["value"] or "", wanted))
            return f"<!-- figure: {m['spec']} -->{wanted}"

        out.append(FIGURE.sub(fill, line))
        i += 1
    return "\n".join(out) + "\n", drift


def unmarked(path: Path) -> list[str]:
    """Measured-looking figures in ``path``'s prose that no marker wrote."""
    return unmarked_lines(path.read_text().splitlines())


def unmarked_lines(lines: list[str]) -> list[str]:
    """Measured-looking figures in prose that no marker wrote (code blocks, code spans,
    marked figures and tables left out): ``line: figure``."""
    found, fenced, table = [], False, False
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if TABLE.match(line.strip()):
            table = True
            continue
        if table and line.lstrip().startswith("|"):
            continue
        table = False
        if fenced:
            continue
        prose = FIGURE.sub("", re.sub(r"`[^`]*`", "", line))
        prose = re.sub(r"<!--.*?-->", "", prose)
        found += [f"{number}: {m.group(0)}" for m in MEASURED.finditer(prose)]
    return found


def main(argv: list[str]) -> int:
    paths = [ROOT / a for a in argv] or markdown_files()
    for path in paths:
        text, drift = rewrite(path)
        for d in drift:
            print(d)
        if drift:
            path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
