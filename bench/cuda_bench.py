#!/usr/bin/env python3
"""Runs bench/cuda_bench (NexusGrad through its C API) and the same work in PyTorch on the same
GPU, in one command, and prints one table with ratios. Usage:
    python3 bench/cuda_bench.py BUILD_DIR/bench/cuda_bench [--json OUT.json]
Bandwidth ops (f32, and bf16 / mixed bf16-f32 ones counted at each element's own size) are
compared with the f32 device-to-device copy of the same run (the memory ceiling);
GEMM with torch.matmul; launch overhead with torch's a + b on 16 floats."""
import json
import subprocess
import sys
import time

import torch


def torch_time(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def torch_results():
    out = {}
    n = 1 << 28
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    out["copy_d2d"] = torch_time(lambda: a.clone(), 2, 10)
    out["add"] = torch_time(lambda: a + b, 2, 10)
    out["add_relu"] = torch_time(lambda: torch.relu(a + b), 2, 10)
    out["softmax_rows4096"] = torch_time(lambda: torch.softmax(a.view(-1, 4096), 1), 2, 10)
    out["sum"] = torch_time(lambda: a.sum(), 2, 10)
    # half precision: the same names and element counts as cuda_bench.c's bf16 rows
    ah, bh = a.to(torch.bfloat16), b.to(torch.bfloat16)
    out["copy_bf16"] = torch_time(lambda: ah.clone(), 2, 10)
    out["add_bf16"] = torch_time(lambda: ah + bh, 2, 10)
    out["mul_bf16"] = torch_time(lambda: ah * bh, 2, 10)
    out["cast_f32_to_bf16"] = torch_time(lambda: a.to(torch.bfloat16), 2, 10)
    out["cast_bf16_to_f32"] = torch_time(lambda: ah.to(torch.float32), 2, 10)
    out["add_bf16_f32"] = torch_time(lambda: ah + b, 2, 10)  # type promotion: an f32 result
    del a, b, ah, bh
    for n in (4096, 8192):
        for mode in ("fp32", "tf32", "bf16"):
            torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
            dt = torch.bfloat16 if mode == "bf16" else torch.float32
            x = torch.randn(n, n, device="cuda").to(dt)
            y = torch.randn(n, n, device="cuda").to(dt)
            out[f"gemm_{mode}_{n}"] = torch_time(lambda: x @ y, 3, 5 if n == 8192 else 20)
    torch.backends.cuda.matmul.allow_tf32 = False
    s = torch.ones(16, device="cuda")
    out["tiny_add_16"] = torch_time(lambda: s + s, 100, 20000)
    return out


def main():
    binary = sys.argv[1]
    ours = {}
    proc = subprocess.run([binary], check=True, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        ours[r["name"]] = r
    theirs = torch_results()
    copy_bw = ours["copy_d2d"]["bytes"] / ours["copy_d2d"]["seconds"]
    rows = []
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print(f"{'benchmark':22} {'ours':>14} {'torch':>14} {'ours/torch':>11} {'ours/copy':>10}")
    for name, r in ours.items():
        t_ours, t_torch = r["seconds"], theirs[name]
        if r["flops"]:
            ours_s, torch_s = f"{r['flops'] / t_ours / 1e12:.1f} TFLOP/s", f"{r['flops'] / t_torch / 1e12:.1f} TFLOP/s"
            speed = t_torch / t_ours
            vs_copy = ""
        elif r["bytes"]:
            bw = r["bytes"] / t_ours
            ours_s, torch_s = f"{bw / 1e9:.0f} GB/s", f"{r['bytes'] / t_torch / 1e9:.0f} GB/s"
            speed = t_torch / t_ours
            vs_copy = f"{bw / copy_bw:.3f}"
        else:
            ours_s, torch_s = f"{t_ours * 1e6:.2f} us", f"{t_torch * 1e6:.2f} us"
            speed = t_torch / t_ours
            vs_copy = ""
        rows.append({"name": name, "ours_s": t_ours, "torch_s": t_torch, "speed_vs_torch": speed, "vs_copy": vs_copy})
        print(f"{name:22} {ours_s:>14} {torch_s:>14} {speed:>11.3f} {vs_copy:>10}")
    if len(sys.argv) > 3 and sys.argv[2] == "--json":
        with open(sys.argv[3], "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
