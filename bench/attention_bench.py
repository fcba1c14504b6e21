#!/usr/bin/env python3
"""Flash attention, NexusGrad against torch's scaled_dot_product_attention, in one process.

What is measured (the performance method of ../shared/DESIGN.md):
  grid    ours (nexusgrad.scaled_dot_product_attention, through the Python module: the public API
          path with autograd and allocation) and torch SDPA with the FLASH_ATTENTION and the
          CUDNN_ATTENTION backends (torch.nn.attention.sdpa_kernel), one after the other in this
          process on the same tensors: q, k, v and the upstream gradient are made once per shape by
          torch (bf16, randn) and shared with ours zero-copy by DLPack; ours and torch each get
          their own leaf tensors (over that same memory) and their own .grad. Shapes: batch x seq =
          16k tokens, hidden 2048, head_dim 64 and 128, seq 512 ... 16384, causal and not.
          Forward: the output alone (inputs require grad, so the graph is recorded as in training).
          Forward+backward: forward then .backward(random gradient), with the q/k/v gradients
          ACCUMULATING across iterations (never zeroed between them, as over micro-batches), so the
          accumulation into an existing .grad is part of the time. Each case is warmed up, then
          timed with time.perf_counter around device-wide synchronizes, over enough iterations to
          fill about --target seconds (at most 200 calls). --rounds N times every case N times,
          ours and the peers alternating round by round, and reports the median round: the clock
          falls over a run of calls, and a single pass times ours first. TFLOP/s counts
          4*b*h*t*t*d for the forward (halved when causal) and 3.5x that for forward+backward
          (backward = 2.5x forward); ratios are ours over each torch backend. A column gives
          max |ours - flash| of the forward output as a sanity check. If ours raises for a shape,
          its error is printed on that row and the grid goes on.
  decode  build-gpu/bench/attention_bench decode (C API): batch 8, 32 heads, head_dim 128, one
          query against an 8k random KV cache, against a device copy of the same bytes; then torch
          SDPA (its default choice, and each backend that takes the shape) on a bf16 cache of the
          same shape in this process, timed with CUDA events: GB/s of K and V read, ours over each.
  memory  build-gpu/bench/attention_bench memory (C API, own process): peak device memory of
          forward+backward at 4k, 16k, 64k tokens.

usage (on the GPU machine, after scripts/gpu_run.sh build and the Python module in build-gpu-py):
  PYTHONPATH=build-gpu-py/python python3 bench/attention_bench.py [grid|decode|memory|all]
      [--nexus-bin build-gpu/bench/attention_bench] [--seqs 1024,4096] [--dims 128] [--target S]
      [--rounds N] [--json FILE]
  python3 bench/attention_bench.py --smoke-cpu   (tiny CPU shapes: checks the script's API calls
      where no GPU is present; torch's math attention stands in for the SDPA backends)
"""
import argparse
import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

try:  # torch >= 2.3; absent from old CPU-only torch used for --smoke-cpu
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError:
    SDPBackend = sdpa_kernel = None

WHATS = ("grid", "decode", "memory", "all")
TOKENS, HIDDEN = 16384, 2048
SEQS, DIMS = (512, 1024, 2048, 4096, 8192, 16384), (64, 128)


# ---------------------------------------------------------------- timing
def make_sync(device):
    import nexusgrad as ng

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()  # cudaDeviceSynchronize: every stream, ours included
            ng.cuda.synchronize()
    return sync


def timed(fn, sync, target_s, warmup=2, max_iters=200):
    """Seconds per call of fn: warm-up calls, one call to size the run, then enough calls to fill
    about target_s, between synchronizes."""
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    est = time.perf_counter() - t0
    iters = int(max(1, min(max_iters, target_s / max(est, 1e-7))))
    sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync()
    return (time.perf_counter() - t0) / iters


# ---------------------------------------------------------------- the peers
def math_sdpa(q, k, v, is_causal=False):
    """softmax(q k^T / sqrt(d)) v in f32 (the --smoke-cpu stand-in where torch has no SDPA)."""
    s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if is_causal:
        t = q.shape[-2]
        s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)


