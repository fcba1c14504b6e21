"""The PyTorch twin of bench/plan_bench.c's GPT sizes ("bench": 6 layers, 256 wide, 8 heads,
context 128, batch 32, vocab 1024): RMSNorm, rotary embeddings (rotate-half, base 10000), SwiGLU
(hidden 4 x dim, no biases), attention projections without bias, tied embeddings, AdamW (fused,
lr 1e-3, betas 0.9/0.95, weight decay 0.1), gradient clipping at 1.0, loss.item() every step, as
the C bench runs its steps. f32 runs with TF32 matmuls on (the C bench sets nx_cuda_set_tf32);
bf16 under torch.autocast. Modes: eager, torch.compile, torch.compile(mode="reduce-overhead")
(CUDA graphs). With --nexus it first runs plan_bench (eager and compiled-plan NexusGrad in one
process) for the same size and dtype and ends with the table of ratios.

usage: python3 bench/plan_twin.py [--nexus build-gpu/bench/plan_bench] [--dtype f32|bf16]
                                  [--steps 100] [--modes eager,compile,reduce-overhead]
"""
import argparse
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, LAYERS, HEADS, CONTEXT, BATCH, VOCAB = 256, 6, 8, 128, 32, 1024


def rope(x):
    t, d = x.shape[-2], x.shape[-1]
    inv = torch.exp(torch.arange(0, d // 2, device=x.device, dtype=torch.float64) * (-2.0 * torch.log(torch.tensor(10000.0, dtype=torch.float64)) / d))
    ang = torch.arange(t, device=x.device, dtype=torch.float64)[:, None] * inv[None, :]
    c, s = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(DIM, eps=1e-5), nn.RMSNorm(DIM, eps=1e-5)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(DIM, 4 * DIM, bias=False), nn.Linear(DIM, 4 * DIM, bias=False)
        self.w2 = nn.Linear(4 * DIM, DIM, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.n1(x)
        q, k, v = (w(h).view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, DIM))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM, eps=1e-5)

    def forward(self, idx):
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tok.weight.t()


def run(mode, dtype, steps, warmup=5, batches=4):
    torch.manual_seed(1)
    dev = torch.device("cuda")
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    data = [torch.randint(0, VOCAB, (BATCH, CONTEXT + 1), device=dev) for _ in range(batches)]

    def loss_of(x, y):
        with torch.autocast("cuda", torch.bfloat16, enabled=dtype == "bf16"):
            logits = model(x)
        return F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))

    step_loss = loss_of
    if mode == "compile":
        step_loss = torch.compile(loss_of)
    elif mode == "reduce-overhead":
        step_loss = torch.compile(loss_of, mode="reduce-overhead")

    def step(i):
        b = data[i % batches]
        opt.zero_grad(set_to_none=True)
        loss = step_loss(b[:, :-1], b[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for i in range(steps):
        last = step(i)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    tok_s = steps * BATCH * CONTEXT / elapsed
    peak = torch.cuda.max_memory_allocated() / 2**20
    print(f"RESULT impl=torch mode={mode} dtype={dtype} tok_s={tok_s:.0f} peak_mib={peak:.1f} loss={last:.4f}", flush=True)
    return tok_s, peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nexus", help="bench/plan_bench to run beside torch")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--modes", default="eager,compile,reduce-overhead")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    ours = None
    if a.nexus:
        out = subprocess.run([a.nexus, "bench", "cuda", str(a.steps), a.dtype], capture_output=True, text=True, check=True)
        line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT"))
        print(line, flush=True)
        ours = dict(kv.split("=") for kv in line.split()[1:])
    torch_runs = {m: run(m, a.dtype, a.steps) for m in a.modes.split(",")}
    if ours:
        print(f"\n| {a.dtype} | tok/s | peak MiB | NexusGrad plan / this |")
        print("|---|---|---|---|")
        plan = float(ours["plan_tok_s"])
        print(f"| NexusGrad eager | {float(ours['eager_tok_s']):,.0f} | {ours['eager_peak_mib']} | {plan / float(ours['eager_tok_s']):.2f} |")
        print(f"| NexusGrad plan (CUDA graph) | {plan:,.0f} | {ours['plan_peak_mib']} | 1.00 |")
        for m, (tok_s, peak) in torch_runs.items():
            print(f"| torch {m} | {tok_s:,.0f} | {peak:.1f} | {plan / tok_s:.2f} |")


if __name__ == "__main__":
    main()
