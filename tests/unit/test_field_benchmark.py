"""benchmarks/field_strategies.py: its rows name compare's candidates and read the records."""

import importlib.util
import sys
from pathlib import Path

from offloadprobe.compare.comparison import candidates

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "field_strategies.py"
spec = importlib.util.spec_from_file_location("field_strategies", BENCH)
bench = importlib.util.module_from_spec(spec)
sys.modules["field_strategies"] = bench  # dataclasses look their module up
spec.loader.exec_module(bench)


def _labels(items):
    return {c.label for c in items}


def test_every_row_label_is_a_compare_candidate():
    plan = bench.jobs("5GiB", "1GiB", "cuda", set(bench.PINNED_KEYS_FOR_TESTS))
    (params,) = plan["params"]
    assert set(params.labels) == _labels(candidates(list(bench.PARAM_ROWS.values()), [], []))
    opt = plan["optimizer"][0]
    want = candidates(["registered"], list(bench.OPTIMIZER_ROWS.values()), [])
    assert set(opt.labels) == _labels(want)
    for job in plan["alloc"]:
        conf = job.args[job.args.index("--alloc-conf") + 1]
        assert set(job.labels) == _labels(candidates(bench.ALLOC_STRATEGIES, [], [conf]))


def test_settings_torch_lacks_are_skipped():
    plan = bench.jobs("5GiB", "1GiB", "cuda", {"pinned_use_background_threads"})
    confs = [j.args[j.args.index("--alloc-conf") + 1] for j in plan["alloc"]]
    assert confs == ["pinned_use_background_threads:True"]


def test_row_reads_driver_release_and_host_after_load():
    gib = 2**30

    def phase(name, used, rss):
        return {"phase": name, "host": {"rss_after": rss}, "gpu": {"device_used_after": used}}

    run = {
        "strategy": "tms",
        "payload_bytes": 5 * gib,
        "baseline_host_bytes": gib,
        "summary": {"host_peak_x": 1.0, "first_offload_gbps": 3.0},
        "cycles": [
            {
                "phases": [
                    phase("train", 9 * gib, gib),
                    phase("offload", 4 * gib, 6 * gib),
                    phase("load", 9 * gib, gib + 1),
                ]
            }
        ],
    }
    r = bench.row("torch_memory_saver", run)
    assert r["gpu_released_by_driver_bytes"] == 5 * gib
    assert r["host_after_load_bytes"] == 1
    assert r["first_offload_gbps"] == 3.0 and r["row"] == "torch_memory_saver"
