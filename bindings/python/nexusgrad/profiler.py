"""The profiler (nx_profiler_* of nexus.h), shaped like torch.profiler:

    with ng.profiler.profile() as prof:
        with ng.profiler.record_function("train step"):
            loss = step(x, y)
    print(prof.table(sort_by="total", row_limit=20))
    prof.export_chrome_trace("trace.json")      # chrome://tracing or https://ui.perfetto.dev

Every C API call, every VJP of a backward pass and every kernel (with its operands' shapes, bytes
allocated and, on CUDA, device time from CUDA events) of every thread is recorded while the
``with`` block runs. With ``nvtx=True`` (the default) each event is also an NVTX range for Nsight
Systems. One profiler runs at a time in a process.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Optional

from . import _nexus as _C
from .tensor import _options

__all__ = ["profile", "record_function", "is_enabled"]

_KINDS = {_C.NX_PROFILE_REGION: "region", _C.NX_PROFILE_API: "api", _C.NX_PROFILE_BACKWARD: "backward",
          _C.NX_PROFILE_KERNEL: "kernel"}
_SORTS = {"total": _C.NX_PROFILE_SORT_TOTAL, "self": _C.NX_PROFILE_SORT_SELF, "device": _C.NX_PROFILE_SORT_DEVICE,
          "calls": _C.NX_PROFILE_SORT_CALLS}


def is_enabled() -> bool:
    """Whether a profiler records now (in this process)."""
    return bool(_C.nx_profiler_enabled())


class profile:
    """Records what the engine does inside a ``with`` block (or between :meth:`start` and
    :meth:`stop`); the results stay readable after it ends."""

    def __init__(self, device_time: bool = True, nvtx: bool = True, memory: bool = True,
                 record_shapes: bool = True) -> None:
        self._options = _options(_C.nx_profiler_options, device_time=bool(device_time), nvtx=bool(nvtx),
                                 memory=bool(memory), shapes=bool(record_shapes))
        self._profile: Any = None

    def start(self) -> "profile":
        _C.nx_profiler_start(self._options)
        return self

    def stop(self) -> None:
        self._profile = _C.nx_profiler_stop()

    def __enter__(self) -> "profile":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _stopped(self) -> Any:
        if self._profile is None:
            raise _C.StateError("profile: the profiler has not been stopped yet (leave the with block first)")
        return self._profile

    def events(self) -> List[Dict[str, Any]]:
        """Every event in the order they began: name, kind ('region', 'api', 'backward',
        'kernel'), shapes, device, thread, depth, parent (an index, -1 at the top), start_us,
        duration_us, device_start_us and device_duration_us (-1 unless timed on a GPU),
        bytes_allocated."""
        p = self._stopped()
        out = []
        for i in range(_C.nx_profile_event_count(p)):
            e = _C.nx_profile_get_event(p, i)
            e["kind"] = _KINDS[e["kind"]]
            out.append(e)
        return out

    def memory_timeline(self) -> List[Dict[str, Any]]:
        """One sample per allocation or release: time_us, device, delta, allocated, reserved
        (bytes) and the event it happened in."""
        p = self._stopped()
        return [_C.nx_profile_get_memory_sample(p, i) for i in range(_C.nx_profile_memory_count(p))]

    def table(self, sort_by: str = "total", row_limit: int = 0) -> str:
        """The events grouped by kind and name (torch's key_averages().table()), sorted by
        'total', 'self', 'device' or 'calls'; row_limit rows at most (0: all)."""
        if sort_by not in _SORTS:
            raise ValueError(f"profile.table: sort_by must be one of {sorted(_SORTS)}, not {sort_by!r}")
        return _C.nx_profile_summary(self._stopped(), _SORTS[sort_by], int(row_limit))

    def export_chrome_trace(self, path: str) -> None:
        """Writes the Chrome trace (JSON) to path, atomically."""
        _C.nx_profile_save_chrome_trace(self._stopped(), str(path))


class record_function:
    """A named region around a block (``with record_function("forward"):``) or a function (as a
    decorator); an NVTX range too. Does nothing when no profiler runs."""

    def __init__(self, name: str) -> None:
        self._name = str(name)

    def __enter__(self) -> "record_function":
        _C.nx_profiler_range_push(self._name)
        return self

    def __exit__(self, *exc: Any) -> None:
        _C.nx_profiler_range_pop()

    def __call__(self, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with record_function(self._name):
                return function(*args, **kwargs)
        return wrapped
