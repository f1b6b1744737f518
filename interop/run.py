"""``python -m interop.run [--rack SPEC] [--map MAP] [--strict] [--report PATH] SCRIPT [ARGS...]``
(or ``-m package.module [ARGS...]``): run CUDA code unmodified on the rack.

The same as ``hybrid run``; under torchrun: ``torchrun --nproc_per_node=N -m interop.run SCRIPT ARGS``.
Child processes of the script (mp.spawn, spawn-context DataLoader workers...) run under the same layer and
rack (:mod:`interop.cuda_layer.children`). The script's exit code, stdout and tracebacks are its own; the layer adds a
short summary on stderr at exit and, with ``--report PATH``, writes the full
report as JSON and Markdown (``PATH.json`` and ``PATH.md``; under torchrun each
rank but 0 adds ``.rank<r>`` to the name).

The report's files are checked before the script starts (a path that cannot be
written is a usage error, exit 2) and written whole or not at all, after the
summary; a report that could not be written makes the exit status non-zero (1
where the script succeeded) and says so. SIGINT, SIGTERM and SIGHUP (what
torchrun, Slurm and Kubernetes send to stop a job) stop the script, then the
summary and the report are written and the exit status is 128 + the signal's
number (130, 143, 129), as a shell reports a process that signal ended.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import runpy
import signal
import sys
import traceback

USAGE = "hybrid run [--rack SPEC] [--map MAP] [--strict] [--report PATH] (SCRIPT | -m MODULE) [ARGS...]"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``hybrid run`` (shared with ``python -m interop.run``)."""
    parser.add_argument("--rack", help="rack spec: a preset, 'kind:count+kind:count' or a .toml file "
                                       "(default: the current rack, fusion-default)")
    parser.add_argument("--map", dest="device_map", metavar="MAP",
                        help="which slot each cuda:N is: default the rack's GPU-kind slots in order; a kind or "
                             "family ('trn', 'h100'); or pairs '0=hybrid:4,1=hybrid:5'")
    parser.add_argument("--strict", action="store_true",
                        help="raise what the real chips would raise (float64 on Trainium, a plain float8 matmul "
                             "on an H100, ...) instead of running it and listing it in the report")
    parser.add_argument("--report", metavar="PATH", help="write the report as PATH.json and PATH.md")
    parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE [ARGS...]",
                        help="run a module as a script, like python -m (everything after it is the module's)")
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]",
                        help="the script and its arguments (or the module's arguments with -m)")


class UsageError(ValueError):
    """A bad ``hybrid run`` invocation (exit status 2)."""


class Stopped(BaseException):
    """The script was stopped by a signal (SIGTERM, SIGHUP): raised in the main thread by the handler that
    ``hybrid run`` installs, so that its report is still written. A BaseException, as KeyboardInterrupt
    is, so that a script's ``except Exception`` does not swallow it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


STOPPING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
"""The signals after which the summary and the report are still written (SIGINT as KeyboardInterrupt)."""


def _raise_stopped(signum, frame):
    raise Stopped(signum)


class _Deferred:
    """While the summary and the report are written, a stopping signal only is noted (the report stays whole);
    the exit status then says which one came."""

    def __init__(self):
        self.signum = None
        self.previous = {}

    def __enter__(self):
        def note(signum, frame):
            self.signum = self.signum or signum

        for sig in STOPPING_SIGNALS:
            self.previous[sig] = signal.signal(sig, note)
        return self

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        return False


def _exit_status(signum: int) -> int:
    return 128 + int(signum)


def _target(args) -> tuple[str, str, list[str]]:
    """("module" | "script", name, argv after it)."""
    command = list(args.command or [])
    if args.module is not None:
        if not args.module:
            raise UsageError(f"-m needs a module name; usage: {USAGE}")
        return "module", args.module[0], args.module[1:] + command
    if not command:
        raise UsageError(f"no script given; usage: {USAGE}")
    script, rest = command[0], command[1:]
    if script == "-m":
        if not rest:
            raise UsageError(f"-m needs a module name; usage: {USAGE}")
        return "module", rest[0], rest[1:]
    if not os.path.isfile(script):
        raise UsageError(f"script {script!r} not found (working directory {os.getcwd()})")
    return "script", script, rest


def _install(args):
    import interop

    # The rack first: which slots real GPUs back is torch's own answer, before the layer answers for slots.
    if args.rack:
        try:
            interop.set_rack(interop.Rack.from_spec(args.rack))
        except ValueError as e:
            raise UsageError(f"--rack {args.rack!r}: {e}") from None
    from interop import cuda_layer

    try:
        device_map = cuda_layer.configure(map=args.device_map, strict=args.strict)
    except cuda_layer.MapError as e:
        raise UsageError(str(e)) from None
    import interop.cuda  # noqa: F401  (installed above, so this only names it: a script may call interop.cuda.*;
    #                             the runner is a root module so that the layer never imports interop.cuda back)
    from interop.cuda_layer import children

    children.export(args.rack or interop.current_rack().name, args.device_map, args.strict, args.report)
    return device_map


def _check_launch() -> None:
    """The launcher's variables are read before the script runs, so that a malformed one stops the run at once
    (the report, written after the script, names each rank's file by its RANK)."""
    from collectives.torchrun_env import torchrun_env

    try:
        torchrun_env()
    except ValueError as e:
        raise UsageError(str(e)) from None


def _check_report(args) -> None:
    """The report's two files can be written (before the script runs, not after it)."""
    if not args.report:
        return
    from devices.output_files import check_writable
    from interop.cuda_layer.report import report_paths

    for path in report_paths(_report_path(args.report)):
        try:
            check_writable(path, "--report")
        except ValueError as e:
            raise UsageError(str(e)) from None


def _report_path(path: str) -> str:
    from collectives.torchrun_env import torchrun_env

    launch = torchrun_env()
    rank = launch.rank
    if rank is None or not launch.launched or rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}" if ext in (".json", ".md") else f"{path}.rank{rank}"


