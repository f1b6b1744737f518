"""A CUDA script that switches racks under the layer (core's rack semantics); prints one JSON object.

Run under `hybrid run --rack trn2:2+h100:2` (tests/interop/cuda_layer/test_cuda_layer.py reads the JSON); not a test by itself.
"""

import json

import torch

import interop

out = {}


def error(fn):
    try:
        fn()
    except Exception as e:  # recorded, the test decides
        return f"{type(e).__name__}: {e}"
    return None


first = interop.current_rack()
x = torch.ones(4, device="cuda:1")
torch.cuda.set_device(1)
out["before"] = [str(x.device), torch.cuda.get_device_name(), torch.cuda.current_device(),
                 torch.cuda.memory_allocated(1)]
other = interop.Rack.from_spec("b200:2+trn3:1")
with other:
    y = torch.ones(2, device="cuda")  # the current CUDA device (cuda:1) of the rack now current
    out["inside"] = [str(y.device), torch.cuda.get_device_name(), torch.cuda.current_device(),
                     torch.cuda.device_count(), torch.cuda.memory_allocated(1), str(torch.ones(1).cuda(0).device)]
    out["retired_op"] = error(lambda: x + 1)
    out["retired_to_cpu"] = x.cpu().tolist()
    out["retired_counted_on_its_rack"] = first.memory_allocated(3)
out["after"] = [str(torch.ones(1, device="cuda").device), torch.cuda.get_device_name(), (x + 1).tolist()]
out["retired_other"] = [other.memory_allocated(1), error(lambda: y * 2)]
interop.cuda.configure(map="0=hybrid:3")
with interop.Rack.from_spec("h100:1"):
    out["map_does_not_fit"] = error(lambda: torch.zeros(1, device="cuda:0"))
    out["cpu_still_fine"] = str(torch.zeros(1, device="cpu").device)
out["map_back"] = str(torch.zeros(1, device="cuda:0").device)
print(json.dumps(out))
