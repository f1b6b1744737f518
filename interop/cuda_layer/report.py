"""The report of a CUDA run on the rack: JSON, Markdown and a short summary for stderr.

Sections: every CUDA API touched (count, first call sites, how it was served:
same semantics / mapped / modelled / unsupported on the target), the
torch.backends settings that would change numerics on a real GPU, what would
fail or differ on the real target hardware (each with its call site, reason
and source), the op ledger (per ATen op and slot: how it ran and how often,
and which ops the cost model priced with its default bytes-only estimate), and
the modelled time per slot.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from interop.cuda_layer.usage import LOG, SERVED


@dataclass
class CudaReport:
    """Everything :func:`build` gathered; :meth:`to_json`, :meth:`markdown`, :meth:`summary`, :meth:`write`."""

    script: str
    rack: str
    device_map: str
    map_note: str
    strict: bool
    apis: list = field(default_factory=list)
    flags: list = field(default_factory=list)
    divergences: list = field(default_factory=list)
    ledger: list = field(default_factory=list)
    default_estimated: list = field(default_factory=list)
    modelled: dict = field(default_factory=dict)
    exit_code: int | None = None
    rank: int | None = None
    failure: dict | None = None
    """How the script failed, when it raised: ``kind`` ("op" | "api" | "exception"), ``name`` (the ATen op,
    the CUDA API or the exception type), ``slot``, ``message``, ``site`` (the user's line)."""

    # -- views -------------------------------------------------------------------------------------------

    def api(self, name: str):
        """The entry of one API (``"torch.cuda.manual_seed"``), or None."""
        return next((a for a in self.apis if a.api == name), None)

    def to_json(self) -> dict:
        """A JSON-serialisable dict of the whole report."""
        return {
            "script": self.script, "rack": self.rack, "device_map": self.device_map, "map_note": self.map_note,
            "strict": self.strict, "exit_code": self.exit_code, "rank": self.rank, "failure": self.failure,
            "cuda_apis": [dict(asdict(a), served_as=SERVED.get(a.served, a.served)) for a in self.apis],
            "numerics_flags": [dict(asdict(f), value=repr(f.value)) for f in self.flags],
            "divergences": [d.to_dict() for d in self.divergences],
            "op_ledger": [asdict(r) for r in self.ledger],
            "default_estimated_ops": self.default_estimated,
            "modelled": self.modelled,
        }

    def markdown(self) -> str:
        """The report as Markdown."""
        lines = [f"# CUDA on the rack: {self.script}", "",
                 f"- rack: `{self.rack}`", f"- device map: {self.device_map}"]
        if self.map_note:
            lines.append(f"- note: {self.map_note}")
        lines += [f"- device fidelity: {'strict (refusals raise)' if self.strict else 'default (ops run; divergences listed)'}",
                  f"- exit code: {self.exit_code}" if self.exit_code is not None else "- exit code: (running)", ""]
        lines += ["## CUDA APIs the script touched", "",
                  "Calls torch.compile made while compiling are counted apart (compile time), on no line of the "
                  "script.", "",
                  "| API | calls | compile-time calls | served | first call sites | note |", "|---|---:|---:|---|---|---|"]
        for a in self.apis:
            lines.append(f"| `{a.api}` | {a.count} | {a.compile_count} | {SERVED.get(a.served, a.served)} | "
                         f"{'<br>'.join(a.sites)} | {a.note} |")
        lines.append("")
        if self.flags:
            lines += ["## torch.backends settings", "",
                      "| setting | value | changes numerics on a real GPU | set at | note |", "|---|---|---|---|---|"]
            for f in self.flags:
                lines.append(f"| `{f.name}` | `{f.value!r}` | {'yes' if f.changes_numerics else 'no'} | {f.site} | "
                             f"{f.note} |")
            lines += ["", "The emulated slots compute exactly as the CPU whatever these say.", ""]
        if self.failure:
            message = self.failure["message"] or "(no message)"
            lines += ["## The run failed", "", f"- {self._failure_line()}", f"- message: {message}", ""]
        lines += ["## What would fail or differ on the real target", ""]
        if not self.divergences and self.failure:
            lines += ["Nothing else was seen before the run failed (above).", ""]
        elif not self.divergences:
            lines += ["Nothing: every op ran in a dtype its slot's real chip computes in natively.", ""]
        else:
            lines += ["| op | slot | dtype | on the real chip | calls | first call sites | reason | instead | source |",
                      "|---|---|---|---|---:|---|---|---|---|"]
            for d in self.divergences:
                lines.append(f"| `{d.op}` | hybrid:{d.slot} ({d.kind}) | {d.dtype} | {d.outcome} | {d.count} | "
                             f"{'<br>'.join(d.sites)} | {d.reason} | {d.instead} | {d.source} [{d.status}] |")
            lines.append("")
        lines += ["## Op ledger", "", "How each ATen op ran on each slot (counted in the C++ dispatch). Cost: "
                  "how the op's modelled time was priced (`-`: a dedicated kernel, not an op record: "
                  "allocation and views do no device work, copies are on the timeline as transfers; or the "
                  "op is not on the current timeline).", "",
                  "| op | slot | path | count | cost |", "|---|---|---|---:|---|"]
        for r in sorted(self.ledger, key=lambda r: (-r.count, r.op)):
            cost = {True: "default estimate (bytes only)", False: "modelled", None: "-"}[r.default_estimate]
            lines.append(f"| `{r.op}` | hybrid:{r.slot} ({r.kind}) | {r.path} | {r.count} | {cost} |")
        lines.append("")
        if self.default_estimated:
            lines += ["Ops priced with the default bytes-only estimate: "
                      + ", ".join(f"`{op}`" for op in self.default_estimated), ""]
        if self.modelled:
            lines += ["## Modelled time", "", "```", self.modelled.get("table", ""), "```", ""]
        return "\n".join(lines)

    def _failure_line(self) -> str:
        f = self.failure
        what = {"op": "the op", "api": "the CUDA API", "exception": "an exception"}.get(f["kind"], f["kind"])
        slot = f" on hybrid:{f['slot']}" if f.get("slot") is not None and f["slot"] >= 0 else ""
        return f"failed at {f['site']}: {what} `{f['name']}`{slot} raised"

    def summary(self) -> str:
        """A few lines for stderr at exit."""
        served: dict[str, int] = {}
        for a in self.apis:
            if a.count:
                served[a.served] = served.get(a.served, 0) + 1
        calls = sum(a.count for a in self.apis)
        compile_calls = sum(a.compile_count for a in self.apis)
        parts = ", ".join(f"{n} {SERVED[k]}" for k, n in served.items() if k in SERVED)
        ops = sum(r.count for r in self.ledger)
        refused = [d for d in self.divergences if d.level == "unsupported"]
        converted = [d for d in self.divergences if d.level != "unsupported"]
        lines = [f"hybrid run: {self.script} on {self.rack} ({self.device_map})"]
        if self.map_note:
            lines.append(f"  note: {self.map_note}")
        if self.failure:
            first = next(iter(self.failure["message"].splitlines()), "") or "(no message)"
            lines.append(f"  {self._failure_line()}: {first[:200]}")
        lines += [
                 f"  CUDA APIs: {sum(1 for a in self.apis if a.count)} touched, {calls} calls ({parts or 'none'})"
                 + (f"; {compile_calls} more by torch.compile while compiling" if compile_calls else ""),
                 f"  ops on slots: {ops} ({len({r.op for r in self.ledger})} distinct); "
                 f"default cost estimates: {len(self.default_estimated)} op(s)"]
        if refused or converted:
            lines.append(f"  real target: {len(refused)} op(s) would fail, {len(converted)} would compute "
                         "differently:")
            for d in (refused + converted)[:6]:
                lines.append(f"    {d.op} {d.dtype} on hybrid:{d.slot} ({d.kind}) {d.outcome} "
                             f"[{d.sites[0] if d.sites else '?'}]")
        numerics = [f.name for f in self.flags if f.changes_numerics]
        if numerics:
            lines.append(f"  settings that change numerics on a real GPU: {', '.join(numerics)}")
        if "makespan_ms" in self.modelled:
            lines.append(f"  modelled makespan: {self.modelled['makespan_ms']:.3f} ms")
        from devices.text_table import paragraph

        # within the CLI's width: a long rack, device map or script path continues 4 columns further in
        return "\n".join(paragraph(line, indent=line[:len(line) - len(line.lstrip())] + "    ") for line in lines)

    def write(self, path: str) -> tuple[str, str]:
        """Write ``<path>.json`` and ``<path>.md`` (a ``.json`` or ``.md`` suffix on ``path`` is kept for
        that file), each whole or not at all (a temporary file renamed into place); returns both paths.
        ValueError (naming ``--report``) when either cannot be written."""
        from devices.output_files import atomic_path

        json_path, md_path = report_paths(path)
        with atomic_path(json_path, "--report") as json_tmp, atomic_path(md_path, "--report") as md_tmp:
            with open(json_tmp, "w", encoding="utf-8") as f:
                json.dump(self.to_json(), f, indent=1, default=str)
            with open(md_tmp, "w", encoding="utf-8") as f:
                f.write(self.markdown())
        return json_path, md_path


def report_paths(path: str) -> tuple[str, str]:
    """The two files ``--report PATH`` writes: ``PATH.json`` and ``PATH.md`` (a ``.json`` or ``.md`` suffix
    on ``PATH`` is kept for that file)."""
    stem, ext = os.path.splitext(path)
    if ext not in (".json", ".md"):
        stem = path
    return stem + ".json", stem + ".md"


def _modelled() -> dict:
    import interop

    try:
        run = interop.report()
    except Exception as e:  # a report must never fail the run it describes
        return {"error": f"{type(e).__name__}: {e}"}
    busy = {f"hybrid:{s.slot}": s.busy_s * 1e3 for s in run.slots if s.ops or s.busy_s}
    return {"makespan_ms": run.makespan_s * 1e3, "busy_ms": busy, "table": run.table(),
            "note": "every time here is modelled by the cost model, not measured"}


def describe_failure(exc: BaseException) -> dict:
    """What :attr:`CudaReport.failure` holds for an exception the script raised: the ATen op that raised on a
    slot (when the exception is that op's), else the CUDA API the layer refused, else the exception's type;
    and the innermost line of the user's code in its traceback."""
    from interop import _C
    from interop.callsite import format_site, is_user_file
    from interop.cuda_layer.refusals import UnsupportedCudaAPI

    message = str(exc)
    site = "<unknown>"
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if is_user_file(filename):
            site = format_site(filename, tb.tb_lineno)
        tb = tb.tb_next
    if isinstance(exc, UnsupportedCudaAPI) and exc.api:
        return {"kind": "api", "name": exc.api, "slot": None, "message": message, "site": site}
    try:
        op, slot, op_message = _C._last_failure()
    except Exception:  # noqa: BLE001  (no extension: nothing ran on a slot)
        op, slot, op_message = "", -1, ""
    # An exception without a message (a bare assert) is not the op's: "" is in every message.
    if op and op_message and message.strip() and (op_message.strip() in message or message.strip() in op_message):
        return {"kind": "op", "name": op, "slot": slot, "message": message, "site": site}
    return {"kind": "exception", "name": type(exc).__name__, "slot": None, "message": message, "site": site}


def build(script: str = "<interactive>", exit_code: int | None = None, failure: dict | None = None) -> CudaReport:
    """The report of everything recorded so far in this process."""
    import interop
    from interop.cuda_layer import mapping

    try:
        current = mapping.current()  # on the current rack (the map follows a rack change)
    except (RuntimeError, mapping.MapError):
        current = mapping._current
    rack = interop.current_rack()
    led = interop.ledger()
    from collectives.torchrun_env import torchrun_env

    rank = torchrun_env().rank
    return CudaReport(
        script=script,
        rack=rack.name if rack is not None else "-",
        device_map=current.describe() if current is not None else "(not installed)",
        map_note=current.note if current is not None else "",
        strict=interop.fidelity.strict(),
        apis=sorted(LOG.apis.values(), key=lambda a: a.api),
        flags=list(LOG.flags.values()),
        divergences=interop.divergences(),
        ledger=list(led.rows),
        default_estimated=led.default_estimated(),
        modelled=_modelled(),
        exit_code=exit_code,
        rank=rank,
        failure=failure,
    )
