"""The PyTorch twin of bench/train_gpt2.c: the same GPT-2 124M (12 layers, 12 heads, 768 wide,
context 1024, vocab 50257, tied embeddings, GELU-tanh MLP with biases, LayerNorm, learned
positions, attention projections without bias as NexusGrad's), AdamW fused (lr 3e-4, betas
0.9/0.95, weight decay 0.1), random tokens, f32 parameters; "f32" runs with TF32 matmuls on (as
the C bench sets nx_cuda_set_tf32), "bf16" under torch.autocast("cuda", torch.bfloat16).
Prints the C bench's RESULT line, with impl=torch_eager or impl=torch_compile; given the C
bench's path (--nexus), runs it for the same settings first and ends with the table of ratios.

usage: python3 bench/train_gpt2.py [--nexus build-gpu/bench/train_gpt2] [--compile] [--no-eager]
                                   [--modes f32,bf16] [--batches 8,16] [--steps 20]
"""
import argparse
import math
import subprocess
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CONTEXT, DIM, LAYERS, HEADS = 50257, 1024, 768, 12, 12


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.proj = nn.Linear(DIM, DIM, bias=False)
        self.fc, self.fc_out = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(DIM, dim=2)
        q, k, v = (y.view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for y in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(o.transpose(1, 2).reshape(b, t, DIM))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(CONTEXT, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM)
        with torch.no_grad():
            self.tok.weight.mul_(0.02)
            self.pos.weight.mul_(0.01)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.norm(x) @ self.tok.weight.t()  # tied output head


def run(compiled, mode, batch, steps, seq=1024, warmup=3, batches=4):
    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    model = GPT().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    step_fn_model = torch.compile(model) if compiled else model
    data = [torch.randint(0, VOCAB, (batch, seq + 1), device=dev) for _ in range(batches)]

    def step(i):
        d = data[i % batches]
        x, y = d[:, :-1], d[:, 1:].reshape(-1)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "bf16"):
            loss = F.cross_entropy(step_fn_model(x).view(-1, VOCAB), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    loss0 = step(0).item()
    for i in range(1, warmup + (5 if compiled else 0)):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for i in range(steps):
        loss = step(i)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**30
    print(f"RESULT impl={'torch_compile' if compiled else 'torch_eager'} mode={mode} batch={batch} seq={seq} "
          f"ms={1e3 * elapsed / steps:.2f} tokens_per_s={steps * batch * seq / elapsed:.0f} peak_gib={peak:.2f} "
          f"loss0={loss0:.4f} loss={loss.item():.4f}", flush=True)
    del model, opt, data
    torch.cuda.empty_cache()
    return {"ms": 1e3 * elapsed / steps, "tokens_per_s": steps * batch * seq / elapsed, "peak_gib": peak}


def run_nexus(binary, mode, batch, steps):
    """The C bench's RESULT line as a dict (its PHASES line, if any, is printed as it is)."""
    out = subprocess.run([binary, str(batch), str(steps), mode, "1024", "phases"], capture_output=True, text=True)
    if out.returncode != 0:
        print(f"{binary} failed ({out.returncode}):\n{out.stderr[-2000:]}", flush=True)
        return None
    fields = {}
    for line in out.stdout.splitlines():
        print(line, flush=True)
        if line.startswith("RESULT"):
            fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return {k: float(fields[k]) for k in ("ms", "tokens_per_s", "peak_gib")} if fields else None


def table(rows, peers):
    """ours against each peer run: tokens/s ratio (ours / peer) and peak memory ratio."""
    print(f"\nGPT-2 124M training step, seq 1024, uniform loss {math.log(VOCAB):.3f}; ratio = ours / peer")
    head = f"{'mode':5} {'batch':>5} {'impl':14} {'ms/step':>8} {'tokens/s':>9} {'peak GiB':>8}"
    print(head + "".join(f" {'x ' + p:>18}" for p in peers))
    for (mode, batch), results in rows.items():
        ours = results.get("nexus")
        for impl, r in results.items():
            if r is None:
                print(f"{mode:5} {batch:>5} {impl:14} {'failed':>8}")
                continue
            line = f"{mode:5} {batch:>5} {impl:14} {r['ms']:8.1f} {r['tokens_per_s']:9.0f} {r['peak_gib']:8.2f}"
            if impl == "nexus":
                for p in peers:
                    q = results.get(p)
                    line += f" {ours['tokens_per_s'] / q['tokens_per_s']:8.2f} mem {ours['peak_gib'] / q['peak_gib']:5.2f}" \
                        if q else f" {'-':>18}"
            print(line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nexus", help="path of the C bench (bench/train_gpt2) to run beside torch")
    ap.add_argument("--compile", action="store_true", help="also torch.compile")
    ap.add_argument("--no-eager", action="store_true", help="skip torch eager")
    ap.add_argument("--modes", default="f32,bf16")
    ap.add_argument("--batches", default="8,16")
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    peers = ([] if a.no_eager else ["torch_eager"]) + (["torch_compile"] if a.compile else [])
    rows = {}
    for mode in a.modes.split(","):
        for batch in (int(b) for b in a.batches.split(",")):
            r = rows.setdefault((mode, batch), {})
            if a.nexus:
                r["nexus"] = run_nexus(a.nexus, mode, batch, a.steps)
            for p in peers:
                try:
                    r[p] = run(p == "torch_compile", mode, batch, a.steps)
                except torch.OutOfMemoryError as e:
                    print(f"{p} {mode} batch {batch}: out of memory ({e})", flush=True)
                    r[p] = None
    table(rows, peers)


if __name__ == "__main__":
    main()
