"""What Inductor's registry holds for the hybrid device before anything compiles: the device calls
its generated wrapper code makes, and the version of our code generation (a key of its caches)."""

from __future__ import annotations

import functools
import hashlib
import os

from torch._inductor.codegen.common import DeviceOpOverrides
from torch._inductor.custom_graph_pass import CustomGraphModulePass

_CODEGEN_SOURCES = ("inductor.py", "slot_graph.py", "kernel_work.py", "records.py", "op_overrides.py", "backing.py",
                    "slot_random.py")


class HybridDeviceOpOverrides(DeviceOpOverrides):
    """Streams and guards matter on GPU-backed slots only; an emulated slot's kernels run on the host, in order."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from interop.compile.backing import raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.hybrid.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.hybrid.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.hybrid.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.hybrid.current_stream()"

    def cpp_kernel_type(self) -> str:
        return "void*"


class CodegenVersion(CustomGraphModulePass):
    """A pass that changes nothing: Inductor keys its FX graph cache on registered passes' ``uuid()``, so a
    graph compiled for a hybrid slot is not served from a cache entry that older code generation wrote."""

    def __call__(self, gm) -> None:
        return None

    @functools.cache
    def uuid(self) -> str:
        digest = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        for name in _CODEGEN_SOURCES:
            with open(os.path.join(here, name), "rb") as f:
                digest.update(f.read())
        return digest.hexdigest()
