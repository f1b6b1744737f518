"""Under `hybrid run`: every function the CUDA layer (and interop's profiler integration) put in torch's place
accepts every argument torch's own accepts, by the same names. Prints one line per wrapper that does not."""

import inspect
import sys

import torch.profiler

from interop.cuda_layer.patch_ledger import PATCHES

PARAMETER = inspect.Parameter


def accepts(replacement, original) -> list[str]:
    try:
        new, old = inspect.signature(replacement), inspect.signature(original)
    except (TypeError, ValueError):
        return []  # a builtin or a class without a signature to compare
    kinds = {p.kind for p in new.parameters.values()}
    missing = []
    positional = [p for p in new.parameters.values() if p.kind in (PARAMETER.POSITIONAL_ONLY,
                                                                    PARAMETER.POSITIONAL_OR_KEYWORD)]
    for i, p in enumerate(old.parameters.values()):
        if p.kind in (PARAMETER.VAR_POSITIONAL, PARAMETER.VAR_KEYWORD):
            if (PARAMETER.VAR_POSITIONAL if p.kind == PARAMETER.VAR_POSITIONAL else PARAMETER.VAR_KEYWORD) \
                    not in kinds:
                missing.append(str(p))
            continue
        by_name = p.name in new.parameters or PARAMETER.VAR_KEYWORD in kinds
        by_position = p.kind == PARAMETER.KEYWORD_ONLY or i < len(positional) or PARAMETER.VAR_POSITIONAL in kinds
        if not (by_name and by_position):
            missing.append(p.name)
    return missing


checked = 0
problems = []
wrapped = [(owner, name, original, getattr(owner, name) if not item else owner[name])
           for owner, name, original, item in PATCHES.done if callable(original)]
cls = torch.profiler.profile
for name in ("start", "stop", "step", "export_chrome_trace"):
    wrapped.append((cls, name, getattr(cls, name).__wrapped__, getattr(cls, name)))
for owner, name, original, replacement in wrapped:
    if inspect.isclass(original) or getattr(replacement, "__hybrid_refused__", None) is not None:
        continue  # a refusal takes anything and raises
    if getattr(original, "__hybrid_api__", None) is not None:
        continue  # the layer's own first answer, replaced by a later one: not torch's
    checked += 1
    missing = accepts(replacement, original)
    if missing:
        problems.append(f"{getattr(owner, '__name__', type(owner).__name__)}.{name}: drops {', '.join(missing)}")
print(f"checked {checked}")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
