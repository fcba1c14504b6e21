#!/usr/bin/env python3
"""CPU kernels of NexusGrad against PyTorch's CPU kernels in the same process, same threads.

    PYTHONPATH=<build>/python /usr/bin/python3 bench/cpu_bench.py [--threads N]

GEMM is also timed against NumPy's matmul, i.e. OpenBLAS when libopenblas0-pthread is installed
(the BLAS peer the design names; Debian's torch 1.13 may itself run on reference BLAS). Sizes are large enough that the time is the kernel, not the Python call. Prints GFLOP/s (GEMM) or
GB/s (bandwidth-bound ops, bytes read + written once) and the ratio ours / torch (> 1: faster)."""
import argparse
import time

import numpy as np


def best(fn, repeat=5):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def numpy_blas():
    """The BLAS library NumPy's matmul calls (Debian: libblas.so.3, an alternative that
    libopenblas0-pthread provides once installed; scripts/deps.sh installs it)."""
    try:
        with open("/proc/self/maps") as maps:
            libs = {line.split()[-1] for line in maps if "blas" in line}
        return "openblas" if any("openblas" in lib for lib in libs) else "reference blas"
    except OSError:
        return "blas"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch
    import nexusgrad as ng
    torch.set_num_threads(args.threads)
    ng.set_num_threads(args.threads)
    print(f"threads {args.threads}, nexusgrad SIMD {ng.cpu_simd_level()}, torch {torch.__version__}")
    blas = numpy_blas()
    print(f"{'benchmark':26} {'ours':>14} {'torch':>14} {'ours/torch':>11} {'numpy (' + blas + ')':>22} {'ours/numpy':>11}")
    for n in (256, 512, 1024, 2048):
        a = np.random.rand(n, n).astype(np.float32)
        b = np.random.rand(n, n).astype(np.float32)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        na, nb = ng.Tensor.from_numpy(a), ng.Tensor.from_numpy(b)
        flops = 2.0 * n ** 3
        t_ours, t_torch = best(lambda: ng.matmul(na, nb)), best(lambda: torch.matmul(ta, tb))
        t_np = best(lambda: a @ b)
        print(f"{'matmul f32 ' + str(n):26} {flops / t_ours / 1e9:10.1f} GF/s {flops / t_torch / 1e9:10.1f} GF/s "
              f"{t_torch / t_ours:11.3f} {flops / t_np / 1e9:17.1f} GF/s {t_np / t_ours:11.3f}")
    n = 1 << 24
    x = np.random.rand(n).astype(np.float32)
    y = np.random.rand(n).astype(np.float32)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    nx_, ny = ng.Tensor.from_numpy(x), ng.Tensor.from_numpy(y)
    rows = torch.from_numpy(x.reshape(-1, 1024))
    nrows = ng.Tensor.from_numpy(x.reshape(-1, 1024))
    cases = [
        ("add 2^24", 12.0 * n, lambda: nx_ + ny, lambda: tx + ty),
        ("exp 2^24", 8.0 * n, lambda: ng.exp(nx_), lambda: torch.exp(tx)),
        ("sum 2^24", 4.0 * n, lambda: ng.sum(nx_), lambda: tx.sum()),
        ("softmax rows of 1024", 8.0 * n, lambda: ng.softmax(nrows, 1), lambda: torch.softmax(rows, 1)),
    ]
    for name, bytes_, ours, theirs in cases:
        t_ours, t_torch = best(ours), best(theirs)
        print(f"{name:26} {bytes_ / t_ours / 1e9:10.1f} GB/s {bytes_ / t_torch / 1e9:10.1f} GB/s {t_torch / t_ours:11.3f}")
    attention(ng, torch)


def attention(ng, torch):
    """Causal attention, f32, [1, 8, 1024, 64]: our flash attention (no score matrix) against
    torch's softmax(q k^T / sqrt(d)) v with the mask (torch 1.13 has no fused CPU attention)."""
    b, h, t, d = 1, 8, 1024, 64
    qkv = [np.random.randn(b, h, t, d).astype(np.float32) for _ in range(3)]
    ours_in = [ng.Tensor.from_numpy(x).requires_grad_() for x in qkv]
    torch_in = [torch.from_numpy(x).requires_grad_() for x in qkv]
    mask = torch.ones(t, t, dtype=torch.bool).triu(1)

    def torch_attn():
        s = torch_in[0] @ torch_in[1].transpose(-1, -2) / d ** 0.5
        return torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ torch_in[2]

    def ours_fb():
        ng.functional.flash_attention(*ours_in, causal=True).sum().backward()

    def torch_fb():
        torch_attn().sum().backward()

    flops = 4.0 * b * h * t * t * d / 2  # causal: half the scores
    for name, f, ours, theirs in [
            ("attention fwd causal", flops, lambda: ng.functional.flash_attention(*ours_in, causal=True), torch_attn),
            ("attention fwd+bwd causal", 3.5 * flops, ours_fb, torch_fb)]:
        with torch.no_grad() if "bwd" not in name else torch.enable_grad():
            t_ours, t_torch = best(ours, 3), best(theirs, 3)
        print(f"{name:26} {f / t_ours / 1e9:10.1f} GF/s {f / t_torch / 1e9:10.1f} GF/s {t_torch / t_ours:11.3f}")


if __name__ == "__main__":
    main()
