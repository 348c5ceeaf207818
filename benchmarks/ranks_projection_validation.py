"""``plan`` against measurement over several ranks: per rank and per node, both parts.

Every case is one parallel layout of the probe model (dense or MoE) and one pair of
strategies (a parameter strategy and an optimizer-state strategy). One fresh
``offloadprobe run --nproc-per-node N`` child measures every rank and the node cgroup;
``offloadprobe.plan.probe_world.project_world`` predicts the same figures from the
child's own model and layout, without running anything:

- per rank, exactly: ``payload_bytes`` (the ``param_data`` bytes of the rank's DDP
  buffers, dense and expert-parallel, over every virtual-pipeline chunk);
- per rank: the parameter part's host peak and steady bytes (``summary.params``) and the
  optimizer part's host peak (``summary.optimizer``), each by ``measure.summary``'s
  ledger over that part's own phases;
- per rank and per node, both parts together: the highest offload or load phase (the
  rank's VmHWM; the node cgroup's peak) over the usage before the first offload, against
  the plan's figure with both parts in verl's order (``probe_world.rank_total``) summed
  over the node's ranks (the plan's node rule). Train phases are the framework's, not
  the offload's: what they left resident before a phase is taken out of that phase's
  peak and reported (``train_left_bytes``). The raw figures (``summary.host_peak_bytes``,
  the node's ``peak_bytes``) are compared too, and so is the scenario plan's rule that
  adds the two parts' peaks.

The verdict of a case: the payload is exact on every rank, and each judged peak (each
part per rank, both parts per rank, both parts per node) lands within ``--tolerance``.
Relative error is ``(measured - predicted) / predicted``.

CUDA, on a machine with 2 GPUs: 5 two-rank layouts x 3 pairs, children one at a time,
each over both GPUs. About 20 s a case on 2 x H200 (estimated from one-rank runs there),
so about 5 minutes. No case starts after ``--deadline-s`` (280 s) and a child gets 70 s,
so it ends within 6 minutes; cases it did not start are listed in ``skipped``::

    python benchmarks/ranks_projection_validation.py --device cuda \\
        --out "$OUT/h200x2-ranks-projection.json"

Re-projection (runs nothing: every prediction recomputed by the current code from
committed results, the measured figures kept; several files become one)::

    python benchmarks/ranks_projection_validation.py --reproject A.json B.json --out C.json

CPU emulation (gloo ranks; the committed result)::

    python benchmarks/ranks_projection_validation.py --device cpu \\
        --out benchmarks/results/cpu-2026-11-30-ranks-projection.json

Exit code 0 when every case lands, 1 otherwise. Needs no network.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from offloadprobe.core.config import (  # noqa: E402
    ModelConfig,
    OptimizerChoice,
    ParallelConfig,
    RunConfig,
    size_for_payload,
)
from offloadprobe.core.devices import guess_device  # noqa: E402
from offloadprobe.core.units import parse_size  # noqa: E402
from offloadprobe.isolation.rows import measure  # noqa: E402
from offloadprobe.plan.probe_world import ProbeLayout, WorldProjection, project_world  # noqa: E402


@dataclass(frozen=True, kw_only=True, slots=True)
class Layout:
    """One parallel layout of the probe model."""

    name: str
    nproc: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    vpp: int | None = None
    experts: int = 0
    layers: int = 4
    devices: tuple[str, ...] = ("cpu", "cuda")

    @property
    def dp(self) -> int:
        return self.nproc // (self.tp * self.pp)

    @property
    def shards(self) -> int:
        """How many ways the model's bytes are split over ranks (roughly)."""
        return self.tp * self.pp * (self.ep if self.experts else 1)


LAYOUTS = (
    Layout(name="dense-dp2", nproc=2),
    Layout(name="dense-tp2", nproc=2, tp=2),
    Layout(name="dense-pp2", nproc=2, pp=2),
    Layout(name="dense-pp2-vpp2", nproc=2, pp=2, vpp=2),
    Layout(name="moe-ep2-dp2", nproc=2, ep=2, experts=4),
    Layout(name="dense-tp2-pp2", nproc=4, tp=2, pp=2, devices=("cpu",)),
    Layout(name="moe-ep2-pp2-dp2", nproc=4, pp=2, ep=2, experts=4, devices=("cpu",)),
)

