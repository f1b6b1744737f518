"""The CUDA surface the layer answers, exercised the way CUDA code uses it; prints one JSON object.

Run under `hybrid run` (tests/interop/cuda_layer/test_cuda_layer.py reads the JSON); not a test by itself.
"""

import io
import json
import sys
import warnings

import torch

out = {}


def check(name, fn):
    try:
        out[name] = fn()
    except Exception as e:  # recorded, the test decides
        out[name] = f"ERROR {type(e).__name__}: {e}"


def dev(t):
    return str(t.device)


# -- devices ------------------------------------------------------------------------------------------
check("is_available", torch.cuda.is_available)
check("device_count", torch.cuda.device_count)
check("current_device", torch.cuda.current_device)
check("name0", lambda: torch.cuda.get_device_name(0))
check("capability0", lambda: list(torch.cuda.get_device_capability(0)))
check("props0", lambda: {k: getattr(torch.cuda.get_device_properties(0), k)
                         for k in ("name", "major", "minor", "total_memory", "multi_processor_count")})
check("bf16", torch.cuda.is_bf16_supported)

# -- device arguments in every form ----------------------------------------------------------------------
check("zeros_str", lambda: dev(torch.zeros(2, device="cuda")))
check("zeros_str1", lambda: dev(torch.zeros(2, device="cuda:1")))
check("zeros_device", lambda: dev(torch.zeros(2, device=torch.device("cuda", 1))))
check("zeros_int", lambda: dev(torch.zeros(2, device=1)))
check("randn_like", lambda: dev(torch.randn_like(torch.ones(2), device="cuda:1")))
check("arange", lambda: dev(torch.arange(4, device="cuda")))
check("tensor", lambda: dev(torch.tensor([1.0, 2.0], device="cuda")))
check("full", lambda: dev(torch.full((2,), 3.0, device="cuda")))
check("new_zeros", lambda: dev(torch.ones(2).new_zeros(3, device="cuda:1")))
check("to_int", lambda: dev(torch.ones(2).to(1)))
check("to_str", lambda: dev(torch.ones(2).to("cuda:1")))
check("to_device_kw", lambda: dev(torch.ones(2).to(device=torch.device("cuda"))))
check("to_dtype_only", lambda: str(torch.ones(2).to(torch.float16).dtype))
check("cuda_method", lambda: dev(torch.ones(2).cuda()))
check("cuda_method1", lambda: dev(torch.ones(2).cuda(1)))
check("is_cuda", lambda: [torch.ones(2).cuda().is_cuda, torch.ones(2).is_cuda])
check("module_cuda", lambda: dev(next(torch.nn.Linear(2, 2).cuda().parameters())))
check("module_to_int", lambda: dev(next(torch.nn.Linear(2, 2).to(1).parameters())))


def tied():
    emb = torch.nn.Embedding(4, 3)
    head = torch.nn.Linear(3, 4, bias=False)
    head.weight = emb.weight
    m = torch.nn.ModuleList([emb, head]).cuda()
    return m[1].weight is m[0].weight and m[0].weight.is_cuda


check("tied_weights_stay_tied", tied)
check("generator", lambda: str(torch.Generator(device="cuda").device))
check("generator_isinstance", lambda: isinstance(torch.Generator(), torch.Generator))
check("storage", lambda: str(torch.UntypedStorage(8).cuda().device))


def default_device():
    torch.set_default_device("cuda:1")
    try:
        return dev(torch.empty(2))
    finally:
        torch.set_default_device(None)


check("set_default_device", default_device)


def device_context():
    with torch.device("cuda"):
        return dev(torch.ones(2))


check("with_device", device_context)


def load_forms():
    buf = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buf)
    res = {}
    for label, loc in (("str", "cuda:1"), ("device", torch.device("cuda", 1)), ("int", 1),
                       ("dict", {"cpu": "cuda:1"}), ("callable", lambda s, loc: s.cuda(1))):
        buf.seek(0)
        res[label] = dev(torch.load(buf, map_location=loc)["w"])
    return res


check("load", load_forms)


