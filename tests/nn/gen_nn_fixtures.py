#!/usr/bin/python3
"""PyTorch fixtures for the layer/training tests of tests/nn: `gen_nn_fixtures.py OUT_DIR`.

Run at build time by Debian's /usr/bin/python3 (torch 1.13); the files are written into the
build tree and never committed. Every module's weights are written under NexusGrad's parameter
names (the names nx_module_parameter reports: "attn.wq.weight", "blocks.0.norm1.weight", ...), so
the C tests create the module with nx_*_create and nx_module_load the file. Files in OUT_DIR:

  layers.safetensors   for every layer case k (metadata "cases" = "k1,k2,...", and
                       "case.k" = "kind=...;dt=f32;key=value;..." the C test builds the module from):
                         k.x          the input (float, or int64 token ids / indices)
                         k.out        torch's output
                         k.gout       a random upstream gradient
                         k.grad.x     torch's input gradient (float inputs only)
                         k.grad.NAME  torch's gradient of every parameter NAME
  w_k.safetensors      the weights of case k (exactly the module's parameters), for nx_module_load
  optim.safetensors    optimizer cases k (metadata "optims", "optim.k"): k.p.i initial parameters,
                       k.g.s.i gradient of parameter i at step s (absent: no gradient at that step),
                       k.after.s.i parameters after step s, k.m.i / k.v.i / k.step.i / k.buf.i final state
  train.safetensors    50-step training runs r (metadata "runs", "run.r"): r.x / r.y token batches
                       [steps, B, T], r.loss [steps] torch's loss before each update, r.final.NAME
                       the parameters after the last step; train_w_r.safetensors the initial weights
  gen.safetensors      greedy generation (metadata "gens", "gen.k"): k.prompt, k.tokens (prompt +
                       new tokens, torch, f64, full recomputation each step); gen_w_k_f64/_f32 weights

st_reader.py (imported here) is a small SafeTensors reader without the `safetensors` package
(not in Debian); check_saved.py uses it on the files nx_module_save / nx_optimizer_save write.
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_reader import read_safetensors  # noqa: E402,F401  (the tiny reader, re-exported)

torch.manual_seed(20240612)
F32, F64, I64 = torch.float32, torch.float64, torch.int64
ST_NAMES = {torch.float32: "F32", torch.float64: "F64", torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}
DT = {F32: "f32", F64: "f64"}


def write_safetensors(path, named, meta=None):
    header, chunks, at = {}, [], 0
    for name, t in named.items():
        t = t.detach().contiguous().cpu()
        raw = t.numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def fmt(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def conf(**kv):
    return ";".join("%s=%s" % (k, fmt(v)) for k, v in kv.items())


# ---------------------------------------------------------------- torch reference modules
# Their state_dict names are NexusGrad's parameter names.
class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def alibi_slopes(n):
    """The ALiBi paper's slopes (Press et al., reference implementation)."""
    def pow2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        return [start * start ** i for i in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    closest = 2 ** math.floor(math.log2(n))
    return pow2(closest) + alibi_slopes(2 * closest)[0::2][:n - closest]


def apply_rope(x, base=10000.0):
    """Rotary embedding, rotate-half convention (GPT-NeoX / Llama in HF transformers), x [B, H, T, D]."""
    t, d = x.shape[-2], x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.arange(t, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype)
    sin = torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, dim, heads, kv_heads, causal, alibi, rope):
        super().__init__()
        self.dim, self.heads, self.kv = dim, heads, kv_heads or heads
        self.hd = dim // heads
        self.causal, self.alibi, self.rope = causal, alibi, rope
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, self.kv * self.hd, bias=False)
        self.wv = nn.Linear(dim, self.kv * self.hd, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv, self.hd).transpose(1, 2)
        if self.rope:
            q, k = apply_rope(q), apply_rope(k)
        if self.kv != self.heads:
            k = k.repeat_interleave(self.heads // self.kv, dim=1)
            v = v.repeat_interleave(self.heads // self.kv, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        i = torch.arange(t)[:, None]
        j = torch.arange(t)[None, :]
        if self.alibi:
            slopes = torch.tensor(alibi_slopes(self.heads), dtype=torch.float64)
            att = att + (-slopes[:, None, None] * (i - j).to(torch.float64)).to(att.dtype)
        if self.causal:
            att = att.masked_fill(j > i, float("-inf"))
        o = att.softmax(-1) @ v
        return self.wo(o.transpose(1, 2).reshape(b, t, self.dim))


class Block(nn.Module):
    def __init__(self, dim, heads, kv_heads, ffn_hidden, alibi, rope, swiglu, rms_norm, eps=1e-5):
        super().__init__()
        hidden = ffn_hidden or 4 * dim
        norm = (lambda: RMSNorm(dim, eps)) if rms_norm else (lambda: nn.LayerNorm(dim, eps=eps))
        self.norm1 = norm()
        self.attn = Attention(dim, heads, kv_heads, True, alibi, rope)
        self.norm2 = norm()
        self.ffn = SwiGLU(dim, hidden) if swiglu else nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        h = x + self.attn(self.norm1(x))
        return h + self.ffn(self.norm2(h))


class GPT(nn.Module):
    def __init__(self, vocab, context, dim, layers, heads, kv_heads, ffn_hidden, alibi, rope, swiglu, rms_norm, tie):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(context, dim) if not rope and not alibi else None
        self.blocks = nn.ModuleList(
            [Block(dim, heads, kv_heads, ffn_hidden, alibi, rope, swiglu, rms_norm) for _ in range(layers)])
        self.norm = RMSNorm(dim, 1e-5) if rms_norm else nn.LayerNorm(dim, eps=1e-5)
        self.head = None if tie else nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        x = self.tok(tokens)
        if self.pos is not None:
            x = x + self.pos(torch.arange(tokens.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return self.head(x) if self.head is not None else x @ self.tok.weight.t()


def perturb_norms(m):
    """Norm weights 1 + noise and biases noise, so their gradients and effect are not trivial."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            last = name.split(".")
            if any(s.startswith("norm") for s in last) or isinstance(m, (RMSNorm, nn.LayerNorm)):
                if last[-1] == "weight":
                    p.copy_(1 + 0.2 * torch.randn_like(p))
                elif last[-1] == "bias":
                    p.copy_(0.2 * torch.randn_like(p))


# ---------------------------------------------------------------- layer cases
layer_data, layer_meta, layer_cases = {}, {}, []


def layer_case(out_dir, key, module, x, dt, **config):
    """Records module's forward and backward on x under key, and writes w_key.safetensors."""
    module = module.to(dt)
    if x.is_floating_point():
        x = x.to(dt).detach().requires_grad_(True)
    out = module(x)
    gout = torch.randn(out.shape, dtype=out.dtype)
    out.backward(gout)
    layer_data[key + ".x"] = x.detach()
    layer_data[key + ".out"] = out.detach()
    layer_data[key + ".gout"] = gout
    if x.is_floating_point():
        layer_data[key + ".grad.x"] = x.grad
    params = dict(module.named_parameters())
    for name, p in params.items():
        layer_data[key + ".grad." + name] = p.grad if p.grad is not None else torch.zeros_like(p)
    if params:
        write_safetensors(os.path.join(out_dir, "w_%s.safetensors" % key), {n: p for n, p in params.items()})
    layer_meta["case." + key] = conf(dt=DT[dt], nparams=len(params), **config)
    layer_cases.append(key)


class Fn(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x)


def layers(out_dir):
    rn = torch.randn
    layer_case(out_dir, "linear_bias", nn.Linear(7, 5, bias=True), rn(3, 4, 7), F32, kind="linear", in_=7, out=5, bias=True)
    layer_case(out_dir, "linear_nobias", nn.Linear(7, 5, bias=False), rn(6, 7), F32, kind="linear", in_=7, out=5, bias=False)
    layer_case(out_dir, "linear_f64", nn.Linear(9, 4, bias=True), rn(2, 3, 9), F64, kind="linear", in_=9, out=4, bias=True)
    # indices with repeats (gradient accumulation into the same row) and unused rows (zero gradient)
    idx = torch.tensor([[0, 3, 3, 10, 5], [7, 0, 3, 1, 10], [2, 2, 2, 9, 4]], dtype=I64)
    layer_case(out_dir, "embedding", nn.Embedding(11, 6), idx, F32, kind="embedding", num=11, dim=6)
    layer_case(out_dir, "embedding_f64", nn.Embedding(11, 6), idx, F64, kind="embedding", num=11, dim=6)
    ln = nn.LayerNorm(8, eps=1e-5)
    perturb_norms(ln)
    layer_case(out_dir, "layer_norm", ln, rn(2, 3, 8) * 2 + 0.5, F32, kind="layer_norm", dim=8, eps=1e-5)
    ln = nn.LayerNorm(8, eps=1e-3)
    perturb_norms(ln)
    layer_case(out_dir, "layer_norm_f64", ln, rn(4, 8), F64, kind="layer_norm", dim=8, eps=1e-3)
    rms = RMSNorm(8, 1e-6)
    perturb_norms(rms)
    layer_case(out_dir, "rms_norm", rms, rn(2, 3, 8) * 2, F32, kind="rms_norm", dim=8, eps=1e-6)
    rms = RMSNorm(10, 1e-5)
    perturb_norms(rms)
    layer_case(out_dir, "rms_norm_f64", rms, rn(3, 10), F64, kind="rms_norm", dim=10, eps=1e-5)
    acts = {
        "relu": F.relu,
        "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
        "gelu": F.gelu,
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "silu": F.silu,
        "softplus": F.softplus,
        "gcu": lambda x: x * torch.cos(x),
        # the cone family (arXiv 2405.04459); parcon by name has beta 1.5 (nx_parcon's doc)
        "cone": lambda x: 1 - (x - 1).abs(),
        "parabolic_cone": lambda x: x * (2 - x),
        "parcon": lambda x: 1 - (x - 1).abs().pow(1.5),
        "gaussian": lambda x: torch.exp(-x * x),
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "softmax": lambda x: torch.softmax(x, -1),
        "identity": lambda x: x,
    }
    for name, f in acts.items():
        for dt in (F32, F64):
            x = rn(3, 4, 10) * 2.5
            layer_case(out_dir, "act_%s_%s" % (name, DT[dt]), Fn(f), x, dt, kind="activation", name=name)
    layer_case(out_dir, "swiglu", SwiGLU(8, 12), rn(2, 3, 8), F32, kind="swiglu", dim=8, hidden=12)
    layer_case(out_dir, "swiglu_f64", SwiGLU(6, 10), rn(5, 6), F64, kind="swiglu", dim=6, hidden=10)
    attn = [  # name, dim, heads, kv_heads, causal, alibi, rope, dtype
        ("attn_causal", 16, 4, 0, True, False, False, F32),
        ("attn_full", 12, 2, 0, False, False, False, F32),
        ("attn_alibi", 16, 4, 0, True, True, False, F32),
        ("attn_alibi_h6", 24, 6, 0, True, True, False, F32),  # not a power of two: interleaved slopes
        ("attn_alibi_h6_f64", 24, 6, 0, True, True, False, F64),
        ("attn_alibi_h16_f64", 32, 16, 0, True, True, False, F64),  # slopes 2^(-i/2): not exact in f32
        ("attn_rope", 16, 4, 0, True, False, True, F32),
        ("attn_rope_f64", 16, 2, 0, True, False, True, F64),
        ("attn_gqa", 16, 4, 2, True, False, False, F32),
        ("attn_gqa_rope", 32, 4, 2, True, False, True, F32),
        ("attn_mqa_rope_alibi", 16, 4, 1, True, True, True, F32),
        ("attn_gqa_rope_alibi_f64", 24, 6, 3, True, True, True, F64),
        ("attn_noncausal_alibi_rope", 16, 4, 2, False, True, True, F32),
    ]
    for name, dim, h, kv, causal, alibi, rope, dt in attn:
        layer_case(out_dir, name, Attention(dim, h, kv, causal, alibi, rope), rn(2, 7, dim), dt, kind="attention",
                   dim=dim, heads=h, kv_heads=kv, causal=causal, alibi=alibi, rope=rope)
    layer_case(out_dir, "conv_s2_p1", nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=True), rn(2, 3, 9, 8), F32,
               kind="conv2d", cin=3, cout=4, kernel=3, stride=2, padding=1, bias=True)
    layer_case(out_dir, "conv_s1_p0_nobias", nn.Conv2d(2, 3, 2, stride=1, padding=0, bias=False), rn(2, 2, 5, 6), F32,
               kind="conv2d", cin=2, cout=3, kernel=2, stride=1, padding=0, bias=False)
    layer_case(out_dir, "conv_s3_p2_f64", nn.Conv2d(2, 5, 4, stride=3, padding=2, bias=True), rn(1, 2, 10, 11), F64,
               kind="conv2d", cin=2, cout=5, kernel=4, stride=3, padding=2, bias=True)
    for pool, f in (("max_pool2d", F.max_pool2d), ("avg_pool2d", F.avg_pool2d)):
        layer_case(out_dir, pool + "_k2s2", Fn(lambda x, f=f: f(x, 2, 2)), rn(2, 3, 8, 8), F32, kind=pool, kernel=2, stride=2)
        # overlapping windows (stride < kernel) and a remainder that does not fit a window
        layer_case(out_dir, pool + "_k3s2", Fn(lambda x, f=f: f(x, 3, 2)), rn(2, 2, 9, 8), F32, kind=pool, kernel=3, stride=2)
        layer_case(out_dir, pool + "_k2s1_f64", Fn(lambda x, f=f: f(x, 2, 1)), rn(1, 2, 5, 4), F64, kind=pool, kernel=2, stride=1)
    layer_case(out_dir, "flatten", nn.Flatten(), rn(2, 3, 4, 5), F32, kind="flatten")
    # Sequential(conv 1->4 k3 s1 p1, relu, maxpool 2, flatten, linear 64->5): parameter names 0.* and 4.*
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3, 1, 1), nn.ReLU(), nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(64, 5))
    layer_case(out_dir, "cnn", cnn, rn(2, 1, 8, 8), F32, kind="cnn")
    blocks = [  # name, dim, heads, kv, ffn_hidden, alibi, rope, swiglu, rms, dtype
        ("block_rope_swiglu_rms_gqa", 16, 4, 2, 24, False, True, True, True, F32),
        ("block_alibi_gelu_ln", 16, 4, 0, 0, True, False, False, False, F32),
        ("block_rope_swiglu_rms_gqa_f64", 16, 4, 2, 24, False, True, True, True, F64),
        ("block_alibi_gelu_ln_f64", 12, 3, 0, 20, True, False, False, False, F64),
        ("block_plain_f64", 12, 2, 1, 0, False, False, True, False, F64),
    ]
    for name, dim, h, kv, hid, alibi, rope, sw, rms, dt in blocks:
        blk = Block(dim, h, kv, hid, alibi, rope, sw, rms)
        perturb_norms(blk)
        layer_case(out_dir, name, blk, rn(2, 6, dim), dt, kind="block", dim=dim, heads=h, kv_heads=kv, ffn_hidden=hid,
                   alibi=alibi, rope=rope, swiglu=sw, rms_norm=rms)
    gpts = [  # name, vocab, context, dim, layers, heads, kv, hidden, alibi, rope, swiglu, rms, tie, dtype
        ("gpt_rope_swiglu_rms_tied_f64", 37, 16, 16, 2, 4, 2, 24, False, True, True, True, True, F64),
        ("gpt_learned_gelu_ln_untied_f64", 29, 12, 12, 2, 2, 0, 0, False, False, False, False, False, F64),
        ("gpt_alibi_swiglu_ln_tied_f64", 23, 16, 12, 1, 3, 0, 16, True, False, True, False, True, F64),
        ("gpt_rope_swiglu_rms_tied", 37, 16, 16, 2, 4, 2, 24, False, True, True, True, True, F32),
    ]
    for name, v, ctx, dim, L, h, kv, hid, alibi, rope, sw, rms, tie, dt in gpts:
        g = GPT(v, ctx, dim, L, h, kv, hid, alibi, rope, sw, rms, tie)
        perturb_norms(g)
        with torch.no_grad():
            g.tok.weight.mul_(0.5)
        toks = torch.randint(0, v, (2, 10), dtype=I64)
        layer_case(out_dir, name, g, toks, dt, kind="gpt", vocab=v, context=ctx, dim=dim, layers=L, heads=h,
                   kv_heads=kv, ffn_hidden=hid, alibi=alibi, rope=rope, swiglu=sw, rms_norm=rms, tie=tie)
    layer_meta["cases"] = ",".join(layer_cases)
    layer_meta["torch_version"] = torch.__version__
    write_safetensors(os.path.join(out_dir, "layers.safetensors"), layer_data, layer_meta)


# ---------------------------------------------------------------- optimizers
def optimizers(out_dir):
    data, meta, names = {}, {}, []
    cases = [  # name, dtype, kind, options
        ("sgd", F64, "sgd", dict(lr=0.1, momentum=0.0, nesterov=False, wd=0.0)),
        ("sgd_momentum", F64, "sgd", dict(lr=0.05, momentum=0.9, nesterov=False, wd=0.0)),
        ("sgd_nesterov_wd", F64, "sgd", dict(lr=0.05, momentum=0.8, nesterov=True, wd=0.01)),
        ("sgd_momentum_wd_f32", F32, "sgd", dict(lr=0.05, momentum=0.9, nesterov=False, wd=0.1)),
        ("adam", F64, "adam", dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.0, decoupled=False)),
        ("adam_l2", F64, "adam", dict(lr=1e-2, beta1=0.8, beta2=0.99, eps=1e-6, wd=0.1, decoupled=False)),
        ("adamw", F64, "adam", dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, wd=0.1, decoupled=True)),
        ("adamw_f32", F32, "adam", dict(lr=3e-3, beta1=0.9, beta2=0.999, eps=1e-8, wd=0.05, decoupled=True)),
        # a parameter without a gradient at one step is skipped (torch: p.grad is None)
        ("sgd_momentum_skip", F64, "sgd", dict(lr=0.05, momentum=0.9, nesterov=True, wd=0.01, skip=1)),
        ("adamw_skip", F64, "adam", dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, wd=0.1, decoupled=True, skip=1)),
    ]
    shapes = [(4, 3), (5,), (2, 2, 3)]
    steps = 3
    for name, dt, kind, o in cases:
        params = [torch.randn(s, dtype=dt) for s in shapes]
        for i, p in enumerate(params):
            data["%s.p.%d" % (name, i)] = p.clone()
        ps = [p.clone().requires_grad_(True) for p in params]
        if kind == "sgd":
            opt = torch.optim.SGD(ps, lr=o["lr"], momentum=o["momentum"], nesterov=o["nesterov"], weight_decay=o["wd"])
        elif o["decoupled"]:
            opt = torch.optim.AdamW(ps, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], weight_decay=o["wd"])
        else:
            opt = torch.optim.Adam(ps, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], weight_decay=o["wd"])
        for s in range(steps):
            for i, p in enumerate(ps):
                if o.get("skip") is not None and i == o["skip"] and s == 1:
                    p.grad = None
                    continue
                g = torch.randn(p.shape, dtype=dt)
                data["%s.g.%d.%d" % (name, s, i)] = g
                p.grad = g.clone()
            opt.step()
            for i, p in enumerate(ps):
                data["%s.after.%d.%d" % (name, s, i)] = p.detach().clone()
        for i, p in enumerate(ps):
            st = opt.state[p]
            if kind == "adam":
                data["%s.m.%d" % (name, i)] = st["exp_avg"].clone()
                data["%s.v.%d" % (name, i)] = st["exp_avg_sq"].clone()
                data["%s.step.%d" % (name, i)] = torch.tensor(int(st["step"]), dtype=I64)  # per parameter
            elif o["momentum"]:
                data["%s.buf.%d" % (name, i)] = st["momentum_buffer"].clone()
        meta["optim." + name] = conf(kind=kind, dt=DT[dt], nparams=len(shapes), steps=steps, **o)
        names.append(name)
    meta["optims"] = ",".join(names)
    write_safetensors(os.path.join(out_dir, "optim.safetensors"), data, meta)