def peers(smoke):
    """[(label, context-manager factory, attention function)]: the torch implementations beside ours."""
    if not smoke:
        if sdpa_kernel is None:
            sys.exit("attention_bench: this torch has no torch.nn.attention.sdpa_kernel (torch >= 2.3 needed)")
        sdpa = F.scaled_dot_product_attention
        return [("flash", lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION), sdpa),
                ("cudnn", lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION), sdpa)]
    fn = getattr(F, "scaled_dot_product_attention", math_sdpa)
    return [("torch", contextlib.nullcontext, fn)]


# ---------------------------------------------------------------- grid
def one_shape(ng, b, h, t, d, causal, device, peer_list, sync, target_s, rounds=1):
    """{'ours': (fwd_s, fwdbwd_s) or an exception, label: (fwd_s, fwdbwd_s) or exception..., 'err': float,
    'rounds': {key: ([fwd_s...], [fwdbwd_s...])}}. With rounds > 1 every implementation is timed once per
    round, ours and the peers alternating (so a clock that drifts over the run drifts under all of
    them), and the median round is reported."""
    dt = torch.bfloat16
    q0, k0, v0, g0 = (torch.randn(b, h, t, d, device=device, dtype=dt) for _ in range(4))
    res = {}
    # ours: leaves over the same memory (DLPack, zero-copy), its own .grad; torch: its own leaves over
    # the same memory, its own .grad
    try:
        qn, kn, vn = (ng.from_dlpack(x).requires_grad_() for x in (q0, k0, v0))
        gn = ng.from_dlpack(g0)
    except Exception as e:  # noqa: BLE001
        res["ours"] = e
    qt, kt, vt = (x.detach().requires_grad_() for x in (q0, k0, v0))

    def ours_fresh_grads():
        for x in (qn, kn, vn):
            x.zero_grad()  # start without a .grad; warm-up makes it, the timed calls add to it

    def torch_fresh_grads():
        for x in (qt, kt, vt):
            x.grad = None
    # key -> (context factory, forward, forward+backward, start the gradients afresh)
    cases = {"ours": (contextlib.nullcontext,
                      lambda: ng.scaled_dot_product_attention(qn, kn, vn, is_causal=causal),
                      lambda: ng.scaled_dot_product_attention(qn, kn, vn, is_causal=causal).backward(gn),
                      ours_fresh_grads)}
    for label, ctx, fn in peer_list:
        cases[label] = (ctx, lambda fn=fn: fn(qt, kt, vt, is_causal=causal),
                        lambda fn=fn: fn(qt, kt, vt, is_causal=causal).backward(g0), torch_fresh_grads)
    times = {key: ([], []) for key in cases}
    for r in range(rounds):
        for key, (ctx, fwd, both, fresh_grads) in cases.items():
            if isinstance(res.get(key), Exception):
                continue
            try:
                with ctx():
                    times[key][0].append(timed(fwd, sync, target_s))
                    if r == 0:
                        fresh_grads()
                    times[key][1].append(timed(both, sync, target_s))
            except Exception as e:  # noqa: BLE001  (report it on the row and go on)
                res[key] = e
    for key in cases:
        if not isinstance(res.get(key), Exception):
            res[key] = (statistics.median(times[key][0]), statistics.median(times[key][1]))
    res["rounds"] = times
    # the forward's output against the first peer that ran
    try:
        if isinstance(res["ours"], tuple):
            ours_out = torch.from_dlpack(ng.scaled_dot_product_attention(qn, kn, vn, is_causal=causal))
            sync()
            for label, ctx, fn in peer_list:
                if isinstance(res.get(label), tuple):
                    with ctx(), torch.no_grad():
                        ref = fn(q0, k0, v0, is_causal=causal)
                    res["err"] = (ours_out.float() - ref.float()).abs().max().item()
                    break
    except Exception as e:  # noqa: BLE001
        res["ours"] = e
    return res


def fmt_err(e):
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:160]


