"""torch.compile's own work stays off the step's modelled figures.

While Dynamo and Inductor compile (tracing, AOTAutograd, constant folding, benchmarking and autotuning, and a
backward graph compiled lazily at the first backward), what they run on a slot is the compiler's, not the
program's: on a cold cache it is there, on a warm one it is not. So for the duration of a compile

- nothing is recorded on the modelled timeline (the compiled graph's own launches, after the compile, are);
- each slot's peak memory is restored afterwards to what it was, or to what the slot holds then if more
  (buffers the compile leaves behind, such as folded constants, stay counted);
- CUDA API calls the compiler makes under the CUDA layer are counted apart, as compile-time calls
  (:func:`compiling`), not on the script's line.

The window is torch's own: every compile runs inside ``torch._dynamo.callback_handler.install_callbacks``
(Dynamo's frames, lazy backward compiles), whose start and end this module wraps. A process-wide window:
compiles nest (the outermost one opens and closes it).
"""

from __future__ import annotations

import contextlib
import threading

_lock = threading.Lock()
_depth = 0
_saved: dict = {}


def compiling() -> bool:
    """True while torch.compile is compiling (in any thread of this process)."""
    return _depth > 0


def _open() -> None:
    from interop import _C, session

    _saved["recording"] = _C._timeline_enabled()
    _C._set_timeline_enabled(False)
    rack = session.current()
    _saved["rack"] = rack
    _saved["peaks"] = {} if rack is None else {d.index: rack._table.peaks(d.index) for d in rack.devices}


def _close() -> None:
    from interop import _C

    rack = _saved.pop("rack", None)
    for slot, peaks in _saved.pop("peaks", {}).items():
        rack._table.restore_peaks(slot, peaks)
    _C._set_timeline_enabled(_saved.pop("recording", True))


@contextlib.contextmanager
def window():
    """The compiler's work inside: off the timeline, off the peaks (nests)."""
    global _depth
    with _lock:
        _depth += 1
        if _depth == 1:
            _open()
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _close()


def install(callback_module) -> None:
    """Wrap ``CompilationCallbackHandler.install_callbacks`` (``torch._dynamo.callback`` was just imported)."""
    cls = callback_module.CompilationCallbackHandler
    original = cls.install_callbacks
    if getattr(original, "__hybrid__", False):
        return

    @contextlib.contextmanager
    def install_callbacks(self, *args, **kwargs):
        with window(), original(self, *args, **kwargs):
            yield

    install_callbacks.__hybrid__ = True
    install_callbacks.__wrapped__ = original
    cls.install_callbacks = install_callbacks