# ---------------------------------------------------------------- 50-step training runs
TRAIN_CFG = dict(vocab=32, context=16, dim=32, layers=2, heads=4, kv_heads=2, ffn_hidden=64, alibi=False, rope=True,
                 swiglu=True, rms_norm=True, tie=True)


def make_batches(steps, b, t, vocab, gen):
    """Learnable token streams: x[i+1] = x[i] + stride (mod vocab), stride in {1, 2, 3} per row, 10% noise."""
    seq = torch.empty(steps, b, t + 1, dtype=I64)
    start = torch.randint(0, vocab, (steps, b), generator=gen)
    stride = torch.randint(1, 4, (steps, b), generator=gen)
    for i in range(t + 1):
        seq[:, :, i] = (start + stride * i) % vocab
    noise = torch.rand(steps, b, t + 1, generator=gen) < 0.1
    seq = torch.where(noise, torch.randint(0, vocab, (steps, b, t + 1), generator=gen), seq)
    return seq[:, :, :-1].contiguous(), seq[:, :, 1:].contiguous()


def training(out_dir):
    data, meta, runs = {}, {}, []
    steps, b, t = 50, 4, 16
    gen = torch.Generator().manual_seed(7)
    x, y = make_batches(steps, b, t, TRAIN_CFG["vocab"], gen)
    variants = [  # name, optimizer options, gradient clipping (0: off)
        ("adamw", dict(lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-8, wd=0.1), 0.0),
        ("adamw_clip", dict(lr=2e-2, beta1=0.9, beta2=0.95, eps=1e-8, wd=0.05), 0.5),
    ]
    for name, o, clip in variants:
        torch.manual_seed(1234)  # the same initial weights for both runs
        model = GPT(**TRAIN_CFG).double()
        with torch.no_grad():
            model.tok.weight.mul_(0.1)
        write_safetensors(os.path.join(out_dir, "train_w_%s.safetensors" % name), dict(model.named_parameters()))
        opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"],
                                weight_decay=o["wd"])
        losses = []
        for s in range(steps):
            logits = model(x[s])
            loss = F.cross_entropy(logits.reshape(-1, TRAIN_CFG["vocab"]), y[s].reshape(-1))
            opt.zero_grad()
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            losses.append(loss.item())
        data[name + ".x"] = x
        data[name + ".y"] = y
        data[name + ".loss"] = torch.tensor(losses, dtype=F64)
        for pname, p in model.named_parameters():
            data["%s.final.%s" % (name, pname)] = p.detach().clone()
        meta["run." + name] = conf(steps=steps, batch=b, seq=t, clip=clip, **o, **TRAIN_CFG)
        runs.append(name)
        print("gen_nn_fixtures: training run %s: loss %.6f -> %.6f" % (name, losses[0], losses[-1]))
    meta["runs"] = ",".join(runs)
    write_safetensors(os.path.join(out_dir, "train.safetensors"), data, meta)


