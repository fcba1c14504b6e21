"""ng.profiler: the context manager over nx_profiler_*, record_function, the table, and the Chrome
trace read back with Python's JSON reader (the format chrome://tracing and Perfetto load)."""
import json

import numpy as np
import pytest

import nexusgrad as ng


def step(x, w):
    loss = ng.sum(ng.matmul(x, w))
    ng.backward(loss)
    return loss


def make_xw():
    rng = np.random.default_rng(0)
    x = ng.tensor(rng.standard_normal((16, 32)).astype(np.float32))
    w = ng.tensor(rng.standard_normal((32, 8)).astype(np.float32), requires_grad=True)
    return x, w


def test_profile_records_calls_kernels_and_vjps():
    xw = make_xw()
    assert not ng.profiler.is_enabled()
    with ng.profiler.profile() as prof:
        assert ng.profiler.is_enabled()
        with ng.profiler.record_function("train step"):
            step(*xw)
    assert not ng.profiler.is_enabled()
    events = prof.events()
    by_name = {}
    for i, e in enumerate(events):
        by_name.setdefault((e["kind"], e["name"]), []).append(i)
    region = by_name[("region", "train step")][0]
    call = by_name[("api", "nx_matmul")][0]
    kernel = [i for i in by_name[("kernel", "matmul")] if events[i]["parent"] == call][0]
    assert events[call]["parent"] == region
    assert events[kernel]["shapes"] == "f32[1,16,8] f32[1,16,32] f32[1,32,8]"
    assert events[call]["bytes_allocated"] >= 16 * 8 * 4
    vjp = by_name[("backward", "MatmulBackward")][0]
    assert events[events[vjp]["parent"]]["name"] == "nx_backward"
    # every event inside its parent
    for e in events:
        if e["parent"] >= 0:
            p = events[e["parent"]]
            assert p["start_us"] <= e["start_us"]
            assert e["start_us"] + e["duration_us"] <= p["start_us"] + p["duration_us"] + 1e-3
    timeline = prof.memory_timeline()
    assert any(m["delta"] == 16 * 8 * 4 for m in timeline)
    assert all(m["reserved"] >= m["allocated"] for m in timeline)


def test_table_sorts_and_limits():
    xw = make_xw()
    with ng.profiler.profile() as prof:
        for _ in range(3):
            step(*xw)
    table = prof.table(sort_by="calls", row_limit=5)
    lines = table.splitlines()
    rows = lines[2:lines.index(lines[1], 2)]
    assert len(rows) == 5
    calls = [int(r.split()[2]) for r in rows]
    assert calls == sorted(calls, reverse=True)
    assert "nx_matmul" in prof.table()
    with pytest.raises(ValueError, match="sort_by"):
        prof.table(sort_by="bogus")


def test_chrome_trace_parses(tmp_path):
    xw = make_xw()
    with ng.profiler.profile() as prof:
        with ng.profiler.record_function('step "quoted" \u00e9'):
            step(*xw)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text(encoding="utf-8"))
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    names = {e["name"] for e in complete}
    assert {'step "quoted" \u00e9', "nx_matmul", "matmul", "MatmulBackward", "nx_backward"} <= names
    assert len(complete) == len(prof.events())  # one host event each (plus device copies on a GPU)
    for e in complete:
        assert e["dur"] >= 0 and e["ts"] >= 0 and e["cat"] in ("region", "api", "backward", "kernel")
    counters = [e for e in events if e["ph"] == "C"]
    assert counters and all(e["name"] == "memory" for e in counters)
    assert any(e["ph"] == "M" and e["args"]["name"] == "host" for e in events)


def test_record_function_as_decorator_and_without_profiler():
    xw = make_xw()
    @ng.profiler.record_function("my step")
    def decorated():
        return step(*xw)

    decorated()  # no profiler: nothing recorded, nothing refused
    with ng.profiler.profile(device_time=False, nvtx=False, memory=False, record_shapes=False) as prof:
        decorated()
    events = prof.events()
    assert [e["name"] for e in events if e["kind"] == "region"] == ["my step"]
    assert all(e["shapes"] == "" for e in events)
    assert prof.memory_timeline() == []


def test_errors():
    prof = ng.profiler.profile()
    with pytest.raises(ng.StateError, match="not been stopped"):
        prof.events()
    with prof:
        with pytest.raises(ng.StateError, match="already running"):
            ng.profiler.profile().start()
        with pytest.raises(ng.StateError, match="no range is open"):
            ng.profiler.record_function("x").__exit__(None, None, None)
    with pytest.raises(ng.StateError, match="no profiler is running"):
        prof.stop()
