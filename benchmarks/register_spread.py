"""GPU benchmark (issue 38): why one thread's ``cudaHostRegister`` of 5 GiB takes
0.137-0.197 s depending on the process, and whether ``register_core`` lifts the first
offload, in one call.

Part A, the cause: ``--processes`` fresh processes of ``register_probe.py``, each
registering under every condition (one thing changed from ``base`` at a time: huge
pages, first touch, touch while registering, the registering thread on a core of its
own, chunk size, parallel registering threads, flags, ``cudaMallocHost``), in an order
rotated per process; every other process first compacts memory (root only), so the page
allocator's state varies across processes with everything else held. Read back: which
process-level figures follow the slow processes (Pearson r across processes, of
``base``'s seconds, and of ``concurrent``'s, the pipeline's case), which per-call
figures follow slow calls (r over every 64 MiB call), whether ``base`` and
``base-repeat`` agree within a process (a per-process state) or not (per mapping), and
each condition's seconds over ``base``'s in the same process.

Part B, the fix measured: ``--rounds`` rounds of the bare pipeline, then ``hugepin`` and
``relock`` with and without ``--fix`` (the order of with/without alternating per round),
each a fresh process, every first offload over the same round's pipeline (target 0.95x),
host and held figures as ``first_offload_rounds.py`` judges them.

Rows stop being started when ``--budget-s`` would be passed; the JSON is rewritten after
every row and says what was skipped. ``--dry-run``: CPU plumbing only (``mlock`` for the
registration, strategies in CPU emulation, no pipeline rows); nothing it writes is a
measurement of the driver.

    python benchmarks/register_spread.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import first_offload_rounds as fr  # noqa: E402  (sibling: pipeline and strategy rows)

FIX = "register_core=1"
ESTIMATE_S = {"probe": 30.0, "row": 20.0}
"""Seconds one probe process and one rounds row are expected to take at 5 GiB (the
budget check)."""


def pearson(xs: list[float], ys: list[float]) -> float | None:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
    if len(pairs) < 3:
        return None
    mx, my = statistics.fmean(p[0] for p in pairs), statistics.fmean(p[1] for p in pairs)
    cov = sum((x - mx) * (y - my) for x, y in pairs)
    var = (sum((x - mx) ** 2 for x, _ in pairs) * sum((y - my) ** 2 for _, y in pairs)) ** 0.5
    return round(cov / var, 3) if var else None


def _get(doc: dict[str, Any], *path: str) -> Any:
    for key in path:
        doc = doc.get(key) if isinstance(doc, dict) else None  # type: ignore[assignment]
    return doc


def process_figures(doc: dict[str, Any], index: int) -> dict[str, Any]:
    """One probe process's figures, from its ``base`` condition and its system record."""
    conds, system = doc["conditions"], doc["system"]
    base = conds.get("base", {})
    calls = base.get("calls", {})
    n = doc["bytes"]
    pm = _get(base, "attributes", "pagemap") or {}
    nodes = _get(base, "attributes", "numa")
    cpus = calls.get("cpu_before", [])
    node_of = {}
    for name, spec in (system.get("numa_nodes") or {}).items():
        for part in (spec or "").split(","):
            if part:
                lo, _, hi = part.partition("-")
                node_of.update({c: name[4:] for c in range(int(lo), int(hi or lo) + 1)})
    cpu_node = node_of.get(statistics.mode(cpus)) if cpus else None
    remote = None
    if isinstance(nodes, dict) and cpu_node is not None:
        total = sum(nodes.values())
        remote = round(1 - nodes.get(cpu_node, 0) / total, 4) if total else None
    return {
        "process": index,
        "compacted": int(system.get("compacted_seconds") is not None),
        "base_register_seconds": base.get("in_call_seconds"),
        "repeat_register_seconds": _get(conds, "base-repeat", "in_call_seconds"),
        "concurrent_register_seconds": _get(conds, "concurrent", "in_call_seconds"),
        "concurrent_core_register_seconds": _get(conds, "concurrent-core", "in_call_seconds"),
        "thp_fraction": round(_get(base, "attributes", "anon_huge_bytes") / n, 4)
        if _get(base, "attributes", "anon_huge_bytes") is not None
        else None,
        "whole_2mib_frames_fraction": pm.get("whole_2mib_frames_fraction"),
        "mean_run_mib": pm.get("mean_run_mib"),
        "numa_remote_fraction": remote,
        "call_cpu_fraction": round(sum(calls["cpu_ms"]) / sum(calls["ms"]), 4)
        if calls.get("ms")
        else None,
        "vcsw": sum(calls.get("vcsw", [])) if calls else None,
        "ivcsw": sum(calls.get("ivcsw", [])) if calls else None,
        "cpu_migrations": sum(
            a != b for a, b in zip(cpus, calls.get("cpu_after", []), strict=True)
        ),
        "register_cpu": statistics.mode(cpus) if cpus else None,
        "steal_ms": base.get("steal_ms"),
        "touch_seconds": base.get("touch_seconds"),
        "free_2mib_plus_gib": round(_get(base, "buddy_before", "free_2mib_plus_bytes") / 2**30, 2)
        if _get(base, "buddy_before", "free_2mib_plus_bytes") is not None
        else None,
        "compact_stall": _get(base, "vmstat_delta", "compact_stall") or 0,
        "thp_fault_fallback": _get(base, "vmstat_delta", "thp_fault_fallback") or 0,
        "unregister_seconds": base.get("unregister_seconds"),
        "mallochost_seconds": _get(conds, "mallochost", "register_seconds"),
    }


