"""Running the user's script twice, each in processes of its own: the run under test on the rack (one process,
or N ranks launched as torchrun launches them) and the reference (plain torch on the CPU, or one slot under the
CUDA layer, as one process; or plain torch on the CPU with the run's N ranks, launched alike: a script that
picks "gloo" and the CPU where CUDA is not available runs the same parallelism over Gloo), each recorded by
:mod:`interop.diverge.child`.

The one-process reference of an N-rank run is a world of one: ``RANK=0``, ``WORLD_SIZE=1``, ``LOCAL_RANK=0`` and a
rendezvous of its own, so a script that calls ``init_process_group`` and builds its mesh from the world size
runs its single-device path.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import torch

from collectives.torchrun_env import VARIABLES

LAUNCH_VARIABLES = (*VARIABLES, "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")
"""What a launcher set for this process: not passed on to the runs, which get their own."""


class RunFailed(RuntimeError):
    """A run recorded nothing to compare (the script failed or ended before its first optimizer step)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARIABLES}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def _child(out: str, steps: int, layer: bool, rack: str | None) -> list[str]:
    from interop.diverge.child import PLAIN_TORCH

    args = ["-m", "interop.diverge.child"] if layer else ["-c", PLAIN_TORCH]
    args += ["--out", out, "--steps", str(steps)]
    if layer:
        args.append("--layer")
    if rack:
        args += ["--rack", rack]
    return args


def _launched(child: list[str], script: str, args: list[str], nproc: int) -> list[str]:
    """The command of one recorded run: ``nproc`` ranks under torchrun's launch when above 1, else one process."""
    if nproc > 1:
        # torchrun runs a script or a module; plain torch's child is ``python -c`` (interop unregistered before
        # its first import), so torchrun is told the interpreter is the program.
        program = ["--no-python", sys.executable] if child[0] == "-c" else []
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                *program, *child, "--", script, *args]
    return [sys.executable, *child, "--", script, *args]


def run_under_test(script: str, args: list[str], out: str, *, steps: int, nproc: int,
                   rack: str | None) -> subprocess.Popen:
    """Start the run under test: the script on the rack, under torchrun's launch when ``nproc`` > 1."""
    return _start(_launched(_child(out, steps, True, rack), script, args, nproc), _env(), out)


def run_reference(script: str, args: list[str], out: str, *, steps: int, reference: str, nproc: int,
                  rack: str | None) -> subprocess.Popen:
    """Start the reference: one process, on the CPU (plain torch, ``cpu``) or one slot (the CUDA layer,
    ``slot``); or ``gloo``: plain torch on the CPU with the run under test's ``nproc`` ranks, launched as it is."""
    if reference == "gloo":
        return _start(_launched(_child(out, steps, False, rack), script, args, nproc), _env(), out)
    extra = {}
    if nproc > 1:
        extra = dict(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(free_port()))
    command = _launched(_child(out, steps, reference == "slot", rack), script, args, 1)
    return _start(command, _env(extra), out)


def _start(command: list[str], env: dict, out: str) -> subprocess.Popen:
    # Output to a file, not a pipe: two runs at once must not block on a full pipe nobody reads yet.
    os.makedirs(out, exist_ok=True)
    log = open(os.path.join(out, "output.log"), "w")
    # A session of its own, so that a timeout stops torchrun's ranks with it.
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    log.close()
    return process


def _failed(out: str) -> bool:
    """A finished run left no records, or a rank's error: there will be nothing to compare."""
    names = os.listdir(out) if os.path.isdir(out) else []
    return not any(n.endswith(".pt") for n in names) or any(n.endswith(".error") for n in names)


def wait(runs: list[tuple[subprocess.Popen, str]], timeout: float | None) -> str | None:
    """Wait for every run (process, its records' folder). One that failed stops the others at once: its folder
    is returned (its error is the answer); past ``timeout`` seconds all are stopped and :class:`RunFailed`
    raised."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = list(runs)
    while pending:
        for run in list(pending):
            if run[0].poll() is not None:
                pending.remove(run)
                if _failed(run[1]):
                    _stop([p for p, _ in pending])
                    return run[1]
        if deadline is not None and time.monotonic() > deadline:
            _stop([p for p, _ in pending])
            raise RunFailed(f"the runs did not finish within timeout={timeout} s")
        time.sleep(0.1)
    return None


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def load(out: str, what: str) -> list[dict]:
    """Every rank's records of one run; :class:`RunFailed` (with the run's own words) when there is nothing to
    compare."""
    files = sorted(f for f in os.listdir(out) if f.startswith("rank") and f.endswith(".pt")) \
        if os.path.isdir(out) else []
    records = [torch.load(os.path.join(out, f), weights_only=False) for f in files]
    errors = []
    for f in sorted(os.listdir(out)) if os.path.isdir(out) else []:
        if f.endswith(".error"):
            with open(os.path.join(out, f)) as fh:
                errors.append(f"{f[:-6]}: {fh.read().strip()}")
    if not records or all(r["steps"] == 0 for r in records):
        said = "\n".join(errors) or _tail(out)
        raise RunFailed(f"the {what} recorded no optimizer step, so there is nothing to compare"
                        + (f"; it said:\n{said}" if said else ""))
    return records


def _tail(out: str, lines: int = 15) -> str:
    try:
        with open(os.path.join(out, "output.log"), errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])