# ---------------------------------------------------------------- greedy generation
def generation(out_dir):
    data, meta, names = {}, {}, []
    cfgs = [
        ("rope_gqa", dict(vocab=48, context=32, dim=32, layers=2, heads=4, kv_heads=2, ffn_hidden=48, alibi=False,
                          rope=True, swiglu=True, rms_norm=True, tie=True)),
        ("alibi_ln_untied", dict(vocab=40, context=32, dim=24, layers=2, heads=3, kv_heads=0, ffn_hidden=0, alibi=True,
                                 rope=False, swiglu=False, rms_norm=False, tie=False)),
        ("learned_mqa", dict(vocab=33, context=26, dim=16, layers=3, heads=2, kv_heads=1, ffn_hidden=32, alibi=False,
                             rope=False, swiglu=True, rms_norm=True, tie=True)),
    ]
    new_tokens = 20
    for name, cfg in cfgs:
        model = GPT(**cfg).double()
        perturb_norms(model)
        with torch.no_grad():  # a small embedding, so that the greedy continuation does not just repeat
            model.tok.weight.mul_(0.05)
        params = dict(model.named_parameters())
        write_safetensors(os.path.join(out_dir, "gen_w_%s_f64.safetensors" % name), params)
        write_safetensors(os.path.join(out_dir, "gen_w_%s_f32.safetensors" % name),
                          {n: p.float() for n, p in params.items()})
        prompt = torch.randint(0, cfg["vocab"], (5,), dtype=I64)
        seq = prompt[None, :].clone()
        with torch.no_grad():
            for _ in range(new_tokens):
                nxt = model(seq)[0, -1].argmax()
                seq = torch.cat([seq, nxt.view(1, 1)], 1)
        data[name + ".prompt"] = prompt
        data[name + ".tokens"] = seq[0].clone()
        meta["gen." + name] = conf(new_tokens=new_tokens, **cfg)
        names.append(name)
    meta["gens"] = ",".join(names)
    write_safetensors(os.path.join(out_dir, "gen.safetensors"), data, meta)


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: gen_nn_fixtures.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    os.makedirs(os.path.join(out_dir, "saved"), exist_ok=True)
    torch.set_num_threads(1)
    layers(out_dir)
    optimizers(out_dir)
    training(out_dir)
    generation(out_dir)
    # the reader must accept what the writer wrote (check_saved.py then uses it on NexusGrad's files)
    for name in ("layers", "optim", "train", "gen"):
        read_safetensors(os.path.join(out_dir, name + ".safetensors"))
    with open(os.path.join(out_dir, "stamp"), "w") as f:
        f.write("torch %s\n" % torch.__version__)


if __name__ == "__main__":
    main()