def cuda_checkpoint():
    # A checkpoint saved on a GPU records "cuda:0" locations; loading it without map_location must work.
    tag = lambda obj: "cuda:0" if getattr(obj, "device", None) is not None and obj.device.type == "cpu" else None
    torch.serialization.register_package(1, tag, lambda obj, loc: None)
    try:
        buf = io.BytesIO()
        torch.save({"w": torch.arange(3.0)}, buf)
    finally:
        torch.serialization._package_registry.pop(0)
    buf.seek(0)
    w = torch.load(buf)["w"]
    return [dev(w), w.tolist()]


check("load_cuda_checkpoint", cuda_checkpoint)

# -- legacy types, streams, events, rng, memory ---------------------------------------------------------------
check("DoubleTensor", lambda: [str(torch.cuda.DoubleTensor(3).dtype), dev(torch.cuda.DoubleTensor(3))])
check("FloatTensor_isinstance", lambda: isinstance(torch.ones(2).cuda(), torch.cuda.FloatTensor))


def events():
    s = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s):
        start.record()
        x = torch.randn(256, 256, device="cuda")
        y = x @ x
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) > 0, dev(y), str(torch.cuda.current_stream().device)]


check("events", events)


def rng():
    torch.cuda.manual_seed(7)
    a = torch.randn(3, device="cuda")
    state = torch.cuda.get_rng_state()
    b = torch.randn(3, device="cuda")
    torch.cuda.set_rng_state(state)
    c = torch.randn(3, device="cuda")
    torch.manual_seed(7)
    ref = torch.randn(3)
    return [torch.equal(a.cpu(), ref), torch.equal(b.cpu(), c.cpu())]


check("rng", rng)


def memory():
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    during = torch.cuda.memory_allocated()
    peak = torch.cuda.max_memory_allocated()
    free, total = torch.cuda.mem_get_info()
    del x
    torch.cuda.empty_cache()
    return [during - before, peak >= during, total == torch.cuda.get_device_properties(0).total_memory,
            free <= total, "allocated_bytes.all.current" in torch.cuda.memory_stats()]


check("memory", memory)


def nvtx():
    import interop.hybrid.nvtx as n

    torch.cuda.nvtx.range_push("forward")
    x = torch.randn(64, 64, device="cuda")
    x @ x
    torch.cuda.nvtx.range_pop()
    with torch.cuda.nvtx.range("step {}", 3):
        x + 1
    return [(r.name, r.slot, r.end_ps > r.start_ps) for r in n.ranges()]


check("nvtx", nvtx)


def amp():
    model = torch.nn.Linear(8, 8).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    old = torch.cuda.amp.GradScaler()
    with torch.autocast(device_type="cuda"):
        y = model(torch.randn(4, 8, device="cuda"))
        inside = [torch.is_autocast_enabled("cuda"), str(torch.get_autocast_dtype("cuda"))]
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        z = model(torch.randn(4, 8, device="cuda"))
    scaler.scale(y.float().sum()).backward()
    scaler.step(opt)
    scaler.update()
    return [str(y.dtype), str(z.dtype), inside, scaler.get_scale() > 0, type(old).__name__]


check("amp", amp)


def flags():
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.deterministic = True
    torch.set_float32_matmul_precision("high")
    return [torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.deterministic]


check("flags", flags)


def untouched():
    import torch.utils._triton as t

    # The layer leaves Triton enabled: has_triton() answers True (interop.compile's answer for the slots,
    # not a CUDA-layer patch), and neither torch.jit.script nor torch.compile is replaced.
    return [t.has_triton(), t.has_triton.__module__.startswith("interop.cuda"), torch.jit.script.__module__,
            torch.compile.__module__]


check("untouched", untouched)


def unsupported():
    try:
        torch.cuda.MemPool()
    except RuntimeError as e:
        return str(e)
    return "no error"


check("unsupported", unsupported)
check("annotation_still_works", lambda: str(torch.cuda.MemPool | None))
check("accelerator", lambda: [str(torch.accelerator.current_accelerator()), torch.accelerator.device_count()])

json.dump(out, sys.stdout, default=str)
