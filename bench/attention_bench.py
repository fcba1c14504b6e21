#!/usr/bin/env python3
"""Runs bench/attention_bench (NexusGrad's flash attention through the C API) and torch's
scaled_dot_product_attention (flash and cuDNN backends) on the same GPU in one command, and
prints TFLOP/s and ratios. Usage: python3 bench/attention_bench.py BUILD/bench/attention_bench [what]"""
import json
import subprocess
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
import torch.nn.functional as F


def timed(fn, iters):
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def sdpa(b, h, t, d, causal, backend):
    q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.ones(b, h, t, d, device="cuda", dtype=torch.bfloat16)
    with sdpa_kernel(backend):
        fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), 5)
        both = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(g), 3)
    return fwd, both


def main():
    what = sys.argv[2] if len(sys.argv) > 2 else "all"
    proc = subprocess.run([sys.argv[1], what], check=True, capture_output=True, text=True)
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    for r in rows:
        if r["name"].startswith("memory"):
            print(f"memory seq {r['seq']:>6}: inputs {r['inputs_bytes'] / 2**20:8.1f} MiB, peak fwd+bwd "
                  f"{r['peak_bytes'] / 2**20:8.1f} MiB (a materialized f32 score matrix would be "
                  f"{r['scores_matrix_bytes_if_materialized'] / 2**20:10.1f} MiB)")
        elif r["name"].startswith("decode"):
            bw = r["bytes"] / r["seconds"]
            print(f"decode b8 h32 d128 cache 8k: {r['seconds'] * 1e6:.1f} us, {bw / 1e9:.0f} GB/s, "
                  f"{bw / r['copy_bytes_per_s']:.3f} of copy bandwidth ({r['copy_bytes_per_s'] / 1e9:.0f} GB/s)")
    header = f"{'shape':28} {'ours fwd':>9} {'flash':>7} {'cudnn':>7} {'r/flash':>8} {'r/cudnn':>8} | " \
             f"{'ours f+b':>9} {'flash':>7} {'cudnn':>7} {'r/flash':>8} {'r/cudnn':>8}"
    grid = [r for r in rows if r["name"].startswith("attn")]
    if grid:
        print("TFLOP/s, bf16; fwd+bwd counts 3.5x the forward FLOPs")
        print(header)
    for r in grid:
        f = r["flops"]
        flash = sdpa(r["batch"], r["heads"], r["seq"], r["dim"], bool(r["causal"]), SDPBackend.FLASH_ATTENTION)
        cudnn = sdpa(r["batch"], r["heads"], r["seq"], r["dim"], bool(r["causal"]), SDPBackend.CUDNN_ATTENTION)
        ours = (f / r["fwd_s"] / 1e12, 3.5 * f / r["fwdbwd_s"] / 1e12)
        fl = (f / flash[0] / 1e12, 3.5 * f / flash[1] / 1e12)
        cu = (f / cudnn[0] / 1e12, 3.5 * f / cudnn[1] / 1e12)
        print(f"{r['name']:28} {ours[0]:9.1f} {fl[0]:7.1f} {cu[0]:7.1f} {ours[0] / fl[0]:8.3f} {ours[0] / cu[0]:8.3f} | "
              f"{ours[1]:9.1f} {fl[1]:7.1f} {cu[1]:7.1f} {ours[1] / fl[1]:8.3f} {ours[1] / cu[1]:8.3f}", flush=True)


if __name__ == "__main__":
    main()
