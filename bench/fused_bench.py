#!/usr/bin/env python3
"""Runs bench/fused_bench (NexusGrad's fused RMSNorm, softmax cross-entropy and multi-tensor
AdamW through its C API) and PyTorch's eager equivalents on the same GPU, in one command, and
prints one table: our time, torch's time, torch/ours (> 1: we are faster), our bandwidth and its
fraction of the device-to-device copy measured in the same run. Usage:
    python3 bench/fused_bench.py BUILD_DIR/bench/fused_bench [--json OUT.json]
PyTorch's equivalents: RMSNorm as the eager sequence x * rsqrt(mean(x^2) + eps) * w (what a
model without a fused kernel runs; F.rms_norm where it exists is also timed), F.cross_entropy,
and torch.optim.AdamW with its default foreach implementation (fused=True timed as well)."""
import json
import subprocess
import sys

import torch
import torch.nn.functional as F

from cuda_bench import torch_time as _torch_time  # this script's folder is on sys.path


def torch_time(fn, warmup=3, iters=20):
    return _torch_time(fn, warmup, iters)


def rms_eager(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def gpt2_shapes():
    s = [(50257, 768), (1024, 768)]
    for _ in range(12):
        s += [(768,), (768,), (2304, 768), (2304,), (768, 768), (768,), (768,), (768,), (3072, 768), (3072,),
              (768, 3072), (768,)]
    return s + [(768,), (768,)]


def torch_results():
    out, extra = {}, {}
    for dt, tag in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        x = torch.randn(16384, 4096, device="cuda", dtype=dt)
        w = torch.randn(4096, device="cuda", dtype=dt)
        gy = torch.randn_like(x)
        out[f"rms_norm_{tag}"] = torch_time(lambda: rms_eager(x, w))
        xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)

        def fb():
            xl.grad = wl.grad = None
            rms_eager(xl, wl).backward(gy)
        out[f"rms_norm_fb_{tag}"] = torch_time(fb)
        if hasattr(F, "rms_norm"):
            extra[f"rms_norm_{tag}"] = ("F.rms_norm", torch_time(lambda: F.rms_norm(x, (4096,), w, 1e-6)))
        del x, gy, xl
        logits = torch.randn(8192, 50257, device="cuda", dtype=dt)
        t = torch.randint(0, 50257, (8192,), device="cuda")
        out[f"xent_{tag}"] = torch_time(lambda: F.cross_entropy(logits, t))
        ll = logits.clone().requires_grad_(True)

        def xfb():
            ll.grad = None
            F.cross_entropy(ll, t).backward()
        out[f"xent_fb_{tag}"] = torch_time(xfb)
        del logits, ll
        torch.cuda.empty_cache()
    params = [torch.randn(*s, device="cuda").requires_grad_(True) for s in gpt2_shapes()]
    for p in params:
        p.grad = torch.randn_like(p)
    for fused in (False, True):
        try:
            opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                    **({"fused": True} if fused else {"foreach": True}))
        except (TypeError, RuntimeError):
            continue
        tm = torch_time(opt.step)
        if fused:
            extra["adamw_124m"] = ("AdamW(fused=True)", tm)
        else:
            out["adamw_124m"] = tm
    return out, extra


def main():
    binary = sys.argv[1]
    proc = subprocess.run([binary], check=True, capture_output=True, text=True)
    ours = {}
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        ours[r["name"]] = r
    if not ours:
        print(proc.stderr.strip() or "fused_bench printed nothing")
        return
    theirs, extra = torch_results()
    copy_bw = ours["copy_d2d"]["bytes"] / ours["copy_d2d"]["seconds"]
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  copy {copy_bw / 1e9:.0f} GB/s")
    print(f"{'benchmark':16} {'ours':>10} {'torch':>10} {'torch/ours':>11} {'ours GB/s':>10} {'ours/copy':>10}")
    rows = []
    for name, r in ours.items():
        if name == "copy_d2d":
            continue
        t_ours, t_torch = r["seconds"], theirs.get(name)
        bw = r["bytes"] / t_ours
        speed = t_torch / t_ours if t_torch else float("nan")
        print(f"{name:16} {t_ours * 1e3:8.3f}ms {(t_torch or 0) * 1e3:8.3f}ms {speed:11.3f} {bw / 1e9:10.0f} "
              f"{bw / copy_bw:10.3f}")
        row = {"name": name, "ours_s": t_ours, "torch_s": t_torch, "speed_vs_torch": speed, "vs_copy": bw / copy_bw}
        if name in extra:
            label, t_alt = extra[name]
            print(f"{'':16} {label} {t_alt * 1e3:.3f}ms: {t_alt / t_ours:.3f}x ours")
            row["torch_alt"] = {"impl": label, "seconds": t_alt}
        rows.append(row)
    if len(sys.argv) > 3 and sys.argv[2] == "--json":
        with open(sys.argv[3], "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
