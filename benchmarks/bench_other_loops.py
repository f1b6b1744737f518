"""``python -m benchmarks other_loops``: the training loops of :mod:`benchmarks.other_loops` (not tuned on) on an
emulated slot against the CPU, and recording on against off, as :mod:`benchmarks.bench_training_loops` reports its
own (the same goals: <= 1.15x the CPU, recording <= 1.03x)."""

from __future__ import annotations

from benchmarks.harness import Section, write_section

COMMAND = "python -m benchmarks other_loops"


def run(repeats: int = 15, write: bool = True) -> Section:
    from benchmarks.other_loops import LOOPS
    from benchmarks.training_loops import measure

    section = Section("other_loops", "training loops the per-op work was not tuned on, on an emulated slot over "
                      "the CPU (measured)", COMMAND)
    out = measure(repeats, LOOPS, add_=False)
    for name, (what, _, goal) in LOOPS.items():
        ratio, on_off = out[name]["ratio"], out[name]["recording"]
        section.add(f"{what}: hybrid:4 / CPU", f"{ratio:.3f}x", f"<= {goal}x", ratio <= goal,
                    f"median of {repeats} interleaved steps, CPU {out[name]['cpu_ms']:.1f} ms/step")
        section.add(f"{what}: recording on / off", f"{on_off:.3f}x", "<= 1.03x", on_off <= 1.03,
                    f"median of {repeats} interleaved steps")
    section.notes.append("One intra-op thread (torch.set_num_threads(1)) on both sides, as training_loops.")
    if write:
        write_section(section)
    return section


if __name__ == "__main__":
    run().print()