def grid(args, smoke):
    try:
        import nexusgrad as ng
    except ImportError as e:
        sys.exit(f"attention_bench: cannot import nexusgrad ({e}); run with PYTHONPATH=build-gpu-py/python "
                 "(scripts/gpu_run.sh builds it)")
    device = "cpu" if smoke else "cuda"
    if smoke:
        tokens, hidden, seqs, dims = 256, 128, (64, 128), (32, 64)
    else:
        tokens, hidden, seqs, dims = TOKENS, HIDDEN, SEQS, DIMS
    if args.seqs:
        seqs = tuple(int(s) for s in args.seqs.split(","))
    if args.dims:
        dims = tuple(int(s) for s in args.dims.split(","))
    peer_list = peers(smoke)
    sync = make_sync(device)
    labels = [p[0] for p in peer_list]
    print(f"grid: bf16, batch x seq = {tokens} tokens, hidden {hidden}; TFLOP/s (fwd+bwd counts 3.5x the "
          f"forward FLOPs); gradients accumulate across iterations; random inputs and upstream gradient, "
          f"the same memory for ours and torch; err = max |ours - {labels[0]}| of the forward output")
    half = lambda tag: (f"{'ours ' + tag:>9} " + " ".join(f"{lb:>7}" for lb in labels) + " "
                        + " ".join(f"{'r/' + lb:>8}" for lb in labels))
    print(f"{'shape':24} {half('fwd')} | {half('f+b')} | {'err':>7}")
    rows = []
    for d in dims:
        for causal in (False, True):
            for t in seqs:
                h, b = hidden // d, max(1, tokens // t)
                flops = 4.0 * b * h * t * t * d / (2.0 if causal else 1.0)
                name = f"attn_d{d}_s{t}_{'causal' if causal else 'full'}"
                res = one_shape(ng, b, h, t, d, causal, device, peer_list, sync, args.target, args.rounds)
                row = {"name": name, "batch": b, "heads": h, "seq": t, "dim": d, "causal": int(causal),
                       "flops": flops}

                def tf(key, i, mult):
                    r = res.get(key)
                    return mult * flops / r[i] / 1e12 if isinstance(r, tuple) else float("nan")
                cells = []
                for i, mult, tag in ((0, 1.0, "fwd"), (1, 3.5, "fwdbwd")):
                    ours = tf("ours", i, mult)
                    theirs = [tf(lb, i, mult) for lb in labels]
                    row[f"ours_{tag}_tflops"] = ours
                    for lb, x in zip(labels, theirs):
                        row[f"{lb}_{tag}_tflops"] = x
                    cells.append(f"{ours:9.1f} " + " ".join(f"{x:7.1f}" for x in theirs) + " "
                                 + " ".join(f"{ours / x if x == x and x > 0 else float('nan'):8.3f}" for x in theirs))
                err = res.get("err", float("nan"))
                row["err"] = err
                if args.rounds > 1:  # every round's seconds, for the spread
                    row["rounds_s"] = {key: {"fwd": fw, "fwdbwd": fb} for key, (fw, fb) in res["rounds"].items()}
                line = f"{name:24} {cells[0]} | {cells[1]} | {err:7.1e}"
                for key in ["ours"] + labels:
                    if isinstance(res.get(key), Exception):
                        row[f"{key}_error"] = fmt_err(res[key])
                        line += f"  [{key} failed: {fmt_err(res[key])}]"
                print(line, flush=True)
                rows.append(row)
    return rows


