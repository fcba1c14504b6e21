#!/usr/bin/env python3
"""Per-op benchmark: the op harness's cases (tests/harness/op_cases.py) timed on larger inputs,
ours through the C API against torch's reference on the same values. A benchmark, not a test:
it never fails on speed.

For each op (ops.yaml order; --op to choose) it prints our time and torch's (medians of --reps
timed repetitions after --warmup, each repetition long enough to dwarf the call overhead; CUDA
work is synchronized before the clock stops), the ratio torch/ours (> 1: we are faster), and
what the time achieves: bandwidth (bytes of inputs + outputs / time) for elementwise, reduction,
copy and other memory-bound ops, beside the copy bandwidth measured in the same run (a large
clone, the faster of ours and torch's: the ceiling); FLOP/s for matmul, linear and attention,
beside the faster large square matmul of the same run. Inputs come from each case's `bench`
arguments, their leading dimension times --scale (an op without them runs its first variant,
marked "small").

usage: OMP_NUM_THREADS=2 PYTHONPATH=BUILD/python python3 bench/op_bench.py [--device cpu|cuda]
       [--dtype f32] [--op NAME[,NAME]] [--reps 7] [--warmup 3] [--min-time 0.02] [--scale N]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, Optional, Tuple

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "harness"))

import op_cases  # noqa: E402
import op_harness as H  # noqa: E402
from nexusgrad import _nexus as C  # noqa: E402


def synchronizer(device: str) -> Callable[[], None]:
    if device == "cpu":
        return lambda: None

    def sync() -> None:
        C.nx_stream_synchronize(None)
        torch.cuda.synchronize()
    return sync


def time_fn(fn: Callable[[], Any], sync: Callable[[], None], reps: int, warmup: int, min_time: float) -> float:
    """Median seconds per call: each repetition runs enough calls to last min_time."""
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, int(min_time / one))
    samples = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def copy_ceiling(device: str, sync: Callable[[], None], args: argparse.Namespace) -> Tuple[float, float]:
    """Bytes read + written per second by a 64 MiB clone: ours and torch's."""
    x = torch.rand(16 << 20, dtype=torch.float32)
    hx = H.to_nx(x, device)
    tx = x.to(device)
    with H.NoGrad():
        ours = time_fn(lambda: C.nx_clone(hx, None), sync, args.reps, args.warmup, args.min_time)
    theirs = time_fn(lambda: tx.clone(), sync, args.reps, args.warmup, args.min_time)
    return 2 * nbytes(x) / ours, 2 * nbytes(x) / theirs


def flops_ceiling(device: str, dtype: str, sync: Callable[[], None], args: argparse.Namespace) -> Tuple[float, float]:
    """FLOP/s of a large square matmul of the benchmarked dtype (f32 for integer dtypes): ours and
    torch's."""
    n = 4096 if device != "cpu" else 1024
    dt = op_cases.TORCH_DTYPES[dtype if dtype in op_cases.FLOAT_DTYPES else "f32"]
    a = torch.rand(n, n, dtype=torch.float32).to(dt)
    ha = H.to_nx(a, device)
    ta = a.to(device)
    with H.NoGrad():
        ours = time_fn(lambda: C.nx_matmul(ha, ha, None), sync, args.reps, args.warmup, args.min_time)
    try:
        theirs = time_fn(lambda: ta @ ta, sync, args.reps, args.warmup, args.min_time)
    except RuntimeError:  # a half matmul torch's CPU build lacks
        theirs = float("inf")
    return 2.0 * n ** 3 / ours, 2.0 * n ** 3 / theirs


def scaled(spec: Dict[str, Any], scale: int, fixed: Tuple[str, ...]) -> Dict[str, Any]:
    """The bench arguments with the leading dimension of tensors (two or more dimensions, or 1-d
    indices) multiplied by scale."""
    def one(a: Any) -> Any:
        if isinstance(a, (op_cases.Arg, op_cases.Idx)) and (len(a.shape) >= 2 or isinstance(a, op_cases.Idx)):
            return dataclasses.replace(a, shape=(a.shape[0] * scale,) + tuple(a.shape[1:]))
        return a
    return {k: v if k in fixed else [one(x) for x in v] if isinstance(v, list) else one(v) for k, v in spec.items()}


