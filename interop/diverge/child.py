"""One recorded run of the user's script: ``python -m interop.diverge.child --out DIR --steps K [--layer]
[--rack SPEC] SCRIPT [ARGS...]`` (under torchrun for the run under test's ranks).

With ``--layer`` the script runs under the CUDA layer (``cuda:N`` -> a slot, "nccl" -> the ``hybrid`` backend,
as ``hybrid run``); without it, started by :data:`PLAIN_TORCH`, as plain torch on the CPU. The recorder's hooks are installed first; after the
K-th optimizer step the script is stopped and this process's records are written to ``DIR/rank<r>.pt``, with
``DIR/rank<r>.error`` holding the script's failure when it failed first.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
import types


PLAIN_TORCH = ("import sys; sys.modules['interop._C'] = None; "
               "from interop.diverge.child import main; main(sys.argv[1:])")
"""``python -c PLAIN_TORCH ARGS...``: this module's ``main`` with the device left unregistered, for the CPU
reference. A registered ``hybrid`` device is torch's accelerator, which FSDP2's and DeviceMesh's defaults pick:
the reference must be plain torch (the recorder imports only interop's pure-Python parts)."""


def _rank_world() -> tuple[int, int]:
    from collectives.torchrun_env import torchrun_env

    launch = torchrun_env()
    return launch.rank or 0, launch.world_size or 1


def _install_layer(rack: str | None, recorder) -> None:
    import torch

    from interop.run import _install
    from interop.diverge.patches import watch_collectives

    _install(types.SimpleNamespace(rack=rack, device_map=None, strict=False, report=None))
    recorder.device_generators = bool(torch.cuda.device_count())
    watch_collectives()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interop.diverge.child")
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--layer", action="store_true")
    parser.add_argument("--rack")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    import torch

    from interop.diverge.recorder import Recorder, StepsDone

    rank, world = _rank_world()
    recorder = Recorder(args.steps, rank, world)
    if args.layer:
        _install_layer(args.rack, recorder)
    recorder.install()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    script, script_args = command[0], command[1:]
    sys.argv = [script, *script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    failure = None
    try:
        runpy.run_path(script, run_name="__main__")
    except StepsDone:
        pass
    except SystemExit as e:
        if e.code not in (None, 0):
            failure = f"the script exited with status {e.code}"
    except BaseException:  # the script's own failure: kept for the report
        failure = traceback.format_exc(limit=-8)
    records = recorder.finish()
    os.makedirs(args.out, exist_ok=True)
    torch.save(records, os.path.join(args.out, f"rank{rank}.pt"))
    if failure:
        with open(os.path.join(args.out, f"rank{rank}.error"), "w") as f:
            f.write(failure)
    sys.stdout.flush()
    sys.stderr.flush()
    # Process groups and their threads are left as the stopped script left them: exit without tearing them down.
    os._exit(0)


if __name__ == "__main__":
    main()
