"""nexusgrad.nn (layers, optimizers, text) and attention against PyTorch, through the engine's
modules: the parameters the engine initialized are copied into the PyTorch reference."""
import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import nexusgrad as ng
from nexusgrad import nn

RNG = np.random.default_rng(5)


def T(t):
    return torch.tensor(t.cpu().numpy())


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(a.cpu().numpy() if isinstance(a, ng.Tensor) else a,
                               b.detach().cpu().numpy() if isinstance(b, torch.Tensor) else b, rtol=tol, atol=tol)


def test_linear_forward_backward(device):
    m = nn.Linear(4, 3, device=device)
    params = dict(m.named_parameters())
    assert sorted(params) == ["bias", "weight"] and m.kind == "Linear"
    w, b = T(params["weight"]).requires_grad_(), T(params["bias"]).requires_grad_()
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    y = m(ng.tensor(x, device=device))
    ty = TF.linear(torch.tensor(x), w, b)
    close(y, ty)
    ng.backward(ng.sum(y * y))
    torch.sum(ty * ty).backward()
    close(params["weight"].grad, w.grad, 1e-4)
    close(params["bias"].grad, b.grad, 1e-4)


def test_conv_pool_norm_embedding_match_torch():
    conv = nn.Conv2d(2, 3, 3, stride=1, padding=1)
    p = dict(conv.named_parameters())
    x = RNG.standard_normal((2, 2, 6, 6)).astype(np.float32)
    close(conv(ng.tensor(x)), TF.conv2d(torch.tensor(x), T(p["weight"]), T(p["bias"]), padding=1), 1e-4)
    close(nn.MaxPool2d(2)(ng.tensor(x)), TF.max_pool2d(torch.tensor(x), 2))
    close(nn.AvgPool2d(2)(ng.tensor(x)), TF.avg_pool2d(torch.tensor(x), 2))
    ln = nn.LayerNorm(6)
    lp = dict(ln.named_parameters())
    close(ln(ng.tensor(x)), TF.layer_norm(torch.tensor(x), (6,), T(lp["weight"]), T(lp["bias"])), 1e-4)
    emb = nn.Embedding(10, 4)
    idx = np.array([[1, 2], [9, 0]])
    close(emb(ng.tensor(idx)), TF.embedding(torch.tensor(idx), T(dict(emb.named_parameters())["weight"])))
    assert nn.Flatten()(ng.tensor(x)).shape == (2, 72)
    close(nn.ReLU()(ng.tensor(x)), torch.relu(torch.tensor(x)))
    close(nn.GELU("tanh")(ng.tensor(x)), TF.gelu(torch.tensor(x), approximate="tanh"))
    d = nn.Dropout(0.5).eval()
    close(d(ng.tensor(x)), torch.tensor(x))
    assert d.training is False and d.train().training is True  # like torch.nn.Module.training
    seq = nn.Sequential(nn.Linear(6, 6), nn.Dropout(0.5))
    seq.eval()
    assert not seq.training and not seq._children[1].training  # eval() reaches the children
    assert nn.RMSNorm(6)(ng.tensor(x)).shape == (2, 2, 6, 6)
    assert nn.SwiGLU(6, 8)(ng.tensor(x)).shape == (2, 2, 6, 6)


def test_sequential_residual_and_training(device):
    ng.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 16, device=device), nn.Tanh(), nn.Linear(16, 1, device=device))
    res = nn.Residual(nn.Linear(1, 1, device=device))
    assert len(model.parameters()) == 4 and res.kind
    x = ng.randn(64, 3, device=device)
    target = ng.sum(x, 1, keepdim=True) * 0.5
    opt = nn.Adam(model, lr=0.02)
    first = None
    for step in range(150):
        loss = ng.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        nn.clip_grad_norm_(model, 5.0)
        opt.step()
        first = first or loss.item()
    assert loss.item() < 0.1 * first
    opt.lr = 0.5
    assert opt.lr == 0.5
    assert nn.lr_step(1.0, 10, 5, 0.5) == 0.25
    assert nn.lr_cosine_warmup(1.0, 0, 10, 100) <= nn.lr_cosine_warmup(1.0, 10, 10, 100)


def test_residual_forward_and_backward_match_torch(device):
    inner = nn.Sequential(nn.Linear(6, 6, device=device), nn.Tanh())
    res = nn.Residual(inner)
    params = dict(inner.named_parameters())
    assert [n for n, _ in res.named_parameters()] == ["inner.0.weight", "inner.0.bias"]
    w, b = T(params["0.weight"]).requires_grad_(), T(params["0.bias"]).requires_grad_()
    x0 = RNG.standard_normal((4, 3, 6)).astype(np.float32)
    x = ng.tensor(x0, device=device, requires_grad=True)
    tx = torch.tensor(x0, requires_grad=True)
    y = res(x)
    ty = tx + torch.tanh(TF.linear(tx, w, b))
    close(y, ty)
    g0 = RNG.standard_normal((4, 3, 6)).astype(np.float32)
    ng.backward(y, ng.tensor(g0, device=device))
    ty.backward(torch.tensor(g0))
    close(x.grad, tx.grad)  # the skip path's identity plus the inner path's gradient
    close(params["0.weight"].grad, w.grad)
    close(params["0.bias"].grad, b.grad)