# ---------------------------------------------------------------- decode, memory (the C binary)
def c_bench(binary, what):
    if not binary or not os.path.exists(binary):
        print(f"{what}: skipped, no C binary at {binary!r} (build target attention_bench, or pass --nexus-bin)")
        return []
    proc = subprocess.run([binary, what], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{what}: {binary} failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
        return []
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for r in list(rows):  # a copy: the torch rows appended below are not ours to print
        if r["name"].startswith("memory"):
            print(f"memory seq {r['seq']:>6}: inputs {r['inputs_bytes'] / 2**20:8.1f} MiB, peak fwd+bwd "
                  f"{r['peak_bytes'] / 2**20:8.1f} MiB (a materialized f32 score matrix would be "
                  f"{r['scores_matrix_bytes_if_materialized'] / 2**20:10.1f} MiB)")
        elif r["name"].startswith("decode8_"):
            bw = r["bytes"] / r["seconds"]
            print(f"decode 8-bit cache ({r['name'].split('_')[1]}, per-row scales): {r['seconds'] * 1e6:.1f} us, "
                  f"{bw / 1e9:.0f} GB/s, {r['bf16_seconds'] / r['seconds']:.3f}x our bf16 decode in tokens/s; "
                  f"output error against the bf16 decode {r['error_vs_bf16']:.2e} (max |diff| / max |out|)")
        elif r["name"].startswith("decode"):
            bw = r["bytes"] / r["seconds"]
            print(f"decode b8 h32 d128 cache 8k: {r['seconds'] * 1e6:.1f} us, {bw / 1e9:.0f} GB/s, "
                  f"{bw / r['copy_bytes_per_s']:.3f} of copy bandwidth ({r['copy_bytes_per_s'] / 1e9:.0f} GB/s)")
    for r in [r for r in rows if r["name"].startswith("decode_b8")]:
        sdpa = sdpa_decode(r["seconds"], r["bytes"])
        rows += sdpa
        # the 8-bit cache against SDPA's bf16 decode: tokens/s at the same batch and context
        for r8 in [x for x in rows if x["name"].startswith("decode8_")]:
            ratios = ", ".join(f"{s['name'][len('decode_sdpa_'):]} {s['seconds'] / r8['seconds']:.3f}x" for s in sdpa)
            print(f"  8-bit cache {r8['name'].split('_')[1]} against torch SDPA's bf16 decode, tokens/s: {ratios}")
            r8["over_sdpa"] = {s["name"]: s["seconds"] / r8["seconds"] for s in sdpa}
    sys.stdout.flush()
    return rows


def sdpa_decode(ours_s, nbytes, iters=50):
    """torch SDPA on the decode shape of attention_bench decode (one query, 8k bf16 cache)."""
    q = torch.randn(8, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(8, 32, 8192, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    rows = []
    choices = [("default", contextlib.nullcontext)]
    if sdpa_kernel is not None:
        choices += [(name, lambda b=b: sdpa_kernel(b)) for name, b in
                    (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                     ("cudnn", SDPBackend.CUDNN_ATTENTION))]
    for name, ctx in choices:
        try:
            with ctx():
                for _ in range(3):
                    F.scaled_dot_product_attention(q, k, v)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    F.scaled_dot_product_attention(q, k, v)
                end.record()
                torch.cuda.synchronize()
        except RuntimeError as e:  # a backend that does not take this shape
            print(f"  torch SDPA {name}: not run ({str(e).splitlines()[0][:80]})")
            continue
        t = start.elapsed_time(end) / 1e3 / iters
        print(f"  torch SDPA {name}: {t * 1e6:.1f} us, {nbytes / t / 1e9:.0f} GB/s; ours / this {t / ours_s:.3f}")
        rows.append({"name": f"decode_sdpa_{name}", "seconds": t, "bytes": nbytes, "ours_over_this": t / ours_s})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="*", help="grid, decode, memory or all (default all); a path here is taken "
                    "as --nexus-bin (the old command line)")
    ap.add_argument("--nexus-bin", default="build-gpu/bench/attention_bench",
                    help="the C benchmark for decode and memory (default %(default)s)")
    ap.add_argument("--seqs", help="comma-separated sequence lengths for the grid (default all)")
    ap.add_argument("--dims", help="comma-separated head dims for the grid (default 64,128)")
    ap.add_argument("--target", type=float, default=0.25, help="seconds of timed calls per measurement")
    ap.add_argument("--rounds", type=int, default=1,
                    help="grid: time ours and each peer this many times, alternating, and report the median "
                    "(default 1: each once, ours first)")
    ap.add_argument("--json", help="also write every row to this file")
    ap.add_argument("--smoke-cpu", action="store_true", help="tiny CPU grid only, to check the script")
    args = ap.parse_args()
    what = "all"
    for w in args.what:
        if w in WHATS:
            what = w
        else:
            args.nexus_bin = w
    smoke = args.smoke_cpu
    if smoke:
        args.target = min(args.target, 0.02)
        print(f"smoke (CPU): torch {torch.__version__}")
    else:
        if not torch.cuda.is_available():
            sys.exit("attention_bench: no CUDA device (use --smoke-cpu to check the script on CPU)")
        print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    rows = []
    if not smoke and what in ("all", "memory"):
        rows += c_bench(args.nexus_bin, "memory")
    if not smoke and what in ("all", "decode"):
        rows += c_bench(args.nexus_bin, "decode")
    if smoke or what in ("all", "grid"):
        rows += grid(args, smoke)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
