"""The FP8 forward's accuracy beside bf16's (issue 18, item 4): nexusgrad.flash_attention_fp8 on
e4m3 inputs with per-row (--scales row, the default) or per-head (--scales head: the tensor-core
kernel's case on an H100/H200 at head_dim 128) q/k scales and per-head v scales (nx_quantize_8bit), and
nexusgrad.flash_attention on the same inputs rounded to bf16, each against torch's f64 softmax
attention. Two errors per row of the table, max |out - ref| / max |ref|:
  kernel: ref computed from the inputs the kernel was given (the dequantized e4m3 values; the
          bf16 values), so it isolates the attention's own arithmetic (for FP8, the e4m3 P);
  total:  ref computed from the original f32 inputs, so it adds the inputs' rounding.
Random normal q, k, v (batch 1, 2 heads); bf16 output for both.
  usage: PYTHONPATH=build-cpu/python /usr/bin/python3 bench/attention_fp8_accuracy.py [--device cuda]
         [--shapes 64x1024,128x1024,...] [--scales row|head]"""
import argparse

import numpy as np
import torch

import nexusgrad as ng


def reference(q, k, v, causal):
    """softmax(q k^T / sqrt(d)) v in f64 (torch), query i at position tk - tq + i."""
    tq, tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scores = q.double() @ k.double().transpose(-1, -2) / d ** 0.5
    if causal:
        mask = torch.arange(tk)[None, :] > (tk - tq + torch.arange(tq))[:, None]
        scores = scores.masked_fill(mask, float("-inf"))
    return (torch.softmax(scores, -1) @ v.double()).numpy()


def rel_err(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


def host(t):
    return t.to("cpu").to(dtype=ng.float32).numpy().astype(np.float64)


def dequantized(codes, scale):
    s = host(scale)
    return torch.from_numpy(host(codes) * s.reshape(s.shape + (1,) * (4 - s.ndim)))


def measure(d, seq, causal, device, qk_keep):
    torch.manual_seed(0)
    x = {n: torch.randn(1, 2, seq, d) for n in "qkv"}
    codes, scales, values = {}, {}, {}
    for n, keep in (("q", qk_keep), ("k", qk_keep), ("v", 2)):
        codes[n], scales[n] = ng.quantize_8bit(ng.tensor(x[n].numpy(), device=device), ng.float8_e4m3fn, keep)
        values[n] = dequantized(codes[n], scales[n])
    out8 = host(ng.flash_attention_fp8(codes["q"], scales["q"], codes["k"], scales["k"], codes["v"], scales["v"],
                                       causal=causal, out_dtype="bfloat16"))
    half = {n: ng.tensor(x[n].numpy(), device=device).to(dtype=ng.bfloat16) for n in "qkv"}
    with ng.no_grad():
        out16 = host(ng.flash_attention(half["q"], half["k"], half["v"], causal=causal))
    exact = reference(x["q"], x["k"], x["v"], causal)
    as_bf16 = {n: torch.from_numpy(host(half[n])) for n in "qkv"}
    return {"fp8_kernel": rel_err(out8, reference(values["q"], values["k"], values["v"], causal)),
            "fp8_total": rel_err(out8, exact),
            "bf16_kernel": rel_err(out16, reference(as_bf16["q"], as_bf16["k"], as_bf16["v"], causal)),
            "bf16_total": rel_err(out16, exact)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shapes", default="64x1024,128x1024,64x4096,128x4096", help="DxSEQ,...")
    ap.add_argument("--scales", choices=("row", "head"), default="row", help="q and k scale granularity")
    args = ap.parse_args()
    qk_keep = 3 if args.scales == "row" else 2
    print(f"device {args.device}; batch 1, 2 heads, random normal inputs, q/k scales per {args.scales}; "
          "max |out - ref| / max |ref|")
    print(f"{'shape':24} {'fp8 kernel':>11} {'bf16 kernel':>12} {'fp8 total':>10} {'bf16 total':>11} {'fp8/bf16 total':>15}")
    for shape in args.shapes.split(","):
        d, seq = (int(s) for s in shape.split("x"))
        for causal in (False, True):
            r = measure(d, seq, causal, args.device, qk_keep)
            name = f"d{d}_s{seq}_{'causal' if causal else 'full'}"
            print(f"{name:24} {r['fp8_kernel']:11.2e} {r['bf16_kernel']:12.2e} {r['fp8_total']:10.2e} "
                  f"{r['bf16_total']:11.2e} {r['fp8_total'] / r['bf16_total']:15.1f}", flush=True)


if __name__ == "__main__":
    main()