def _print_script_traceback(exc: BaseException) -> None:
    # The script's own traceback: start at its first frame, not at the runner's.
    tb = exc.__traceback__
    here = os.path.abspath(__file__)
    while tb is not None and (os.path.abspath(tb.tb_frame.f_code.co_filename) in (here, runpy.__file__)
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__, file=sys.stderr)


def run(args) -> int:
    """Install the layer as ``args`` ask, run the target, report; returns the exit status."""
    try:
        kind, name, argv = _target(args)
        _check_launch()
        _check_report(args)
        _install(args)
    except UsageError as e:
        print(f"hybrid run: error: {e}", file=sys.stderr)
        return 2
    exit_code = 0
    failure = None
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    handlers = {}
    if threading_main():
        handlers = {sig: signal.signal(sig, _raise_stopped) for sig in STOPPING_SIGNALS if sig != signal.SIGINT}
    try:
        if kind == "script":
            sys.argv = [name] + argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(name)))
            runpy.run_path(name, run_name="__main__")
        else:
            sys.argv = [name] + argv
            sys.path.insert(0, os.getcwd())
            runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
        exit_code = code if isinstance(code, int) else (0 if code is None else 1)
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
    except Stopped as e:  # SIGTERM / SIGHUP: stopped, not failed; the report follows
        print(f"hybrid run: {name} stopped by {e.name}", file=sys.stderr)
        exit_code = _exit_status(e.signum)
    except BaseException as e:  # the script's own failure: its traceback, status 1
        _print_script_traceback(e)
        exit_code = _exit_status(signal.SIGINT) if isinstance(e, KeyboardInterrupt) else 1
        failure = None if isinstance(e, KeyboardInterrupt) else e  # a stop, as SIGTERM's, not a failure
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    deferred = _Deferred() if threading_main() else contextlib.nullcontext()
    with deferred:
        written = _finish(args, name, exit_code, failure)
    if isinstance(deferred, _Deferred) and deferred.signum is not None:
        return _exit_status(deferred.signum)
    if not written and exit_code == 0:
        return 1  # the script succeeded, its report did not: not a success
    return exit_code


def threading_main() -> bool:
    """Signal handlers can be installed (only the main thread of the main interpreter may)."""
    import threading

    return threading.current_thread() is threading.main_thread()


def _finish(args, name: str, exit_code: int, failure: BaseException | None = None) -> bool:
    """Print the summary, then write the report (``--report``); False when a report was asked for and not
    written (the reason is printed)."""
    from interop.cuda_layer.report import build, describe_failure

    try:
        report = build(script=name, exit_code=exit_code,
                       failure=describe_failure(failure) if failure is not None else None)
        summary = report.summary()
    except Exception as e:  # the report must not change the script's outcome
        print(f"hybrid run: could not build the report: {type(e).__name__}: {e}", file=sys.stderr)
        return not args.report
    print(summary, file=sys.stderr, flush=True)
    if not args.report:
        return True
    try:
        json_path, md_path = report.write(_report_path(args.report))
    except ValueError as e:
        print(f"hybrid run: error: the report was not written: {e}", file=sys.stderr)
        return False
    print(f"hybrid run: report written to {json_path} and {md_path}", file=sys.stderr)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interop.run", usage=USAGE, description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
