"""Counts for the OpInfo conformance sweep.

    python -m tests.support.opinfo_report                  # full sweep, prints counts, writes tests/support/OPINFO.md
    python -m tests.support.opinfo_report --ops 'nn.functional.*' --dtypes float32 --no-markdown
    python -m tests.support.opinfo_report --write-expectations   # regenerate tests/support/opinfo_expectations.toml

Each case (op, dtype) runs in a worker subprocess (``--jobs`` of them, two by
default); a worker that dies or hangs is replaced and its case counted as a
crash. ``--write-expectations`` keeps the category and reason of every entry
that still describes what happens, adds new entries for new outcomes (raises
the CPU shares are filed as ``cpu-kernel-raises-same-error``; anything else as
``hybrid-bug`` with the observed detail, to be reviewed by hand) and drops
entries that no longer fail.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import fnmatch
import json
import os
import platform
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULT = "@@opinfo-result "
CASE_TIMEOUT_S = 180


# --------------------------------------------------------------------------
# Worker side


def _worker() -> None:
    sys.path.insert(0, str(HERE))
    import faulthandler

    import opinfo_harness as h

    h.setup_process()
    out = sys.stdout
    sys.stdout = sys.stderr  # stray prints of ops must not reach the result stream
    out.write(RESULT + json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        name, dtype = json.loads(line)
        faulthandler.dump_traceback_later(CASE_TIMEOUT_S, exit=True)
        t0 = time.perf_counter()
        held = h.slot_bytes()
        try:
            with h.unpriced_records():
                outcomes = [dataclasses.asdict(o) for o in h.run_case(name, dtype)]
            error = None
        except Exception as e:  # noqa: BLE001  (sample generation itself failed)
            outcomes, error = [], f"{type(e).__name__}: {e}"
        finally:
            faulthandler.cancel_dump_traceback_later()
        leaked = h.leaked_since(held)
        if leaked and error is None:
            error = f"hybrid:0 holds {leaked} more bytes after the case than before"
        out.write(RESULT + json.dumps({"case": [name, dtype], "outcomes": outcomes,
                                       "error": error,
                                       "seconds": time.perf_counter() - t0}) + "\n")
        out.flush()


# --------------------------------------------------------------------------
# Parent side


class _Worker:
    def __init__(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.opinfo_report", "--worker"], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            bufsize=1)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self._read(timeout=120)  # ready

    def _pump(self):
        for line in self.proc.stdout:
            if line.startswith(RESULT):
                self.lines.put(json.loads(line[len(RESULT):]))
        self.lines.put(None)  # EOF: the worker died

    def _read(self, timeout):
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def run(self, case):
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        return self._read(timeout=CASE_TIMEOUT_S + 30)

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def sweep(case_list, jobs: int, progress: bool = True) -> dict:
    todo: queue.Queue = queue.Queue()
    for c in case_list:
        todo.put(c)
    results: dict = {}
    lock = threading.Lock()

    def drive():
        worker = _Worker()
        while True:
            try:
                case = todo.get_nowait()
            except queue.Empty:
                break
            r = worker.run(list(case))
            if r is None or "case" not in r:
                code = worker.proc.poll()
                if code is None:
                    worker.proc.kill()
                worker.close()
                r = {"case": list(case), "outcomes": [{"key": "all", "outcome": "crash",
                     "detail": f"worker died or hung (exit {worker.proc.returncode})"}],
                     "error": None, "seconds": None}
                worker = _Worker()
            with lock:
                results[tuple(case)] = r
                if progress:
                    n = len(results)
                    bad = sum(o["outcome"] in ("mismatch", "raise", "crash") for o in r["outcomes"])
                    print(f"[{n}/{len(case_list)}] {case[0]} {case[1]}: "
                          f"{len(r['outcomes'])} samples" + (f", {bad} failing" if bad else "")
                          + (f", error {r['error']}" if r["error"] else ""), flush=True)
        worker.close()

    threads = [threading.Thread(target=drive) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def tally(results: dict, expectations: dict) -> dict:
    import opinfo_harness as h

    counts = {"cases": len(results), "ops": len({c[0] for c in results}), "samples": 0,
              "agree": 0, "raise_same": 0, "mismatch": 0, "raise": 0, "crash": 0,
              "nondeterministic": 0, "case_errors": 0, "by_dtype": {}, "by_variant": {},
              "by_category": {}}
    det_total = det_agree = 0
    for case, r in results.items():
        if r.get("error"):
            counts["case_errors"] += 1
        exp = expectations.get(tuple(case), [])
        for o in r["outcomes"]:
            counts["samples"] += 1
            kind = o["outcome"].replace("-", "_")
            counts[kind] += 1
            d = counts["by_dtype"].setdefault(case[1], {"samples": 0, "agreeing": 0})
            v = counts["by_variant"].setdefault(
                o["key"].split(":")[1] if ":" in o["key"] else "op", {"samples": 0, "agreeing": 0})
            agreeing = o["outcome"] in h.AGREEING
            for bucket in (d, v):
                bucket["samples"] += 1
                bucket["agreeing"] += agreeing
            if o["outcome"] != "agree":
                e = h.expectation_for(o["key"], exp)
                cat = e.category if e is not None else "not in the expectations file"
                bucket = counts["by_category"].setdefault(cat, {})
                bucket[o["outcome"]] = bucket.get(o["outcome"], 0) + 1
            if h.is_deterministic(o["key"], exp):
                det_total += 1
                det_agree += agreeing
            else:
                counts["nondeterministic"] += 1
    counts["deterministic"] = det_total
    counts["deterministic_agreeing"] = det_agree
    counts["percent_agreeing"] = 100.0 * det_agree / det_total if det_total else 0.0
    return counts


def check(results: dict, expectations: dict) -> list[str]:
    import opinfo_harness as h

    problems = []
    for case, r in sorted(results.items()):
        outcomes = [h.Outcome(**o) for o in r["outcomes"]]
        for p in h.check_against(outcomes, expectations.get(tuple(case), [])):
            problems.append(f"{case[0]} {case[1]}: {p}")
    return problems


def _toml_str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def write_expectations(results: dict, old: dict, path: Path) -> int:
    import opinfo_harness as h

    rows = []  # (op, dtype, samples, category, outcome, reason)
    for case in sorted(results):
        r = results[case]
        prior = {e.sample: e for e in old.get(tuple(case), [])}
        nondet = [e for e in prior.values() if e.category == "nondeterministic"]
        if nondet:  # kept as written: nondeterminism is judged by hand
            for e in nondet:
                rows.append((case[0], case[1], e.sample, e.category, e.outcome, e.reason))
            continue
        failing = [o for o in r["outcomes"] if o["outcome"] != "agree"]
        groups: dict = {}
        for o in failing:
            e = prior.get(o["key"]) or prior.get("all")
            if e is None and o["outcome"] != "raise-same":
                # A sample renumbered or newly failing the way others of the
                # case already do: most likely the same cause (review anyway).
                e = next((p for p in prior.values() if p.outcome == o["outcome"]
                          and p.category != "cpu-kernel-raises-same-error"), None)
            if e is not None and e.outcome in ("any", o["outcome"]):
                cat, outcome, reason = e.category, e.outcome, e.reason
            elif o["outcome"] == "raise-same":
                cat, outcome, reason = "cpu-kernel-raises-same-error", "raise-same", o["detail"]
            else:
                cat, outcome, reason = "hybrid-bug", o["outcome"], o["detail"]
            groups.setdefault((cat, outcome, reason), []).append(o["key"])
        for (cat, outcome, reason), keys in groups.items():
            every = len(groups) == 1 and len(keys) == len(r["outcomes"]) and len(keys) > 1
            rows.append((case[0], case[1], "all" if every else keys, cat, outcome, reason))
    lines = [
        "# Expected outcomes of the OpInfo conformance sweep other than `agree`",
        "# (tests/conformance/test_opinfo_conformance.py checks them exactly; regenerate with",
        "# `python -m tests.support.opinfo_report --write-expectations`, then review the",
        "# categories and reasons of new entries by hand).",
        "#",
        "# samples: sample indices (\"3\"; \"3:inplace\", \"3:out\", \"3:noncontig\" for",
        "#   those variants) or \"all\" (every sample of the case).",
        "# category: cpu-kernel-raises-same-error (the CPU raises too and the slot raises",
        "#     the same type: counts as agreeing),",
        "#   nondeterministic (not compared; left out of the deterministic count),",
        "#   backend-difference (a difference from the CPU that is not the backend's",
        "#     defect, reason given),",
        "#   hybrid-bug (a known defect of the backend, described).",
        "# outcome: raise-same | mismatch | raise | any.",
        "",
        "expect = [",
    ]
    for op, dtype, samples, cat, outcome, reason in rows:
        s = _toml_str(samples) if isinstance(samples, str) else (
            "[" + ", ".join(_toml_str(k) for k in samples) + "]")
        lines.append(f"  {{ op = {_toml_str(op)}, dtype = {_toml_str(dtype)}, samples = {s}, "
                     f"category = {_toml_str(cat)}, outcome = {_toml_str(outcome)}, "
                     f"reason = {_toml_str(reason)} }},")
    lines += ["]", ""]
    path.write_text("\n".join(lines))
    assert h.load_expectations(path) is not None  # parses
    return len(rows)


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_markdown(path: Path, counts: dict, command: str, seconds: float, jobs: int,
                   load: float) -> None:
    import torch

    c = counts
    lines = [
        "# OpInfo conformance: counts",
        "",
        "PyTorch's OpInfo database (`op_db`) run on emulated slot `hybrid:0` and compared",
        "with the CPU (tests/support/opinfo_harness.py describes the method). Regenerate with:",
        "",
        "```",
        command,
        "```",
        "",
        "The suite itself (one test per op and dtype, outcomes checked against",
        "tests/support/opinfo_expectations.toml): `pytest -n 2 tests/conformance/test_opinfo_conformance.py`.",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        (f"- machine: {_cpu_name()}, {os.cpu_count()} CPUs, {platform.system()} "
         f"{platform.release()}; Python {platform.python_version()}; torch {torch.__version__}"),
        (f"- wall time: {seconds:.0f} s with {jobs} worker processes, 1 intra-op thread each "
         f"(1-minute load average {load:.1f} when it started)"),
        "",
        "| figure | count |",
        "|---|---:|",
        f"| ops (OpInfo entries incl. variants) | {c['ops']} |",
        f"| cases (op, dtype) | {c['cases']} |",
        f"| samples run (all variants, see below) | {c['samples']} |",
        f"| agreeing | {c['agree'] + c['raise_same']} |",
        f"| &nbsp;&nbsp;of which the CPU raises and the slot raises alike | {c['raise_same']} |",
        f"| mismatching | {c['mismatch']} |",
        f"| raising (the slot only) | {c['raise']} |",
        f"| crashing the interpreter | {c['crash']} |",
        f"| cases whose samples could not be made | {c['case_errors']} |",
        f"| nondeterministic (not compared) | {c['nondeterministic']} |",
        (f"| **agreeing, % of deterministic samples** | **{c['percent_agreeing']:.2f} %** "
         f"({c['deterministic_agreeing']} / {c['deterministic']}) |"),
        "",
        "| dtype | samples | agreeing |",
        "|---|---:|---:|",
    ]
    for d, v in c["by_dtype"].items():
        lines.append(f"| {d} | {v['samples']} | {v['agreeing']} |")
    lines += ["", "| variant | samples | agreeing |", "|---|---:|---:|"]
    for d, v in c["by_variant"].items():
        lines.append(f"| {d} | {v['samples']} | {v['agreeing']} |")
    lines += ["", "Outcomes other than plain agreement, by their category in",
              "tests/support/opinfo_expectations.toml (which gives each one's reason):", "",
              "| category | outcome | samples |", "|---|---|---:|"]
    for cat, outcomes in sorted(c["by_category"].items()):
        for outcome, n in sorted(outcomes.items()):
            lines.append(f"| {cat} | {outcome} | {n} |")
    lines.append("")
    path.write_text("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--ops", default="*", help="fnmatch pattern(s) over op names, comma-separated")
    p.add_argument("--dtypes", default="float32,bfloat16,int64")
    p.add_argument("--write-expectations", action="store_true")
    p.add_argument("--no-markdown", action="store_true")
    p.add_argument("--json", type=Path, help="also write the raw outcomes here")
    p.add_argument("--results", type=Path,
                   help="use the raw outcomes a --json run wrote instead of sweeping again")
    p.add_argument("--show", action="store_true", help="print every unexpected outcome")
    args = p.parse_args(argv)
    if args.worker:
        _worker()
        return 0

    sys.path.insert(0, str(HERE))
    import opinfo_harness as h

    patterns = args.ops.split(",")
    dtypes = args.dtypes.split(",")
    case_list = [c for c in h.cases()
                 if c[1] in dtypes and any(fnmatch.fnmatchcase(c[0], pat) for pat in patterns)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    if args.results:
        saved = json.loads(args.results.read_text())
        results = {tuple(k.split("|")): v for k, v in saved.items()}
        results = {c: results[c] for c in case_list if c in results}
    else:
        results = sweep(case_list, args.jobs)
    seconds = time.perf_counter() - t0
    expectations = h.load_expectations()
    if args.json:
        args.json.write_text(json.dumps({f"{k[0]}|{k[1]}": v for k, v in results.items()},
                                        indent=1))
    if args.write_expectations:
        n = write_expectations(results, expectations, h.EXPECTATIONS)
        print(f"wrote {n} expectations to {h.EXPECTATIONS}")
        expectations = h.load_expectations()
    counts = tally(results, expectations)
    problems = check(results, expectations)
    print()
    print(f"ops {counts['ops']}  cases {counts['cases']}  samples {counts['samples']}")
    print(f"agreeing {counts['agree'] + counts['raise_same']} "
          f"(of which raise-same {counts['raise_same']})  mismatching {counts['mismatch']}  "
          f"raising {counts['raise']}  crashing {counts['crash']}  "
          f"nondeterministic {counts['nondeterministic']}")
    print(f"case errors {counts['case_errors']}")
    print(f"agreeing: {counts['percent_agreeing']:.2f} % of {counts['deterministic']} "
          f"deterministic samples   ({seconds:.0f} s)")
    print(f"differences from the expectations file: {len(problems)}")
    if args.show:
        for line in problems:
            print("  " + line)
    if counts["case_errors"]:
        for case, r in sorted(results.items()):
            if r.get("error"):
                print(f"  case error: {case[0]} {case[1]}: {r['error']}")
    if args.results and not args.no_markdown:
        print("not writing tests/support/OPINFO.md from saved results (it records the sweep's time)")
    elif not args.no_markdown:
        command = "python -m tests.support.opinfo_report"  # plus what changes the figures
        for flag, value, default in (("--ops", args.ops, "*"),
                                     ("--dtypes", args.dtypes, "float32,bfloat16,int64"),
                                     ("--jobs", str(args.jobs), "2")):
            if value != default:
                command += f" {flag} '{value}'"
        out = HERE / "OPINFO.md"
        write_markdown(out, counts, command, seconds, args.jobs, load)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