PAIRS = (
    ("naive", "legacy", True),
    ("lazy", "fixed", True),
    ("registered", "complete", False),
)
"""(parameter strategy, optimizer strategy, precision-aware optimizer). legacy and fixed
differ only under the precision-aware optimizer (legacy leaves ``master_param``);
complete runs the classic optimizer (fp32 master shards)."""

DEFAULT_PAYLOAD = {"cuda": "1GiB", "cpu": "16MiB"}
"""Per rank, about."""

NOT_RUN = {
    "moe-tp2": "offloadprobe refuses --tp above 1 with experts where Apex is missing (megatron-"
    "core's local layers need it for the sequence parallelism MoE under tp requires): this "
    "host and the H200 image",
    "moe-tp2-ep2": "offloadprobe refuses --ep that does not divide dp x cp (here 1)",
    "moe-pp2": "with ep 1 the experts' train step fails in megatron-core 0.16.1 (mlp.py adds "
    "the expert bias in place to the output of _ReduceFromModelParallelRegion: RuntimeError "
    "'a view ... modified inplace')",
}
"""Layouts the probe cannot build here, and why (recorded in the JSON)."""


def case_config(
    layout: Layout, pair: tuple[str, str, bool], device: str, payload: str, cycles: int
) -> RunConfig:
    strategy, optimizer_strategy, precision_aware = pair
    base = ModelConfig(num_layers=layout.layers, num_experts=layout.experts)
    model = size_for_payload(base, parse_size(payload) * layout.shards)
    return RunConfig(
        model=model,
        strategy=strategy,
        optimizer_strategy=optimizer_strategy,
        optimizer=OptimizerChoice(precision_aware=precision_aware),
        device=device,
        cycles=cycles,
        train_steps=1,
        reference_check=False,
        parallel=ParallelConfig(tp=layout.tp, pp=layout.pp, ep=layout.ep, vpp=layout.vpp),
    )


def _error(measured: int | None, predicted: int | None) -> float | None:
    if measured is None or not predicted:
        return None
    return (measured - predicted) / predicted


def _figure(measured: int | None, predicted: int | None) -> dict[str, Any]:
    return {"predicted": predicted, "measured": measured, "error": _error(measured, predicted)}


@dataclass(kw_only=True, slots=True)
class Case:
    """One layout x strategy pair: what was predicted and measured, and the verdict."""

    name: str
    layout: dict[str, Any]
    strategy: str
    optimizer_strategy: str
    precision_aware: bool
    model: dict[str, Any] | None = None
    exit_code: int | None = None
    wall_s: float | None = None
    ranks: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    max_abs_error: float | None = None
    payload_exact: bool | None = None
    within_tolerance: bool = False
    outside: list[str] = field(default_factory=list)
    """What is outside the bar, figure by figure (empty when the case lands)."""
    error: str | None = None


def _phases(record: dict[str, Any]) -> list[list[Any]]:
    """Per phase: cycle, name, and host bytes before / at the peak / after, over the rank's
    baseline (emulated device taken out): where each part's bytes came and went."""
    base = record["baseline_host_bytes"]
    out = []
    for cycle in record.get("cycles") or []:
        for phase in cycle["phases"]:
            h = phase["host"]
            before = h["rss_before"] - (h.get("device_in_host_before") or 0) - base
            after = h["rss_after"] - (h.get("device_in_host_after") or 0) - base
            peak = (h.get("host_peak_bytes") or h["peak"]) - base
            out.append([phase["cycle"], phase["phase"], before, peak, after])
    return out


MOVES = ("offload", "offload optimizer", "load", "load optimizer")


def moves_peak(phases: list[list[Any]], baseline: int = 0) -> int | None:
    """Host peak of the offload and load phases over ``baseline``, less what the train
    phases before each of them left resident (the framework's memory, in no part).
    ``phases``: [cycle, name, before, peak, after]."""
    left, started, best = 0, False, None
    for _, name, before, top, after in phases:
        if name == "train" and started and before is not None and after is not None:
            left += after - before
        if name in MOVES and top is not None:
            started = True
            value = top - baseline - left
            best = value if best is None else max(best, value)
    return best


def train_left(phases: list[list[Any]]) -> int:
    """Host bytes the train phases after the first offload left resident (the framework's
    memory, in the raw peaks but in no part)."""
    started, left = False, 0
    for _, name, before, _, after in phases:
        started |= name in MOVES
        if started and name == "train" and before is not None and after is not None:
            left += after - before
    return left