def test_sgd_matches_torch():
    w0 = RNG.standard_normal((3, 2)).astype(np.float32)
    w = ng.tensor(w0, requires_grad=True)
    tw = torch.tensor(w0, requires_grad=True)
    opt = nn.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.01)
    topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9, weight_decay=0.01)
    for _ in range(3):
        opt.zero_grad()
        ng.backward(ng.sum(ng.exp(w)))
        opt.step()
        topt.zero_grad()
        torch.sum(torch.exp(tw)).backward()
        topt.step()
    close(w, tw, 1e-5)


def test_adamw_matches_torch():
    w0 = RNG.standard_normal(4).astype(np.float32)
    w = ng.tensor(w0, requires_grad=True)
    tw = torch.tensor(w0, requires_grad=True)
    opt = nn.AdamW([w], lr=0.01, weight_decay=0.1)
    topt = torch.optim.AdamW([tw], lr=0.01, weight_decay=0.1)
    for _ in range(5):
        opt.zero_grad()
        ng.backward(ng.sum(w * w * w))
        opt.step()
        topt.zero_grad()
        torch.sum(tw * tw * tw).backward()
        topt.step()
    close(w, tw, 1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_matches_torch(device, causal):
    q, k, v = (RNG.standard_normal((2, 4, 6, 8)) for _ in range(3))
    k, v = k[:, :2], v[:, :2]  # grouped-query: 4 query heads share 2 key/value heads
    nq, nk, nv = (ng.tensor(a, device=device, requires_grad=True) for a in (q, k, v))
    out = ng.scaled_dot_product_attention(nq, nk, nv, is_causal=causal)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    ek, ev = tk.repeat_interleave(2, 1), tv.repeat_interleave(2, 1)
    s = tq @ ek.transpose(-1, -2) / np.sqrt(8)
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(6, 6, dtype=torch.bool), 1), float("-inf"))
    ref = torch.softmax(s, -1) @ ev
    close(out, ref, 1e-9)
    g = RNG.standard_normal(ref.shape)
    ng.backward(out, ng.tensor(g, device=device))
    ref.backward(torch.tensor(g))
    for a, b in ((nq, tq), (nk, tk), (nv, tv)):
        close(a.grad, b.grad, 1e-8)


def test_module_save_load_and_to(tmp_path, device):
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    path = str(tmp_path / "lin.safetensors")
    a.save(path)
    b.load(path)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())
    with pytest.raises(ng.Error):
        nn.Linear(4, 2).load(path)  # shapes differ
    b.to(device)
    assert all(p.device == device for p in b.parameters())
    assert b(ng.ones(1, 3, device=device)).device == device


def reference_bpe_merges(text, vocab_size):
    """BPE training the slow, obvious way (every pair recounted for every merge; the most frequent
    pair, ties to the smaller (a << 32 | b); merges stay inside chunks that start at whitespace
    after a non-space), the oracle for the engine's incremental counting."""
    space = b" \n\t\r"
    chunks, cur = {}, bytearray()
    for c in text:
        if cur and c in space and cur[-1] not in space:
            chunks[bytes(cur)] = chunks.get(bytes(cur), 0) + 1
            cur = bytearray()
        cur.append(c)
    if cur:
        chunks[bytes(cur)] = chunks.get(bytes(cur), 0) + 1
    words = [[list(w), f] for w, f in chunks.items()]
    merges = []
    while 256 + len(merges) < vocab_size:
        counts = {}
        for ids, f in words:
            for x, y in zip(ids, ids[1:]):
                counts[(x << 32) | y] = counts.get((x << 32) | y, 0) + f
        if not counts:
            break
        key, n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        if n < 2:
            break
        a, b, new = key >> 32, key & 0xFFFFFFFF, 256 + len(merges)
        merges.append((a, b))
        for w in words:
            ids, merged, i = w[0], [], 0
            while i < len(ids):
                if i + 1 < len(ids) and ids[i] == a and ids[i + 1] == b:
                    merged.append(new)
                    i += 2
                else:
                    merged.append(ids[i])
                    i += 1
            w[0] = merged
    return merges


@pytest.mark.parametrize("seed", range(12))
def test_bpe_training_matches_reference(seed, tmp_path):
    rng = np.random.default_rng(seed)
    alphabets = [b"ab", b"abc ", b"aaab \n", bytes(range(256)), "xyé \t".encode()]
    alphabet = alphabets[seed % len(alphabets)]
    text = bytes(rng.choice(list(alphabet), size=int(rng.integers(1, 3000))).tolist())
    if seed % 4 == 3:
        text = b"a" * len(text) + b" aa aaa"  # overlapping pairs: "aaa" holds (a, a) twice
    vocab = int(rng.integers(256, 420))
    path = tmp_path / "t.bpe"
    nn.Tokenizer.train_bpe(text, vocab).save(str(path))
    lines = path.read_text().split("\n")
    got = [tuple(map(int, line.split())) for line in lines[2:2 + int(lines[1])]]
    assert got == reference_bpe_merges(text, vocab)


