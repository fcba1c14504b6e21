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
    ap.add_argument("--part", choices=("all", "model-gemms"), default="all",
                    help="model-gemms: only the CPU GPT step's GEMM shapes")
    args = ap.parse_args()
    import torch
    import nexusgrad as ng
    torch.set_num_threads(args.threads)
    ng.set_num_threads(args.threads)
    print(f"threads {args.threads}, nexusgrad SIMD {ng.cpu_simd_level()}, torch {torch.__version__}")
    blas = numpy_blas()
    print(f"{'benchmark':26} {'ours':>14} {'torch':>14} {'ours/torch':>11} {'numpy (' + blas + ')':>22} {'ours/numpy':>11}")
    if args.part == "model-gemms":
        model_gemms(ng, torch)
        return
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
    model_gemms(ng, torch)
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
    half_precision(ng, torch)


def model_gemms(ng, torch):
    """The GEMMs of the CPU GPT's training step (the main job's "cpu" size: 512 tokens, width 128,
    MLP 512, vocab 4096): forward x W^T (B transposed), dX = dY W (both row-major) and
    dW = dY^T X (A transposed), as the step's matmuls see them (transposed views, not copies)."""
    shapes = [(512, 128, 128), (512, 512, 128), (512, 128, 512), (512, 4096, 128), (512, 128, 4096),
              (4096, 128, 512), (128, 128, 512)]
    for m, n, k in shapes:
        for layout in ("A B", "A B^T", "A^T B"):
            a = np.random.rand(k, m).astype(np.float32).T if layout == "A^T B" else np.random.rand(m, k).astype(np.float32)
            b = np.random.rand(n, k).astype(np.float32).T if layout == "A B^T" else np.random.rand(k, n).astype(np.float32)
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            na = ng.transpose(ng.Tensor.from_numpy(np.ascontiguousarray(a.T)), 0, 1) if layout == "A^T B" else \
                ng.Tensor.from_numpy(a)
            nb = ng.transpose(ng.Tensor.from_numpy(np.ascontiguousarray(b.T)), 0, 1) if layout == "A B^T" else \
                ng.Tensor.from_numpy(b)
            flops = 2.0 * m * n * k
            t_ours, t_torch, t_np = (best(lambda: ng.matmul(na, nb), 9), best(lambda: torch.matmul(ta, tb), 9),
                                     best(lambda: a @ b, 9))
            name = f"{m}x{n}x{k} {layout}"
            print(f"{name:26} {flops / t_ours / 1e9:10.1f} GF/s {flops / t_torch / 1e9:10.1f} GF/s "
                  f"{t_torch / t_ours:11.3f} {flops / t_np / 1e9:17.1f} GF/s {t_np / t_ours:11.3f}")


def half_precision(ng, torch):
    """f16 and bf16 on the CPU against ours in f32 in the same run (the peer: half precision should
    cost what f32 does, with no f32 copies of the inputs), and torch's bf16 where torch 1.13 has it.
    Prints milliseconds and the ratio ours f32 / ours half (> 1: half is faster)."""
    print(f"{'half precision':26} {'ours f32':>11} {'ours bf16':>11} {'ours f16':>11} {'f32/bf16':>9} {'f32/f16':>9} {'torch bf16':>11}")
    n = 1024
    a = np.random.rand(n, n).astype(np.float32)
    b = np.random.rand(n, n).astype(np.float32)
    m = 1 << 22
    x = np.random.rand(m).astype(np.float32)
    y = np.random.rand(m).astype(np.float32)
    b_, h, t, d = 1, 8, 1024, 64
    qkv = [np.random.randn(b_, h, t, d).astype(np.float32) for _ in range(3)]

    def ours(dtype):
        mats = [ng.Tensor.from_numpy(v).to(dtype=dtype) for v in (a, b)]
        vecs = [ng.Tensor.from_numpy(v).to(dtype=dtype) for v in (x, y)]
        att = [ng.Tensor.from_numpy(v).to(dtype=dtype) for v in qkv]
        f32 = ng.Tensor.from_numpy(x)
        return {
            "matmul 1024^3": lambda: ng.matmul(*mats),
            "add 2^22": lambda: vecs[0] + vecs[1],
            "gelu 2^22": lambda: ng.functional.gelu(vecs[0]),
            "cast f32 -> half 2^22": lambda: f32.to(dtype=dtype),
            "cast half -> f32 2^22": lambda: vecs[0].to(dtype=ng.float32),
            "attention fwd causal": lambda: ng.functional.flash_attention(*att, causal=True),
        }

    def theirs():
        mats = [torch.from_numpy(v).bfloat16() for v in (a, b)]
        vecs = [torch.from_numpy(v).bfloat16() for v in (x, y)]
        f32 = torch.from_numpy(x)
        return {"matmul 1024^3": lambda: mats[0] @ mats[1], "add 2^22": lambda: vecs[0] + vecs[1],
                "gelu 2^22": lambda: torch.nn.functional.gelu(vecs[0]), "cast f32 -> half 2^22": lambda: f32.bfloat16(),
                "cast half -> f32 2^22": lambda: vecs[0].float()}

    runs = {dt: ours(dt) for dt in (ng.float32, ng.bfloat16, ng.float16)}
    peer = theirs()
    for name in runs[ng.float32]:
        ms = {dt: 1e3 * best(runs[dt][name], 5) for dt in runs}
        tb = f"{1e3 * best(peer[name], 5):8.2f} ms" if name in peer else f"{'-':>11}"
        if name.startswith("cast"):  # no f32 peer: a cast to f32 of an f32 tensor is no work
            print(f"{name:26} {'-':>11} {ms[ng.bfloat16]:8.2f} ms {ms[ng.float16]:8.2f} ms {'-':>9} {'-':>9} {tb}")
            continue
        print(f"{name:26} {ms[ng.float32]:8.2f} ms {ms[ng.bfloat16]:8.2f} ms {ms[ng.float16]:8.2f} ms "
              f"{ms[ng.float32] / ms[ng.bfloat16]:9.2f} {ms[ng.float32] / ms[ng.float16]:9.2f} {tb}")


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
