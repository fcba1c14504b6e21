"""bf16 mixed-precision training, NexusGrad against PyTorch from the same initial weights.

A small GPT (byte vocabulary 256, context 128, 256 wide, 4 layers, 4 heads, tied embeddings,
GELU-tanh MLP, LayerNorm, learned positions) is made by NexusGrad, saved as SafeTensors, and
loaded into a PyTorch model of the same structure and parameter names. Both train for STEPS steps
on the same batches of the corpus (random windows of its bytes), under bf16 autocast
(ng.autocast / torch.autocast) with f32 parameters and AdamW (lr 1e-3, betas 0.9/0.95, weight
decay 0.1). Prints both loss curves' largest and final gaps and writes a PNG of the two curves
(labelled axes, legend) and a CSV.

usage: PYTHONPATH=build-gpu-py/python python3 bench/gpt_bf16_parity.py data/mobydick.txt OUT_DIR [steps=200]
"""
import csv
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

import nexusgrad as ng

VOCAB, CONTEXT, DIM, LAYERS, HEADS, BATCH = 256, 128, 256, 4, 4, 16


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM, bias=False) for _ in range(4))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (w(x).view(b, t, HEADS, DIM // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, t, DIM))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(DIM, eps=1e-5), nn.LayerNorm(DIM, eps=1e-5)
        self.attn = Attention()
        self.ffn = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(approximate="tanh"), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(CONTEXT, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(DIM, eps=1e-5)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for b in self.blocks:
            x = b(x)
        return self.norm(x) @ self.tok.weight.t()


def main():
    corpus, out_dir = sys.argv[1], sys.argv[2]
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    os.makedirs(out_dir, exist_ok=True)
    data = np.frombuffer(open(corpus, "rb").read(), dtype=np.uint8).astype(np.int64)
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(data) - CONTEXT - 1, size=(steps, BATCH))

    ng.manual_seed(1)
    ours = ng.nn.GPT(vocab=VOCAB, context=CONTEXT, dim=DIM, layers=LAYERS, heads=HEADS, tie_embeddings=True,
                     activation="gelu_tanh", device="cuda")
    init = os.path.join(out_dir, "init.safetensors")
    ours.save(init)
    theirs = GPT().cuda()
    state = load_file(init, device="cuda")
    missing = set(dict(theirs.named_parameters())) ^ set(state)
    assert not missing, f"parameter names differ: {sorted(missing)}"
    theirs.load_state_dict(state)
    opt_ours = ng.nn.AdamW(ours, lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=True)

    rows = []
    for step in range(steps):
        idx = np.stack([data[s:s + CONTEXT + 1] for s in starts[step]])
        xt = torch.from_numpy(idx[:, :-1]).cuda()
        yt = torch.from_numpy(idx[:, 1:].reshape(-1)).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss_t = F.cross_entropy(theirs(xt).view(-1, VOCAB), yt)
        opt_theirs.zero_grad(set_to_none=True)
        loss_t.backward()
        opt_theirs.step()
        xo, yo = ng.from_dlpack(xt.contiguous()), ng.from_dlpack(yt.contiguous())
        with ng.autocast("cuda", dtype=ng.bfloat16):
            loss_o = ng.cross_entropy(ng.reshape(ours(xo), BATCH * CONTEXT, VOCAB), yo)
        opt_ours.zero_grad()
        loss_o.backward()
        opt_ours.step()
        rows.append((step, float(loss_o.item()), float(loss_t.item())))

    gaps = np.array([abs(a - b) for _, a, b in rows])
    with open(os.path.join(out_dir, "gpt_bf16_parity.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "nexusgrad_loss", "torch_loss"])
        w.writerows(rows)
    print(f"bf16 autocast, {steps} steps, batch {BATCH} x {CONTEXT} bytes: first loss ours {rows[0][1]:.4f} "
          f"torch {rows[0][2]:.4f}; final ours {rows[-1][1]:.4f} torch {rows[-1][2]:.4f}")
    print(f"largest |gap| {gaps.max():.4f} at step {int(gaps.argmax())}; mean |gap| over the last 50 steps "
          f"{gaps[-50:].mean():.4f}; mean |gap| over all {gaps.mean():.4f}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    ax.plot([r[0] for r in rows], [r[2] for r in rows], label="PyTorch (torch.autocast bf16)", lw=1.6)
    ax.plot([r[0] for r in rows], [r[1] for r in rows], label="NexusGrad (ng.autocast bf16)", lw=1.2, ls="--")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss (nats per byte)")
    ax.set_title(f"Small GPT, same initial weights, bf16 mixed precision: largest gap {gaps.max():.3f}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "gpt_bf16_parity.png"))


if __name__ == "__main__":
    main()