def test_gpt_and_text():
    ng.manual_seed(1)
    tok = nn.Tokenizer.bytes()
    assert tok.vocab_size == 256
    ids = tok.encode("héllo wörld")
    assert ids.dtype is ng.int64 and tok.decode(ids) == "héllo wörld"
    bpe = nn.Tokenizer.train_bpe("abcabcabc abab " * 40, 262)
    assert 256 < bpe.vocab_size <= 262
    assert bpe.decode(bpe.encode("abcab")) == "abcab"
    assert len(bpe.encode("abcabc")) < 6
    long = "x" * 10000
    assert tok.decode(tok.encode(long)) == long  # longer than the first decode buffer
    gpt = nn.GPT(vocab=256, context=32, dim=32, layers=2, heads=4, rope=True)
    logits = gpt(ng.tensor([[1, 2, 3, 4]]))
    assert logits.shape == (1, 4, 256)
    out = gpt.generate([5, 6, 7], 5, temperature=0)
    assert out.shape == (1, 8) and out[0, :3].tolist() == [5, 6, 7]
    assert gpt.generate([5, 6, 7], 5, temperature=0).tolist() == out.tolist()  # greedy is deterministic
    loader = nn.TextLoader(ng.arange(500), batch=4, seq=16, seed=3)
    x, y = loader.next()
    assert x.shape == y.shape == (4, 16) and len(loader) > 0
    np.testing.assert_array_equal(x.numpy()[:, 1:], y.numpy()[:, :-1])
    with pytest.raises(ng.InvalidArgumentError):
        gpt.generate([300], 1)  # outside the vocabulary
    block = nn.TransformerBlock(dim=16, heads=2, swiglu=True, rms_norm=True)
    assert block(ng.randn(1, 5, 16)).shape == (1, 5, 16)
    attn = nn.MultiheadAttention(16, 4, kv_heads=2, causal=True)
    assert attn(ng.randn(2, 3, 16)).shape == (2, 3, 16)


def test_gpt_activation_choice():
    """nx_transformer_config.activation (1.1): GPT-2's tanh GELU is close to, not equal to, erf GELU."""
    import nexusgrad as ng
    tokens = ng.tensor([[1, 2, 3, 4]])
    outs = {}
    for act in ("gelu", "gelu_tanh", "relu", "silu"):
        ng.manual_seed(4)
        outs[act] = ng.nn.GPT(vocab=32, context=8, dim=16, layers=1, heads=2, activation=act)(tokens).numpy()
    diff = abs(outs["gelu"] - outs["gelu_tanh"]).max()
    assert 0 < diff < 1e-2
    assert abs(outs["gelu"] - outs["relu"]).max() > diff
    with pytest.raises(ValueError, match="activation must be one of"):
        ng.nn.GPT(vocab=32, context=8, dim=16, layers=1, heads=2, activation="swish2")


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch_on_the_device_path(max_norm):
    """The norm and the factor min(1, max_norm / (norm + 1e-6)) are computed without a host read;
    gradients clipped (or left alone below the threshold) like torch's, f32 and bf16."""
    import nexusgrad as ng
    rng = np.random.default_rng(8)
    shapes = [(4, 5), (7,), (3, 2, 2)]
    vals = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ps = [ng.tensor(v, requires_grad=True) for v in vals]
    tps = [torch.tensor(v, requires_grad=True) for v in vals]
    ng.backward(sum(ng.sum(p * p * (i + 1)) for i, p in enumerate(ps)))
    sum(torch.sum(p * p * (i + 1)) for i, p in enumerate(tps)).backward()
    norm = nn.clip_grad_norm_(ps, max_norm)
    tnorm = torch.nn.utils.clip_grad_norm_(tps, max_norm)
    assert norm == pytest.approx(float(tnorm), rel=1e-6)
    for p, tp in zip(ps, tps):
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-6, atol=1e-7)
    # bf16 gradients: the squares are summed in f32, the factor is applied in bf16
    b = ng.tensor(vals[0] * 100, dtype=ng.bfloat16, requires_grad=True)
    ng.backward(ng.sum(b * b))
    bnorm = nn.clip_grad_norm_([b], max_norm)
    want = float(np.linalg.norm(2 * b.to(dtype=ng.float32).numpy()))
    assert bnorm == pytest.approx(want, rel=1e-2)
    clipped = b.grad.to(dtype=ng.float32).numpy()
    assert np.linalg.norm(clipped) == pytest.approx(min(want, max_norm), rel=2e-2)
