"""Where a GPT-2 124M training step spends its GPU time: NexusGrad's step (through the Python
module, the same model as bench/train_gpt2.c) and torch's (bench/train_gpt2.py's model) under
torch.profiler, which records every kernel of the process through CUPTI, ours included. Prints,
for each, the kernels grouped by name with their total time per step, and the step's wall time
against the sum of its kernel times (the difference is host overhead and idle GPU).

usage: PYTHONPATH=build-gpu-py/python python3 bench/gpt2_profile.py [f32|bf16] [batch=8] [top=25]
"""
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_gpt2 as twin  # noqa: E402
import nexusgrad as ng  # noqa: E402

STEPS = 5


def nexus_step_fn(mode, batch, seq=1024):
    ng.manual_seed(1)
    ng.cuda.set_tf32(True)
    model = ng.nn.GPT(vocab=twin.VOCAB, context=twin.CONTEXT, dim=twin.DIM, layers=twin.LAYERS, heads=twin.HEADS,
                      tie_embeddings=True, activation="gelu_tanh", device="cuda")
    opt = ng.nn.AdamW(model, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    data = torch.randint(0, twin.VOCAB, (batch, seq + 1), device="cuda")
    x = ng.from_dlpack(data[:, :-1].contiguous())
    y = ng.from_dlpack(data[:, 1:].reshape(-1).contiguous())

    def step():
        with ng.autocast("cuda", dtype=ng.bfloat16, enabled=mode == "bf16"):
            loss = ng.cross_entropy(ng.reshape(model(x), batch * seq, twin.VOCAB), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def torch_step_fn(mode, batch, seq=1024):
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = twin.GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    data = torch.randint(0, twin.VOCAB, (batch, seq + 1), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
            loss = F.cross_entropy(model(data[:, :-1]).view(-1, twin.VOCAB), data[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def report(name, step, top):
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step()
    torch.cuda.synchronize()
    wall_ms = 1e3 * (time.perf_counter() - t0) / STEPS
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type.name == "CUDA":
            k = kernels.setdefault(e.name, [0.0, 0])
            k[0] += e.device_time / 1e3 / STEPS  # ms per step
            k[1] += 1
    total = sum(v[0] for v in kernels.values())
    print(f"\n== {name}: wall {wall_ms:.1f} ms/step (unprofiled), kernels {total:.1f} ms/step, "
          f"{sum(v[1] for v in kernels.values()) // STEPS} launches/step")
    for kname, (ms, n) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"{ms:8.2f} ms {100 * ms / total:5.1f}% {n // STEPS:5d}x  {kname[:110]}")
    sys.stdout.flush()


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "f32"
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    report(f"nexus {mode} batch {batch}", nexus_step_fn(mode, batch), top)
    torch.cuda.empty_cache()
    report(f"torch eager {mode} batch {batch}", torch_step_fn(mode, batch), top)


if __name__ == "__main__":
    main()