def measured_rank(record: dict[str, Any]) -> dict[str, Any]:
    """One rank's measured figures from the child's rank record."""
    s = record.get("summary") or {}
    params, opt = s.get("params") or {}, s.get("optimizer") or {}
    phases = _phases(record)
    return {
        "rank": record["place"]["rank"],
        "payload": record["payload_bytes"],
        "params_peak": params.get("host_peak_bytes"),
        "params_steady": params.get("steady_host_bytes"),
        "optimizer_peak": opt.get("host_peak_bytes"),
        "optimizer_steady": opt.get("steady_host_bytes"),
        "optimizer_moved_bytes": opt.get("moved_bytes"),
        "rank_peak": s.get("host_peak_bytes"),
        "rank_offload_peak": moves_peak(phases),
        "train_left_bytes": train_left(phases),
        "phases": phases,
    }


def measured_node(record: dict[str, Any]) -> dict[str, Any]:
    """One node's measured figures from the child's node record."""
    phases = [
        [p["cycle"], p["phase"], p["usage_before"], p["peak"], p["usage_after"]]
        for p in record.get("phases") or []
    ]
    return {
        "node_rank": record["node_rank"],
        "ranks": record["ranks"],
        "peak": record.get("peak_bytes"),
        "offload_peak": moves_peak(phases, record.get("baseline_bytes") or 0),
        "train_left_bytes": train_left(phases),
        "phases": phases,
        "rank_peak_sum_bytes": record.get("rank_peak_sum_bytes"),
        "cgroup_missing": record.get("cgroup_missing"),
    }


RANK_FIGURES = (
    "params_peak",
    "params_steady",
    "optimizer_peak",
    "optimizer_steady",
    "rank_peak",
    "rank_offload_peak",
)