def bench_op(op: H.Op, case: op_cases.Case, dtype: str, device: str, sync: Callable[[], None],
             args: argparse.Namespace) -> Dict[str, Any]:
    spec = scaled(case.bench, args.scale, case.bench_fixed) if case.bench is not None else case.variants[0].args
    variant = op_cases.Variant("bench", dict(spec, **{o: None for o in op.optional if o not in spec}))
    mats = H.materialize(op, variant, dtype, H.seed_of(op.name, "bench", dtype))
    handles: Dict[str, Any] = {}
    for name, m in mats.items():
        if isinstance(m, H.In):
            handles[name] = m.to_nx(device)
        elif H.is_tensor_list(m):
            handles[name] = [x.to_nx(device) for x in m]
    torch_args: Dict[str, Any] = {}
    in_bytes = 0
    for a in op.args:
        m = mats[a.name]
        if isinstance(m, H.In):
            torch_args[a.name] = m.view.to(device)
            in_bytes += nbytes(m.view)
        elif H.is_tensor_list(m):
            torch_args[a.name] = [x.view.to(device) for x in m]
            in_bytes += sum(nbytes(x.view) for x in m)
        else:
            torch_args[a.name] = m

    def ours() -> Any:
        return H.call_op(op, mats, handles, case.mutates)

    with H.NoGrad():
        outs = ours()
        out_bytes = sum(C.nx_tensor_numel(h) * C.nx_dtype_size(C.nx_tensor_dtype(h)) for h in outs)
        t_ours = time_fn(ours, sync, args.reps, args.warmup, args.min_time)
    t_torch: Optional[float] = None
    note = "" if case.bench is not None else "small"
    try:
        with torch.no_grad():
            t_torch = time_fn(lambda: case.ref(**torch_args), sync, args.reps, args.warmup, args.min_time)
    except Exception as e:  # e.g. a half kernel torch's CPU build lacks
        note = (note + " " if note else "") + f"torch: {type(e).__name__}"
    res = {"op": op.name, "ours": t_ours, "torch": t_torch, "note": note}
    if case.bench_kind == "flops" and case.bench_flops:
        res["flops"] = case.bench_flops(**{k: (v.view if isinstance(v, H.In) else v) for k, v in mats.items()})
    elif op.kind != "view" or op.name == "reshape":  # views move no data (reshape's bench input copies)
        res["bytes"] = in_bytes + out_bytes
    return res


def fmt_time(t: Optional[float]) -> str:
    return "-" if t is None else f"{t * 1e6:10.1f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", default="f32", choices=op_cases.ALL_DTYPES)
    p.add_argument("--op", action="append", default=[], help="only these ops (repeat, or comma-separated)")
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-time", type=float, default=0.02, help="seconds per timed repetition (at least)")
    p.add_argument("--scale", type=int, help="multiply the bench inputs' leading dimension (default: 1 on the CPU, "
                   "16 on CUDA, where 4 MB inputs would time the launch rather than the memory)")
    args = p.parse_args()
    if args.scale is None:
        args.scale = 16 if args.device == "cuda" else 1
    if args.device == "cuda":
        if C.nx_cuda_device_count() == 0 or not torch.cuda.is_available():
            print("op_bench: --device cuda needs CUDA in both the engine and torch")
            return 1
        C.nx_cuda_set_tf32(False)
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_grad_enabled(False)
    ops = H.load_registry()
    wanted = [n for o in args.op for n in o.split(",") if n] or list(ops)
    sync = synchronizer(args.device)
    copy_ours, copy_torch = copy_ceiling(args.device, sync, args)
    ceiling_bw = max(copy_ours, copy_torch)
    mm_ours, mm_torch = flops_ceiling(args.device, args.dtype, sync, args)
    ceiling_fl = max(mm_ours, mm_torch)
    print(f"op_bench: {args.device}, {args.dtype}, scale {args.scale}; copy bandwidth ours {copy_ours / 1e9:.1f} GB/s, "
          f"torch {copy_torch / 1e9:.1f} GB/s; large matmul ours {mm_ours / 1e12:.2f} TFLOP/s, torch "
          f"{mm_torch / 1e12:.2f} TFLOP/s")
    print(f"{'op':<24}{'ours us':>10}{'torch us':>10}{'torch/ours':>11}  {'achieved':>14}  {'ceiling':>14}  note")
    for name in wanted:
        op, case = ops.get(name), op_cases.CASES.get(name)
        if op is None or case is None:
            print(f"{name:<24} (no {'op in ops.yaml' if op is None else 'case in op_cases.py'})")
            continue
        if args.dtype not in op.dtypes or args.device not in op.devices:
            continue
        try:
            r = bench_op(op, case, args.dtype, args.device, sync, args)
        except Exception as e:
            print(f"{name:<24} error: {type(e).__name__}: {e}")
            continue
        ratio = f"{r['torch'] / r['ours']:11.2f}" if r["torch"] else f"{'-':>11}"
        if "flops" in r:
            achieved = f"{r['flops'] / r['ours'] / 1e12:9.3f} TF/s"
            ceiling = f"{ceiling_fl / 1e12:9.3f} TF/s"
        elif "bytes" in r:
            achieved = f"{r['bytes'] / r['ours'] / 1e9:9.1f} GB/s"
            ceiling = f"{ceiling_bw / 1e9:9.1f} GB/s"
        else:
            achieved, ceiling = f"{'(view)':>14}", f"{'':>14}"
        print(f"{name:<24}{fmt_time(r['ours'])}{fmt_time(r['torch'])}{ratio}  {achieved}  {ceiling}  {r['note']}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
