"""Costs that do not grow with counts (issue 17, section 2): what is described in a few numbers is priced in a few
steps, whatever the numbers.

Each case runs in a fresh child process with a time limit (before the fix some never returned): the child
imports what it needs and warms the profile cache on a small case first (another rack, so the call prices
its collectives anew), then times the one call (wall and CPU) and reads how far it raised the process's peak
resident memory (``VmHWM`` after the call minus ``VmRSS`` before it). Targets: <= 2 s and <= 200 MB each.
Results are modelled; tests/planner/test_scale.py checks them
against the step-by-step computation on sizes where that one finishes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks.harness import Section, median, spread, write_section

COMMAND = "python -m benchmarks counts"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIMIT_S = 600.0
TARGET_S = 2.0
TARGET_MB = 200.0

_PROBE = """
import json, sys, time
def _kb(field):
    with open('/proc/self/status') as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ':'))
{setup}
before = _kb('VmRSS')
cpu = time.process_time()
start = time.perf_counter()
result = {call}
took = time.perf_counter() - start
cpu = time.process_time() - cpu
print(json.dumps({{'seconds': took, 'cpu': cpu, 'mb': (_kb('VmHWM') - before) / 1024, 'result': {show}}}))
"""

_SMALL = ("from transformers import LlamaConfig\nfrom planner.decoder_blocks import DecoderBlocks\n"
          "small = DecoderBlocks(LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1024, "
          "num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False), "
          "name='scale-llama')\n")

CASES = {
    "`whatif`, global batch 10^8 (tp 2 x pp 2 on h100-node*2; was 11.8 s, 2.8 GB)": (
        _SMALL + "import planner\nkw = dict(parallel={'tp': 2, 'pp': 2}, seq_len=512)\n"
                 "planner.whatif(small, 'h100-node', global_batch=4096, **kw)",
        "planner.whatif(small, 'h100-node*2', global_batch=10**8, **kw)",
        "f'{result.seconds:,.1f} s/step, {result.parallel[\"microbatches\"]:,} microbatches'"),
    "`whatif`, global batch 10^12 (was: never returned)": (
        _SMALL + "import planner\nkw = dict(parallel={'tp': 2, 'pp': 2}, seq_len=512)\n"
                 "planner.whatif(small, 'h100-node', global_batch=4096, **kw)",
        "planner.whatif(small, 'h100-node*2', global_batch=10**12, **kw)",
        "f'{result.seconds:,.0f} s/step'"),
    "topology of `h100:80000000` (10^7 domains; was 1.3 s)": (
        "import collectives, devices\nspec = devices.parse_rack('h100:80000000')",
        "collectives.topology(spec)", "f'{len(result):,} slots, {len(result.domains)} domain run(s)'"),
    "topology of `h100:1000000000000` and an all_reduce over all of it (was: hung)": (
        "import collectives, devices\nspec = devices.parse_rack('h100:1000000000000')",
        "collectives.estimate(collectives.topology(spec), 'all_reduce', 1 << 30)",
        "f'{result.seconds * 1e3:.1f} ms, {result.algorithm}'"),
    "first all_reduce 1 GiB on `trn3:1048608` (topology built; was 65-110 ms)": (
        "import collectives, devices\nspec = devices.parse_rack('trn3:1048608')\n"
        "collectives.estimate('h100-node', 'all_reduce', 1 << 20)",
        "collectives.estimate(spec, 'all_reduce', 1 << 30)", "f'{result.seconds * 1e3:.2f} ms, {result.algorithm}'"),
    "a data-parallel group of 10^7 ranks (stride 8 on `h100:80000000`; was 51-72 s)": (
        "import collectives, devices\ntopo = collectives.topology(devices.parse_rack('h100:80000000'))",
        "collectives.estimate(topo, 'all_reduce', 1 << 30, slots=range(0, 8 * 10**7, 8))",
        "f'{result.seconds * 1e3:.1f} ms, {result.participants:,} ranks, {result.path}'"),
    "plan search (`planner.plan_search`) on `h100:10000000` (the search of `interop.plan`; was over 90 s)": (
        _SMALL + "import devices\nfrom planner.plan_search import Problem, search\n"
                 "spec = devices.parse_rack('h100:10000000')\n"
                 "search(Problem(small, devices.parse_rack('h100-node'), range(8), 64, 512, ))",
        "search(Problem(small, spec, range(len(spec)), 1024, 512, ))",
        "f'{result[1].seconds * 1e3:.1f} ms/step on {result[1].chips:,} chips'"),
    "plan search on `h100-node`, global batch 10^9 (was over 90 s)": (
        _SMALL + "import devices\nfrom planner.plan_search import Problem, search\n"
                 "spec = devices.parse_rack('h100-node')\n"
                 "search(Problem(small, spec, range(len(spec)), 64, 512, ))",
        "search(Problem(small, spec, range(len(spec)), 10**9, 512, ))",
        "f'{result[1].seconds:,.0f} s/step, {result[0].microbatches:,} microbatches'"),
}


def _probe(setup: str, call: str, show: str, env: dict) -> dict:
    code = _PROBE.format(setup=setup, call=call, show=show)
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                             timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {LIMIT_S:.0f} s"}
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or [str(out.returncode)])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(repeats: int = 3, write: bool = True) -> Section:
    section = Section("counts", "costs that do not grow with counts (time and memory measured; results modelled)",
                      COMMAND)
    env = dict(os.environ, PYTHONPATH=ROOT)
    for name, (setup, call, show) in CASES.items():
        _probe(setup, call, show, env)  # a first process traces any new block shape into the disk profile cache
        runs = [_probe(setup, call, show, env) for _ in range(repeats)]
        failed = next((r["error"] for r in runs if "error" in r), None)
        if failed:
            section.add(name, "n/a", f"<= {TARGET_S:.0f} s, <= {TARGET_MB:.0f} MB", False, failed)
            continue
        seconds, mb, cpu = [r["seconds"] for r in runs], [r["mb"] for r in runs], [r["cpu"] for r in runs]
        ok = median(cpu) <= TARGET_S and max(mb) <= TARGET_MB
        section.add(name, f"{median(cpu):.3f} s CPU, {max(mb):.0f} MB", f"<= {TARGET_S:.0f} s, <= {TARGET_MB:.0f} MB",
                    ok, f"median of {repeats} fresh processes (CPU {spread(cpu)} s; wall {spread(seconds)} s), peak "
                    f"RSS growth the largest; result (modelled): {runs[0]['result']}")
    section.notes.append("Each case is one call in a fresh process after a small warm-up call (imports), with "
                         "its block profiles on disk (a first, unmeasured process traced them); the memory is the "
                         "call's raise of the process's peak RSS. The verdict reads the call's CPU time (user + "
                         "system): on a shared machine its wall time moves with the load (both are in the detail).")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