def measured_from_rows(case: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """The measured figures a committed case holds (for ``--reproject``)."""
    ranks = []
    for row in case["ranks"]:
        m = {k: row[k]["measured"] for k in RANK_FIGURES}
        m["payload"] = row["payload"]["measured"]
        for key in ("rank", "optimizer_moved_bytes", "train_left_bytes", "phases"):
            m[key] = row[key]
        ranks.append(m)
    nodes = []
    for row in case["nodes"]:
        m = {k: row[k]["measured"] for k in ("peak", "offload_peak")}
        for key in (
            "node_rank",
            "ranks",
            "train_left_bytes",
            "phases",
            "rank_peak_sum_bytes",
            "cgroup_missing",
        ):
            m[key] = row[key]
        nodes.append(m)
    return ranks, nodes


def compare(
    case: Case,
    ranks: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    projection: WorldProjection,
    tolerance: float,
) -> None:
    """Fill ``case`` with predicted vs measured figures (``measured_rank``/``measured_node``).

    Each part's figures and the rank's peak are predicted by both parts replayed together
    (``RankProjection.run``); the older rule (``max_rule``: the larger of the parameter
    peak and the parameter steady bytes plus the optimizer state) and the scenario plan's
    rule (peaks added) are reported beside them, not judged."""
    judged: list[tuple[str, float | None]] = []
    exact = True
    for m in ranks:
        rank = m["rank"]
        p = projection.ranks[rank]
        run = p.run
        row = {
            "rank": rank,
            "pp_rank": p.pp_rank,
            "buffers": list(p.buffers),
            "payload": {"predicted": p.payload_bytes, "measured": m["payload"]},
            "params_peak": _figure(m["params_peak"], run.params.peak),
            "params_steady": _figure(m["params_steady"], run.params.steady),
            "optimizer_peak": _figure(m["optimizer_peak"], run.optimizer.peak),
            "optimizer_steady": _figure(m["optimizer_steady"], run.optimizer.steady),
            "optimizer_moved_bytes": m["optimizer_moved_bytes"],
            "rank_peak": _figure(m["rank_peak"], p.host_peak_bytes),
            "rank_offload_peak": _figure(m["rank_offload_peak"], p.host_peak_bytes),
            "params_peak_alone": _figure(m["params_peak"], p.params.peak),
            "rank_offload_peak_max_rule": _figure(m["rank_offload_peak"], p.max_rule_bytes),
            "rank_peak_added_rule": _figure(m["rank_peak"], p.added_peaks_bytes),
            "cross_part_reuses": run.cross_reuses,
            "train_left_bytes": m["train_left_bytes"],
            "phases": m["phases"],
        }
        case.ranks.append(row)
        exact &= p.payload_bytes == m["payload"]
        for key in ("params_peak", "optimizer_peak", "rank_offload_peak"):
            if row[key]["predicted"]:
                judged.append((f"rank {rank} {key}", row[key]["error"]))
    for m in nodes:
        n = projection.nodes[m["node_rank"]]
        max_rule = sum(projection.ranks[r].max_rule_bytes for r in n.ranks)
        row = {
            "node_rank": m["node_rank"],
            "ranks": m["ranks"],
            "peak": _figure(m["peak"], n.host_peak_bytes),
            "peak_added_rule": _figure(m["peak"], n.added_peaks_bytes),
            "offload_peak": _figure(m["offload_peak"], n.host_peak_bytes),
            "offload_peak_max_rule": _figure(m["offload_peak"], max_rule),
            "train_left_bytes": m["train_left_bytes"],
            "phases": m["phases"],
            "rank_peak_sum_bytes": m["rank_peak_sum_bytes"],
            "cgroup_missing": m["cgroup_missing"],
        }
        case.nodes.append(row)
        judged.append((f"node {m['node_rank']} offload peak", row["offload_peak"]["error"]))
    case.payload_exact = exact
    errors = [abs(e) for _, e in judged if e is not None]
    case.max_abs_error = max(errors) if errors else None
    case.outside = [
        f"{what}: {'no figure' if e is None else f'{100 * e:+.2f}%'}"
        for what, e in judged
        if e is None or abs(e) > tolerance
    ]
    if not exact:
        case.outside.insert(0, "payload not exact")
    case.within_tolerance = not case.outside


def project_case(
    model: ModelConfig,
    layout: dict[str, Any],
    pair: tuple[str, str, bool],
    *,
    megatron_core: str,
    emulated: bool,
    cycles: int,
) -> WorldProjection:
    """``plan``'s projection of one case (``layout``: the case's JSON ``layout``)."""
    strategy, optimizer_strategy, precision_aware = pair
    return project_world(
        model,
        ProbeLayout(
            tp=layout["tp"],
            pp=layout["pp"],
            ep=layout["ep"],
            dp=layout["dp"],
            vpp=layout["vpp"],
            megatron_core=megatron_core,
        ),
        strategy=strategy,
        optimizer_strategy=optimizer_strategy,
        optimizer=OptimizerChoice(precision_aware=precision_aware),
        emulated=emulated,
        cycles=cycles,
    )


def run_case(
    layout: Layout, pair: tuple[str, str, bool], args: argparse.Namespace, payload: str
) -> tuple[Case, dict[str, Any] | None]:
    strategy, optimizer_strategy, precision_aware = pair
    case = Case(
        name=f"{layout.name} {strategy}+{optimizer_strategy}",
        layout={
            "tp": layout.tp,
            "pp": layout.pp,
            "ep": layout.ep,
            "dp": layout.dp,
            "vpp": layout.vpp,
            "nproc_per_node": layout.nproc,
            "experts": layout.experts,
        },
        strategy=strategy,
        optimizer_strategy=optimizer_strategy,
        precision_aware=precision_aware,
    )
    config = case_config(layout, pair, args.device, payload, args.cycles)
    case.model = asdict(config.model)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    started = time.perf_counter()
    row = measure(
        config,
        device=guess_device(args.device),
        env={"PYTHONPATH": path},
        timeout_s=args.timeout,
        nproc_per_node=layout.nproc,
    )
    case.wall_s = round(time.perf_counter() - started, 1)
    case.exit_code = row.verdict.exit_code
    report = row.report.to_dict() if row.outcome.report is not None else None
    world = ((report or {}).get("runs") or [{}])[0].get("world")
    if case.exit_code != 0 or world is None:
        case.error = (row.outcome.stderr_tail or row.verdict.line() or "")[-2000:]
        return case, report
    try:
        projection = project_case(
            config.model,
            case.layout,
            pair,
            megatron_core=report["versions"]["megatron_core"],
            emulated=bool(report["emulated"]),
            cycles=args.cycles,
        )
        compare(
            case,
            [measured_rank(r) for r in world["ranks"]],
            [measured_node(n) for n in world["nodes"]],
            projection,
            args.tolerance,
        )
    except Exception as exc:  # a projection that fails is this case's result, not the run's
        case.error = f"projection or comparison failed: {type(exc).__name__}: {exc}"
    return case, report


def _pct(e: float | None) -> str:
    return "-" if e is None else f"{100 * e:+.2f}%"


def print_case(case: Case) -> None:
    if case.error:
        print(f"{case.name}: FAILED (exit {case.exit_code}): {case.error.splitlines()[-1:]}")
        return
    worst = max(case.ranks, key=lambda r: abs(r["params_peak"]["error"] or 0))
    node = case.nodes[0]["offload_peak"] if case.nodes else {}
    raw = case.nodes[0]["peak"] if case.nodes else {}
    print(
        f"{case.name:<36} payload {'exact' if case.payload_exact else 'DIFFERS'}"
        f"  params {_pct(worst['params_peak']['error'])}"
        f"  optimizer {_pct(worst['optimizer_peak']['error'])}"
        f"  node {_pct(node.get('error'))} (raw {_pct(raw.get('error'))})"
        f"  {'ok' if case.within_tolerance else 'OUTSIDE: ' + '; '.join(case.outside)}"
        f"  ({case.wall_s} s)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, help="JSON path (default $OUT/ranks_projection.json)")
    parser.add_argument(
        "--cases",
        nargs="+",
        metavar="LAYOUT",
        help="layouts to run: " + ", ".join(x.name for x in LAYOUTS),
    )
    parser.add_argument(
        "--pairs",
        nargs="+",
        metavar="PARAMS+OPTIMIZER",
        help="strategy pairs, e.g. naive+legacy (default: all three)",
    )
    parser.add_argument("--payload", help="per-rank payload, about (cuda 1GiB, cpu 16MiB)")
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="children at a time (1: ranks of one case own the machine)",
    )
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument(
        "--timeout", type=float, help="seconds per child (cuda default 70, cpu 300)"
    )
    parser.add_argument(
        "--deadline-s", type=float, help="start no case after this many seconds (cuda default 280)"
    )
    parser.add_argument(
        "--reproject",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="run nothing: recompute every prediction of committed result FILE(s) (one "
        "machine and versions), keep the measured figures, write one JSON to --out",
    )
    args = parser.parse_args(argv)
    if args.reproject:
        if not args.out:
            parser.error("--reproject needs --out")
        doc = reproject(args.reproject, args.out, args.tolerance)
        within = sum(c["within_tolerance"] for c in doc["cases"])
        print(
            f"{within}/{len(doc['cases'])} cases within {100 * args.tolerance:g}%; "
            f"re-projected with {doc['reprojected']['code']}; wrote {args.out}"
        )
        return 0 if doc["all_within_tolerance"] else 1
    out = args.out or Path(os.environ.get("OUT", ".")) / "ranks_projection.json"
    payload = args.payload or DEFAULT_PAYLOAD[args.device]
    deadline = args.deadline_s or (280.0 if args.device == "cuda" else None)
    args.timeout = args.timeout or (70.0 if args.device == "cuda" else 300.0)
    layouts = [x for x in LAYOUTS if args.device in x.devices]
    if args.cases:
        known = {x.name: x for x in LAYOUTS}
        unknown = [c for c in args.cases if c not in known]
        if unknown:
            parser.error(f"unknown case(s) {unknown}: choose from {', '.join(known)}")
        layouts = [known[c] for c in args.cases]
    pairs = list(PAIRS)
    if args.pairs:
        pairs = [p for p in PAIRS if f"{p[0]}+{p[1]}" in args.pairs]
    if args.jobs != 1:
        parser.error("--jobs: only 1 is supported (a case's ranks share the node cgroup)")
    # pair-major order: when the deadline cuts the run, every layout has had a pair
    jobs = [(layout, pair) for pair in pairs for layout in layouts]
    started = time.perf_counter()
    cases: list[Case] = []
    skipped: list[str] = []
    first: dict[str, Any] | None = None
    for layout, pair in jobs:
        if deadline is not None and time.perf_counter() - started > deadline:
            skipped.append(f"{layout.name} {pair[0]}+{pair[1]}")
            continue
        case, report = run_case(layout, pair, args, payload)
        first = first or report
        cases.append(case)
        print_case(case)
        write(out, args, payload, cases, skipped, first, started)
    doc = write(out, args, payload, cases, skipped, first, started)
    print(
        f"{sum(c.within_tolerance for c in cases)}/{len(cases)} cases within "
        f"{100 * args.tolerance:g}%; skipped {len(skipped)}; versions {doc['versions']}; "
        f"wrote {out}; {doc['wall_s']} s"
    )
    return 0 if doc["all_within_tolerance"] else 1


def _code_version() -> str:
    """The commit the prediction code comes from (``+dirty`` when it differs from it)."""

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--", "offloadprobe", "benchmarks")
    return head + ("+dirty" if dirty else "")


def reproject(files: list[Path], out: Path, tolerance: float) -> dict[str, Any]:
    """Recompute every case's prediction from committed results; the measured figures are
    copied unchanged. Several files of one machine and versions become one document."""
    docs = [json.loads(f.read_text()) for f in files]
    first = docs[0]
    for f, d in zip(files, docs, strict=True):
        for key in ("device", "emulated", "versions", "payload_per_rank", "cycles"):
            if d.get(key) != first.get(key):
                raise SystemExit(f"{f}: {key} differs from {files[0]}'s; cannot combine")
    jobs = [(layout, pair) for pair in PAIRS for layout in LAYOUTS]  # main()'s order
    order = {f"{layout.name} {a}+{b}": i for i, (layout, (a, b, _)) in enumerate(jobs)}
    cases, seen = [], set()
    for d in docs:
        for old in d["cases"]:
            if old["name"] in seen:
                raise SystemExit(f"case {old['name']!r} is in more than one file")
            seen.add(old["name"])
            case = Case(
                **{
                    k: old[k]
                    for k in (
                        "name",
                        "layout",
                        "strategy",
                        "optimizer_strategy",
                        "precision_aware",
                        "model",
                        "exit_code",
                        "wall_s",
                    )
                }
            )
            if old["error"] and not old["ranks"]:
                case.error = old["error"]
            else:
                ranks, nodes = measured_from_rows(old)
                pair = (old["strategy"], old["optimizer_strategy"], old["precision_aware"])
                projection = project_case(
                    ModelConfig(**old["model"]),
                    old["layout"],
                    pair,
                    megatron_core=first["versions"]["megatron_core"],
                    emulated=bool(first["emulated"]),
                    cycles=first["cycles"],
                )
                compare(case, ranks, nodes, projection, tolerance)
            cases.append(case)
    cases.sort(key=lambda c: order.get(c.name, len(order)))
    skipped = sorted({s for d in docs for s in d.get("skipped") or []} - seen)
    errors = [c.max_abs_error for c in cases if c.max_abs_error is not None]
    doc = {
        **{
            k: first.get(k)
            for k in (
                "benchmark",
                "device",
                "emulated",
                "versions",
                "machine",
                "payload_per_rank",
                "cycles",
                "train_steps",
            )
        },
        "tolerance": tolerance,
        "wall_s": sum(d.get("wall_s") or 0 for d in docs),
        "all_within_tolerance": bool(cases)
        and not skipped
        and all(c.within_tolerance for c in cases),
        "max_abs_relative_error": max(errors) if errors else None,
        "cases": [asdict(c) for c in cases],
        "not_run": first.get("not_run"),
        "skipped": skipped,
        "reprojected": {
            "from": [f.name for f in files],
            "code": _code_version(),
            "note": "measured figures copied from the files above unchanged; every "
            "prediction recomputed by offloadprobe.plan.probe_world.project_world (both "
            "parts replayed together: offloadprobe.plan.rank_replay)",
        },
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def write(
    out: Path,
    args: argparse.Namespace,
    payload: str,
    cases: list[Case],
    skipped: list[str],
    first: dict[str, Any] | None,
    started: float,
) -> dict[str, Any]:
    errors = [c.max_abs_error for c in cases if c.max_abs_error is not None]
    doc = {
        "benchmark": "ranks_projection_validation",
        "device": args.device,
        "emulated": first.get("emulated") if first else None,
        "versions": first.get("versions") if first else None,
        "machine": first.get("machine") if first else None,
        "payload_per_rank": payload,
        "cycles": args.cycles,
        "train_steps": 1,
        "tolerance": args.tolerance,
        "wall_s": round(time.perf_counter() - started, 1),
        "all_within_tolerance": bool(cases)
        and not skipped
        and all(c.within_tolerance for c in cases),
        "max_abs_relative_error": max(errors) if errors else None,
        "cases": [asdict(c) for c in cases],
        "not_run": NOT_RUN,
        "skipped": skipped,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


if __name__ == "__main__":
    raise SystemExit(main())
