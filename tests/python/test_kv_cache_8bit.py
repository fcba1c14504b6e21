"""The 8-bit KV cache from Python (nexusgrad.quantize_8bit, kv_cache_append_8bit,
attention_decode_8bit) against torch: the int8 quantizer's codes and scales exactly, and decode
attention over a cache filled one token at a time against an f64 attention of the dequantized rows."""
import numpy as np
import pytest
import torch

import nexusgrad as ng


def ng_tensor(a, device, dtype=None):
    return ng.tensor(np.ascontiguousarray(a), dtype=dtype, device=device)


def host(t):
    return t.to("cpu").numpy()


def torch_quantize_rows(x):
    """torch's int8 absmax quantization of the last dimension (f32, round half to even)."""
    scale = x.abs().amax(dim=-1) / 127.0
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(x / scale[..., None]).clamp(-127, 127).to(torch.int8), scale


def test_quantize_int8_equals_torch(device):
    x = torch.randn(2, 3, 5, 16) * 3
    x[0, 1, 2] = 0.0  # an all-zero row: scale 1
    q, s = ng.quantize_8bit(ng_tensor(x.numpy(), device), ng.int8, 3)
    want_q, want_s = torch_quantize_rows(x)
    assert q.dtype == ng.int8 and tuple(q.shape) == (2, 3, 5, 16) and tuple(s.shape) == (2, 3, 5)
    np.testing.assert_array_equal(host(q), want_q.numpy())
    np.testing.assert_array_equal(host(s), want_s.numpy())


def test_decode_over_a_cache_filled_token_by_token(device):
    b, h, hkv, tmax, d, steps = 2, 4, 2, 24, 64, 20
    cache_k = ng.zeros((b, hkv, tmax, d), dtype=ng.int8, device=device)
    cache_v = ng.zeros((b, hkv, tmax, d), dtype=ng.int8, device=device)
    scale_k = ng.zeros((b, hkv, tmax), device=device)
    scale_v = ng.zeros((b, hkv, tmax), device=device)
    ks, vs = torch.randn(b, hkv, steps, d), torch.randn(b, hkv, steps, d)
    for t in range(steps):  # a generation loop: one new row per step, sequence 1 starting 2 later
        pos = ng_tensor(np.array([t, t + 2], dtype=np.int32), device)
        ng.kv_cache_append_8bit(cache_k, scale_k, ng_tensor(ks[:, :, t:t + 1].numpy(), device), pos)
        ng.kv_cache_append_8bit(cache_v, scale_v, ng_tensor(vs[:, :, t:t + 1].numpy(), device), pos)
    lengths = np.array([steps, steps + 2], dtype=np.int32)
    q = torch.randn(b, h, 1, d)
    with ng.no_grad():
        out = ng.attention_decode_8bit(ng_tensor(q.numpy(), device), cache_k, scale_k, cache_v, scale_v,
                                       ng_tensor(lengths, device), causal=True)
    # the reference: the same rows quantized by torch, dequantized, attended in f64
    qk, sk = torch_quantize_rows(ks)
    qv, sv = torch_quantize_rows(vs)
    want = torch.zeros(b, h, 1, d, dtype=torch.float64)
    for bi in range(b):
        first = 0 if bi == 0 else 2  # rows before the first append of sequence 1 stay zero codes
        kd = torch.zeros(hkv, lengths[bi], d, dtype=torch.float64)
        vd = torch.zeros(hkv, lengths[bi], d, dtype=torch.float64)
        kd[:, first:] = qk[bi].double() * sk[bi].double()[..., None]
        vd[:, first:] = qv[bi].double() * sv[bi].double()[..., None]
        kd, vd = kd.repeat_interleave(h // hkv, 0), vd.repeat_interleave(h // hkv, 0)
        scores = (q[bi].double() @ kd.transpose(-1, -2)) / d ** 0.5
        want[bi] = torch.softmax(scores, -1) @ vd
    got = host(out)
    err = np.abs(got - want.numpy()).max() / np.abs(want.numpy()).max()
    assert err < 2e-5, err


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_forward_against_torch_attention_of_the_dequantized_inputs(device, causal):
    """nexusgrad.flash_attention_fp8 against torch's softmax attention in f64 of the same e4m3
    values: the difference is the rounding of the probabilities to e4m3 (about 2^-4 of each
    weight, largely averaging out), so a loose bound, while a wrong scale or mask is far off."""
    b, h, hkv, tq, tk, d = 2, 4, 2, 16, 48, 64
    x = {"q": torch.randn(b, h, tq, d), "k": torch.randn(b, hkv, tk, d), "v": torch.randn(b, hkv, tk, d)}
    codes, scales, values = {}, {}, {}
    for name, keep in (("q", 3), ("k", 3), ("v", 2)):
        codes[name], scales[name] = ng.quantize_8bit(ng_tensor(x[name].numpy(), device), ng.float8_e4m3fn, keep)
        dequant = host(codes[name].to(dtype=ng.float32)).astype(np.float64)
        values[name] = torch.from_numpy(dequant * host(scales[name]).astype(np.float64).reshape(
            host(scales[name]).shape + (1,) * (4 - len(host(scales[name]).shape))))
    out = ng.flash_attention_fp8(codes["q"], scales["q"], codes["k"], scales["k"], codes["v"], scales["v"],
                                 causal=causal, out_dtype="float32")
    k = values["k"].repeat_interleave(h // hkv, 1)
    v = values["v"].repeat_interleave(h // hkv, 1)
    scores = values["q"] @ k.transpose(-1, -2) / d ** 0.5
    if causal:  # query i sits at position tk - tq + i
        mask = torch.arange(tk)[None, :] > (tk - tq + torch.arange(tq))[:, None]
        scores = scores.masked_fill(mask, float("-inf"))
    want = (torch.softmax(scores, -1) @ v).numpy()
    err = np.abs(host(out) - want).max() / np.abs(want).max()
    assert err < 3e-2, err
