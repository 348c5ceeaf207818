"""A strategy's worker thread cannot move CPU emulation's host figures.

GIVEN an honest user strategy that copies ``param_data`` into a fresh exact-size host
buffer on a ``threading.Thread`` while the main thread frees ``grad_data`` (the thread's
page faults fall inside the free),
WHEN ``offloadprobe run`` measures it in CPU emulation (in this process, through the
CLI's entry point, two cycles of a 16 MiB model),
THEN its steady host figure and host peak are 1x of the bytes it moved, within 10%: the
emulated device's ballast follows the device storages' own pages, never process-wide RSS,
which the thread's faults move (sized from RSS, four runs of this test read -0.43x,
0.15x, 0.40x and 0.62x).
"""

from __future__ import annotations

import json

from offloadprobe.cli import main

SPEC = "tests.integration.threaded_strategies:CopiesOnAThread"
MODEL = ["--layers", "1", "--payload", "16MiB", "--seq-length", "32", "--micro-batch", "1"]
RUN = ["run", "--device", "cpu", "--no-progress", "--cycles", "2", "--no-reference-check"]


def test_a_copy_on_a_worker_thread_reads_one_payload_on_the_host(tmp_path, capsys):
    out = tmp_path / "run.json"
    try:
        main([*RUN, "--train-steps", "0", "--strategy", SPEC, "--json", str(out), *MODEL])
        code = 0
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    assert code == 0, capsys.readouterr().err
    run = json.loads(out.read_text())["runs"][0]
    offloads = [p for c in run["cycles"] for p in c["phases"] if p["phase"] == "offload"]
    moved = offloads[-1]["bytes_moved"]
    assert moved == run["payload_bytes"]  # every param_data byte really left the device
    summary = run["summary"]
    steady, peak = summary["steady_host_bytes"] / moved, summary["host_peak_bytes"] / moved
    assert 0.9 <= steady <= 1.1, steady
    assert 0.9 <= peak <= 1.1, peak