NOT_CORRELATES = {"process", "base_register_seconds", "repeat_register_seconds", "register_cpu"}


def analyse(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """What follows the slow processes and the slow calls; each condition over ``base``."""
    figures = [process_figures(d, i) for i, d in enumerate(docs)]
    out: dict[str, Any] = {"processes": figures}
    if len(figures) < 2:
        return out
    for target in ("base_register_seconds", "concurrent_register_seconds"):
        ys = [f[target] for f in figures]
        rs = {
            k: pearson([f[k] for f in figures], ys)
            for k in figures[0]
            if k not in NOT_CORRELATES and k != target
        }
        out[f"r_with_{target}"] = dict(sorted(rs.items(), key=lambda kv: -abs(kv[1] or 0)))
    base = [f["base_register_seconds"] for f in figures]
    repeat = [f["repeat_register_seconds"] for f in figures]
    pairs = [(b, r) for b, r in zip(base, repeat, strict=True) if b and r]
    if len(pairs) >= 2:
        out["spread"] = {
            "base_seconds_range": [min(base), max(base)],
            "between_processes_stdev": round(statistics.stdev(b for b, _ in pairs), 5),
            "within_process_mean_abs_diff": round(
                statistics.fmean(abs(b - r) for b, r in pairs), 5
            ),
            "r_base_vs_repeat": pearson([b for b, _ in pairs], [r for _, r in pairs]),
        }
    ms, cpu, ivcsw, runs, index = [], [], [], [], []
    for d in docs:  # every 64 MiB call of the pre-touched base conditions
        for name in ("base", "base-repeat"):
            c = d["conditions"].get(name)
            if not c or "calls" not in c:
                continue
            ms += c["calls"]["ms"]
            cpu += [
                b / a if a else None
                for a, b in zip(c["calls"]["ms"], c["calls"]["cpu_ms"], strict=True)
            ]
            ivcsw += c["calls"]["ivcsw"]
            index += list(range(len(c["calls"]["ms"])))
            chunk_runs = _get(c, "attributes", "pagemap", "runs_per_chunk")
            runs += chunk_runs if chunk_runs else [None] * len(c["calls"]["ms"])
    out["per_call"] = {
        "calls": len(ms),
        "median_ms": statistics.median(ms) if ms else None,
        "r_ms_with_cpu_fraction": pearson(cpu, ms) if ms else None,
        "r_ms_with_ivcsw": pearson(ivcsw, ms) if ms else None,
        "r_ms_with_physical_runs": pearson(runs, ms) if ms else None,
        "r_ms_with_call_index": pearson(index, ms) if ms else None,
        "median_cpu_fraction": statistics.median(c for c in cpu if c is not None) if cpu else None,
    }
    effects = {}
    for name in docs[0]["conditions"]:
        found: dict[str, Any] = {}
        for key in ("register_seconds", "in_call_seconds"):  # wall; inside the calls
            ratios = [
                d["conditions"][name][key] / d["conditions"]["base"][key]
                for d in docs
                if _get(d, "conditions", name, key) and _get(d, "conditions", "base", key)
            ]
            if ratios:
                found[key] = {
                    "median_over_base": round(statistics.median(ratios), 3),
                    "range": [round(min(ratios), 3), round(max(ratios), 3)],
                    "processes": len(ratios),
                }
        if found:
            effects[name] = found
    out["conditions_over_base"] = effects
    out["findings"] = findings(out)
    return out


def findings(a: dict[str, Any]) -> list[str]:
    """Sentences from the figures only (|r| >= 0.6 named as following; n said)."""
    lines = []
    n = len(a["processes"])
    for target in ("base_register_seconds", "concurrent_register_seconds"):
        hits = [
            f"{k} (r={r:+.2f})"
            for k, r in a.get(f"r_with_{target}", {}).items()
            if r is not None and abs(r) >= 0.6
        ]
        lines.append(
            f"{target} over {n} processes follows: " + (", ".join(hits) or "nothing at |r| >= 0.6")
        )
    s = a.get("spread")
    if s:
        kind = (
            "a per-process state"
            if (s["r_base_vs_repeat"] or 0) >= 0.6
            else "not a per-process state"
        )
        lines.append(
            f"base vs base-repeat in one process: r={s['r_base_vs_repeat']}, within "
            f"{s['within_process_mean_abs_diff']:.4f} s against "
            f"{s['between_processes_stdev']:.4f} s between processes: {kind}"
        )
    c = a.get("per_call", {})
    if c.get("calls"):
        lines.append(
            f"{c['calls']} calls of 64 MiB: thread on CPU {c['median_cpu_fraction']:.2f} of "
            f"each call (median); ms follows cpu fraction r={c['r_ms_with_cpu_fraction']}, "
            f"involuntary switches r={c['r_ms_with_ivcsw']}, "
            f"physical runs r={c['r_ms_with_physical_runs']}"
        )
    for name, both in a.get("conditions_over_base", {}).items():
        wall, inside = both.get("register_seconds"), both.get("in_call_seconds")
        e = inside or wall  # mallochost: its wall only
        if name != "base" and e and abs(e["median_over_base"] - 1) >= 0.05:
            said = f"in calls {inside['median_over_base']:.2f}x" if inside else ""
            said += f", wall {wall['median_over_base']:.2f}x" if wall else ""
            lines.append(
                f"{name}: {said.strip(', ')} base's (range {e['range'][0]}-{e['range'][1]})"
            )
    fixed = [
        f["concurrent_core_register_seconds"] / f["concurrent_register_seconds"]
        for f in a["processes"]
        if f["concurrent_core_register_seconds"] and f["concurrent_register_seconds"]
    ]
    if fixed:
        lines.append(
            f"register_core while touching: {statistics.median(fixed):.2f}x the seconds in "
            f"cudaHostRegister without it (median of {len(fixed)} processes, "
            f"{min(fixed):.2f}-{max(fixed):.2f})"
        )
    return lines


def judge(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for number, rows in enumerate(rounds, 1):
        base = next(
            (r for r in rows if r.get("item") == "pipeline" and r.get("first_offload_gbps")), None
        )
        for r in rows:
            name = str(r.get("item", "")).partition(":")[0]
            if name not in fr.TARGETS:
                continue
            want, first = fr.TARGETS[name], r.get("first_offload_gbps")
            ratio = first / base["first_offload_gbps"] if first and base else None
            checks = {"ratio": (ratio, ">=", want["ratio"])}
            for key in ("host_peak_x", "steady_offload_gbps", "held_while_training_x"):
                if key in want:
                    checks[key] = (r.get(key), ">=" if key.endswith("gbps") else "<=", want[key])
            met = {
                k: None if v is None else (v >= lim if op == ">=" else v <= lim)
                for k, (v, op, lim) in checks.items()
            }
            out.append(
                {
                    "round": number,
                    "item": r["item"],
                    "fix": ":" in r["item"],
                    "first_offload_gbps": first,
                    "pipeline_first_gbps": base and base["first_offload_gbps"],
                    "ratio": ratio and round(ratio, 3),
                    "register_seconds": _stage_register(r),
                    "notes": _get(r, "stages", "notes"),
                    "checks": {
                        k: {
                            "measured": checks[k][0],
                            "target": f"{checks[k][1]} {checks[k][2]}",
                            "met": met[k],
                        }
                        for k in checks
                    },
                    "all_met": all(met.values()),
                }
            )
    return out


def _stage_register(row: dict[str, Any]) -> float | None:
    stages = _get(row, "stages", "stages")
    return stages[0].get("register_seconds") if stages else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=HERE / "results")
    p.add_argument("--machine", default="h200")
    p.add_argument("--name", default="register-spread")
    p.add_argument("--bytes", default="5GiB")
    p.add_argument("--processes", type=int, default=6)
    p.add_argument("--conditions", default=None, help="register_probe's, comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fix", default=FIX, help="strategy options of the fix, '+'-joined")
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--warm", default="24GiB", help="'0' to skip the VM's first touch")
    p.add_argument("--budget-s", type=float, default=450.0)
    p.add_argument("--dry-run", action="store_true", help="CPU plumbing only")
    p.add_argument("--commit", default=None)
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # children and tmp files go
    begin = time.perf_counter()
    day = dt.date.today().isoformat()
    path = a.out.resolve() / f"{'cpu-dry-run' if a.dry_run else a.machine}-{day}-{a.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "benchmark": "register_spread",
        "date": day,
        "command": " ".join(sys.argv),
        "commit": a.commit,
        "bytes": a.bytes,
        "dry_run": a.dry_run,
        "fix": a.fix,
        "skipped": [],
        "errors": [],
    }
    scale = 0.2 if a.dry_run else 1.0

    def room(kind: str) -> bool:
        return time.perf_counter() - begin + ESTIMATE_S[kind] * scale <= a.budget_s

    def save() -> None:
        doc["wall_seconds"] = round(time.perf_counter() - begin, 1)
        path.write_text(json.dumps(doc) + "\n")  # one line: the per-call lists are long

    if a.warm != "0" and not a.dry_run:
        doc["vm_first_touch"] = fr.warm_vm(a.warm, 16)
        print("vm first touch", doc["vm_first_touch"].get("gbps"), "GB/s", flush=True)
    probes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.processes):
            if not room("probe"):
                doc["skipped"].append(f"probe {i}: budget")
                continue
            out = Path(tmp) / f"probe-{i}.json"
            cmd = [
                sys.executable,
                "-W",
                "ignore",
                str(HERE / "register_probe.py"),
                "--bytes",
                a.bytes,
                "--shift",
                str(i),
                "--json",
                str(out),
            ]
            cmd += ["--compact"] if i % 2 else []
            cmd += ["--dry-run", "--threads", "2"] if a.dry_run else []
            cmd += ["--conditions", a.conditions] if a.conditions else []
            print("+", " ".join(cmd), flush=True)
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
            if proc.returncode or not out.exists():
                doc["errors"].append(
                    {
                        "probe": i,
                        "exit_code": proc.returncode,
                        "tail": (proc.stderr or proc.stdout)[-800:],
                    }
                )
                print("probe", i, "failed:", (proc.stderr or proc.stdout)[-300:], flush=True)
                continue
            probes.append(json.loads(out.read_text()))
            f = process_figures(probes[-1], i)
            print(
                f"probe {i} compacted={f['compacted']} base {f['base_register_seconds']} s repeat "
                f"{f['repeat_register_seconds']} concurrent {f['concurrent_register_seconds']} "
                f"core {f['concurrent_core_register_seconds']} thp {f['thp_fraction']} "
                f"runs {f['mean_run_mib']} MiB cpu {f['call_cpu_fraction']} ivcsw {f['ivcsw']}",
                flush=True,
            )
            doc["probes"] = probes
            save()
        doc["analysis"] = analyse(probes) if probes else {}
        save()
        items = ["pipeline", "hugepin", f"hugepin:{a.fix}", "relock", f"relock:{a.fix}"]
        ns = argparse.Namespace(cycles=a.cycles, device="cpu" if a.dry_run else "cuda")
        size = "8MiB" if a.dry_run else a.bytes
        rounds: list[list[dict[str, Any]]] = []
        for number in range(a.rounds):
            head, rest = items[:1], items[1:]
            if number % 2:  # the fix first in every other round
                rest = [rest[1], rest[0], rest[3], rest[2]]
            rows = []
            for item in head + rest:
                if not room("row"):
                    doc["skipped"].append(f"round {number + 1} {item}: budget")
                    continue
                if item == "pipeline" and a.dry_run:
                    doc["skipped"].append(f"round {number + 1} pipeline: no CUDA in a dry run")
                    continue
                sub = Path(tmp) / f"row-{number}-{len(rows)}"  # no stale file is read
                sub.mkdir()
                if item == "pipeline":
                    row = fr.run_pipeline(size, sub, item, [])
                else:
                    row = fr.run_strategy(item, size, ns, sub)
                row["item"], row["round"] = item, number + 1
                if "error" in row or row.get("exit_code"):
                    doc["errors"].append(
                        {"round": number + 1, "item": item, "tail": str(row.get("error"))[-800:]}
                    )
                rows.append(row)
                print(
                    f"round {number + 1} {item:24} first {row.get('first_offload_gbps')} "
                    f"register-s {_stage_register(row) or row.get('register_thread_seconds')}",
                    flush=True,
                )
                doc["rounds"] = [*rounds, rows]
                save()
            rounds.append(rows)
    doc["rounds"] = rounds
    doc["judged"] = judge(rounds)
    save()
    print("--- findings")
    for line in doc["analysis"].get("findings", []):
        print(line)
    print("--- rounds (first offload over the same round's pipeline)")
    for j in doc["judged"]:
        print(
            f"round {j['round']} {j['item']:24} {j['first_offload_gbps'] or 0:6.2f} GB/s "
            f"x{j['ratio']} {'met' if j['all_met'] else 'NOT met'}"
        )
    for fix in (False, True):
        rows = [j for j in doc["judged"] if j["fix"] == fix]
        if rows:
            print(
                f"{'with' if fix else 'without'} {a.fix}: all targets met in "
                f"{sum(j['all_met'] for j in rows)} of {len(rows)} rows"
            )
    print("skipped:", doc["skipped"] or "none", "| errors:", len(doc["errors"]))
    print("wrote", path, f"in {doc['wall_seconds']} s")
    unmet = not a.dry_run and not all(j["all_met"] for j in doc["judged"])
    sys.exit(1 if doc["errors"] or unmet or (not doc["judged"] and not a.dry_run) else 0)


if __name__ == "__main__":
    main()
