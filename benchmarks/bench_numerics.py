"""Quantization speed: interop.numerics.quantize against torchao's MX reference on the CPU.

A 4096 x 4096 float32 tensor to MXFP8 (E4M3, 32-element blocks, the OCP scale
rule = torchao's FLOOR mode), ours and torchao 0.18's ``to_mx`` on the same tensor
in the same run, interleaved; target: ratio <= 1.0. The results are checked
equal bit for bit before anything is timed (a fast wrong answer is no answer).
Also reported, without a target: MXFP4, NVFP4 and stochastic-rounding MXFP8.
"""

from __future__ import annotations

import torch

from benchmarks.harness import Section, interleaved, median, spread, write_section

from interop.numerics import quantize

COMMAND = "python -m benchmarks numerics"
SHAPE = (4096, 4096)


def _torchao():
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.mx_tensor import to_mx
    from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

    return to_mx, ScaleCalculationMode, nvfp4_quantize, per_tensor_amax_to_scale


def _check_equal(x: torch.Tensor) -> None:
    to_mx, mode, _, _ = _torchao()
    ours = quantize(x, "mxfp8_e4m3")
    scales, data = to_mx(x, torch.float8_e4m3fn, 32, mode.FLOOR)
    if not (torch.equal(ours.scales.view(torch.uint8), scales.view(torch.uint8))
            and torch.equal(ours.codes.view(torch.uint8), data.view(torch.uint8))):
        raise AssertionError("quantize(mxfp8_e4m3) differs from torchao's to_mx: the benchmark would time a wrong answer")


def _ratio_row(section: Section, metric: str, samples: dict[str, list[float]], ours: str, theirs: str,
               target: float | None, repeats: int) -> None:
    ratios = [o / t for o, t in zip(samples[ours], samples[theirs])]
    ratio = median(ratios)
    section.add(metric, f"{ratio:.2f}x", "" if target is None else f"<= {target:.1f}",
                None if target is None else ratio <= target,
                f"median of {repeats} interleaved pairs; ours {median(samples[ours]) * 1e3:.0f} ms "
                f"({spread([s * 1e3 for s in samples[ours]])}), torchao {median(samples[theirs]) * 1e3:.0f} ms "
                f"({spread([s * 1e3 for s in samples[theirs]])})")


def run(repeats: int = 7, write: bool = True) -> Section:
    import os

    section = Section("numerics", "quantization on the CPU vs torchao 0.18 (measured)", COMMAND)
    load = os.getloadavg()[0]
    to_mx, mode, nvfp4_quantize, tensor_scale = _torchao()
    x = torch.randn(SHAPE, generator=torch.Generator().manual_seed(0))
    _check_equal(x)

    samples = interleaved({"ours": lambda: quantize(x, "mxfp8_e4m3"),
                           "torchao": lambda: to_mx(x, torch.float8_e4m3fn, 32, mode.FLOOR)},
                          repeats=repeats, warmup=1)
    _ratio_row(section, "MXFP8 E4M3 4096x4096 float32, quantize / torchao to_mx", samples, "ours", "torchao", 1.0,
               repeats)

    samples = interleaved({"ours": lambda: quantize(x, "mxfp4_e2m1"),
                           "torchao": lambda: to_mx(x, torch.float4_e2m1fn_x2, 32, mode.FLOOR)},
                          repeats=repeats, warmup=1)
    _ratio_row(section, "MXFP4 E2M1 4096x4096, quantize / torchao to_mx (ours unpacked, torchao packed)", samples,
               "ours", "torchao", None, repeats)

    samples = interleaved({"ours": lambda: quantize(x, "nvfp4"),
                           "torchao": lambda: nvfp4_quantize(x, 16, tensor_scale(x.abs().amax()))},
                          repeats=repeats, warmup=1)
    _ratio_row(section, "NVFP4 4096x4096 (tensor amax included), quantize / torchao nvfp4_quantize", samples,
               "ours", "torchao", None, repeats)

    generator = torch.Generator().manual_seed(1)
    samples = interleaved({"stochastic": lambda: quantize(x, "mxfp8_e4m3", rounding="stochastic", generator=generator),
                           "nearest": lambda: quantize(x, "mxfp8_e4m3")}, repeats=repeats, warmup=1)
    ratio = median([s / n for s, n in zip(samples["stochastic"], samples["nearest"])])
    section.add("MXFP8 E4M3 4096x4096, stochastic / nearest rounding", f"{ratio:.2f}x", "", None,
                f"median of {repeats} interleaved pairs; stochastic {median(samples['stochastic']) * 1e3:.0f} ms")
    _mode_overhead(section, repeats)
    section.notes.append(f"Machine load (1-minute average) when the run started: {load:.1f} on "
                         f"{os.cpu_count()} cores; absolute times scale with it, the ratios far less.")
    section.notes.append("Both sides are checked equal bit for bit (MXFP8) before timing. torchao prints warnings "
                         "about CUDA kernels it cannot load on this machine; harmless.")
    section.notes.append("Exact mode installs nothing on the per-op path (the dispatch mode is pushed only while a slot "
                         "of the current rack is in device mode), so its cost is the device's own; device mode is "
                         "opt-in and its per-op cost is the figure above.")
    if write:
        write_section(section)
    return section


def _mode_overhead(section: Section, repeats: int) -> None:
    """Per-op cost of device numerics mode on a one-element bfloat16 add_ (the Python dispatch mode)."""
    import interop
    from interop.numerics import set_numerics

    inner = 2000
    with interop.Rack.from_spec("trn3:2"):
        a = torch.ones(1, dtype=torch.bfloat16, device="hybrid:0")
        b = torch.ones(1, dtype=torch.bfloat16, device="hybrid:0")

        def exact():
            a.add_(b)

        def installed_other_slot():
            with set_numerics("device", slots=1):
                for _ in range(inner):
                    a.add_(b)

        def stochastic():
            with set_numerics("device", slots=0, stochastic_rounding=True):
                for _ in range(inner):
                    a.add_(b)

        samples = interleaved({"exact": lambda: [exact() for _ in range(inner)], "other": installed_other_slot,
                               "sr": stochastic}, repeats=repeats, warmup=1)
        per_op = {k: median(v) / inner * 1e6 for k, v in samples.items()}
        del a, b
    section.add("one-element bf16 add_ on a slot, exact mode", f"{per_op['exact']:.2f} us", "", None,
                f"median of {repeats} x {inner} calls (nothing of interop.numerics on the path)")
    section.add("the same, device mode on another slot (dispatch mode installed, this slot exact)",
                f"+{per_op['other'] - per_op['exact']:.1f} us", "", None, "Python TorchDispatchMode pass-through")
    section.add("the same, this slot in device mode with stochastic rounding (Trainium)",
                f"+{per_op['sr'] - per_op['exact']:.1f} us", "", None,
                "snapshot, float32 re-run on host aliases, stochastic rounding, write-back")


if __name__ == "__main__":
    run().print()
