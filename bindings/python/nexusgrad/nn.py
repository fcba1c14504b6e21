"""Layers, optimizers and text utilities of nexus.h (nx_module, nx_optimizer, nx_tokenizer,
nx_text_loader) with PyTorch-like names: nexusgrad.nn.Linear(4, 3)(x), nexusgrad.nn.SGD(params)...

Modules are built by the engine (their parameters are initialized like PyTorch's defaults from
the generator seeded by nexusgrad.manual_seed); this layer only holds the handles.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from . import _nexus as _C
from ._dtypes import DTypeLike, DeviceLike, float32, to_device, to_dtype
from .tensor import Tensor, _options, _wrap

__all__ = ["Module", "Linear", "Embedding", "LayerNorm", "RMSNorm", "Dropout", "Activation", "ReLU", "GELU",
           "Tanh", "Sigmoid", "Flatten", "Conv2d", "MaxPool2d", "AvgPool2d", "Sequential", "Residual", "SwiGLU",
           "MultiheadAttention", "TransformerBlock", "GPT", "Optimizer", "SGD", "Adam", "AdamW",
           "clip_grad_norm_", "lr_step", "lr_cosine_warmup", "Tokenizer", "TextLoader"]


def _place(dtype: Optional[DTypeLike], device: DeviceLike) -> Tuple[int, str]:
    return (float32 if dtype is None else to_dtype(dtype)).value, to_device(device)


class Module:
    """A layer made by the engine. Call it on a Tensor; parameters() lists its leaf tensors."""

    __slots__ = ("_m", "_children")

    def __init__(self, handle: Any, children: Sequence["Module"] = ()) -> None:
        self._m = handle
        self._children = list(children)  # containers share their children: keep them alive too

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x)

    def forward(self, x: Tensor) -> Tensor:
        """The module's forward pass (recorded by autodiff)."""
        return _wrap(_C.nx_module_forward(self._m, x._h, None))

    @property
    def kind(self) -> str:
        """'Linear', 'GPT'..."""
        return _C.nx_module_kind(self._m)

    def named_parameters(self) -> Iterator[Tuple[str, Tensor]]:
        """(dotted name, parameter) pairs; the tensors are the parameters themselves (not copies)."""
        for i in range(_C.nx_module_parameter_count(self._m)):
            name, h = _C.nx_module_parameter(self._m, i)
            yield name, _wrap(h)

    def parameters(self) -> List[Tensor]:
        return [_wrap(h) for h in _C.nx_module_parameters(self._m)]

    def state_dict(self) -> Dict[str, Tensor]:
        return dict(self.named_parameters())

    def to(self, device: DeviceLike) -> "Module":
        """Moves every parameter to device (tensors obtained before keep the old data)."""
        _C.nx_module_to(self._m, to_device(device), None)
        return self

    def train(self, mode: bool = True) -> "Module":
        """Training mode (dropout active; the default) or, with mode False, evaluation mode, for this
        module and its children."""
        _C.nx_module_set_training(self._m, bool(mode))
        return self

    @property
    def training(self) -> bool:
        """Whether the module is in training mode (see train() and eval())."""
        return _C.nx_module_get_training(self._m)

    def eval(self) -> "Module":
        return self.train(False)

    def save(self, path: str) -> None:
        """The parameters as SafeTensors."""
        _C.nx_module_save(self._m, str(path))

    def load(self, path: str) -> "Module":
        """Loads parameters saved by save (names, shapes and dtypes are checked)."""
        _C.nx_module_load(self._m, str(path))
        return self

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.zero_grad()

    def __repr__(self) -> str:
        return f"{self.kind}({_C.nx_module_parameter_count(self._m)} parameters)"


def Linear(in_features: int, out_features: int, bias: bool = True, dtype: Optional[DTypeLike] = None,
           device: DeviceLike = "cpu") -> Module:
    """x @ weight.T + bias."""
    d, dev = _place(dtype, device)
    return Module(_C.nx_linear_create(int(in_features), int(out_features), bool(bias), d, dev, None))


def Embedding(num_embeddings: int, embedding_dim: int, dtype: Optional[DTypeLike] = None,
              device: DeviceLike = "cpu") -> Module:
    d, dev = _place(dtype, device)
    return Module(_C.nx_embedding_create(int(num_embeddings), int(embedding_dim), d, dev, None))


def LayerNorm(dim: int, eps: float = 1e-5, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> Module:
    d, dev = _place(dtype, device)
    return Module(_C.nx_layer_norm_create(int(dim), float(eps), d, dev, None))


def RMSNorm(dim: int, eps: float = 1e-6, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> Module:
    d, dev = _place(dtype, device)
    return Module(_C.nx_rms_norm_create(int(dim), float(eps), d, dev, None))


def Dropout(p: float = 0.5) -> Module:
    return Module(_C.nx_dropout_create(float(p)))


def Activation(name: str) -> Module:
    """Any unary op of the registry without a parameter (relu, gelu, gelu_tanh, silu, softplus, sigmoid,
    tanh...), or leaky_relu, swish, gcu, gaussian, softmax, identity."""
    return Module(_C.nx_activation_create(name))


def ReLU() -> Module:
    return Activation("relu")


def GELU(approximate: str = "none") -> Module:
    return Activation("gelu_tanh" if approximate == "tanh" else "gelu")


def Tanh() -> Module:
    return Activation("tanh")


def Sigmoid() -> Module:
    return Activation("sigmoid")


def Flatten() -> Module:
    return Module(_C.nx_flatten_create())


def Conv2d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
           bias: bool = True, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> Module:
    d, dev = _place(dtype, device)
    return Module(_C.nx_conv2d_create(int(in_channels), int(out_channels), int(kernel_size), int(stride),
                                      int(padding), bool(bias), d, dev, None))


def MaxPool2d(kernel_size: int, stride: Optional[int] = None) -> Module:
    return Module(_C.nx_max_pool2d_create(int(kernel_size), int(kernel_size if stride is None else stride)))


def AvgPool2d(kernel_size: int, stride: Optional[int] = None) -> Module:
    return Module(_C.nx_avg_pool2d_create(int(kernel_size), int(kernel_size if stride is None else stride)))


def Sequential(*layers: Module) -> Module:
    """Applies layers in order (they are shared, not copied)."""
    return Module(_C.nx_sequential_create([m._m for m in layers]), layers)


def Residual(inner: Module) -> Module:
    """x + inner(x)."""
    return Module(_C.nx_residual_create(inner._m), [inner])


def SwiGLU(dim: int, hidden: int, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> Module:
    d, dev = _place(dtype, device)
    return Module(_C.nx_swiglu_create(int(dim), int(hidden), d, dev, None))


def MultiheadAttention(dim: int, heads: int, kv_heads: int = 0, causal: bool = False, alibi: bool = False,
                       rope: bool = False, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> Module:
    """Self-attention on [batch, seq, dim] (grouped-query when kv_heads < heads)."""
    c = _C.nx_attention_config()
    c.dim, c.heads, c.kv_heads, c.causal, c.alibi, c.rope = int(dim), int(heads), int(kv_heads), causal, alibi, rope
    d, dev = _place(dtype, device)
    return Module(_C.nx_attention_create(c, d, dev, None))


_ACTIVATIONS = {"gelu": "NX_ACTIVATION_GELU", "gelu_tanh": "NX_ACTIVATION_GELU_TANH", "relu": "NX_ACTIVATION_RELU",
                "silu": "NX_ACTIVATION_SILU"}


def _transformer_config(activation: str = "gelu", **kw: Any) -> Any:
    c = _C.nx_transformer_config()
    for k, v in kw.items():
        setattr(c, k, v)
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}")
    c.activation = getattr(_C, _ACTIVATIONS[activation])
    return c


def TransformerBlock(dim: int, heads: int, kv_heads: int = 0, ffn_hidden: int = 0, alibi: bool = False,
                     rope: bool = False, swiglu: bool = False, rms_norm: bool = False, dropout: float = 0.0,
                     dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu", activation: str = "gelu",
                     checkpoint: bool = False) -> Module:
    """Pre-norm block: x + attn(norm(x)), then x + ffn(norm(x)); activation ("gelu", "gelu_tanh",
    "relu", "silu") is the MLP's when not swiglu. checkpoint: keep only the block's input in training
    and recompute the block inside backward."""
    c = _transformer_config(vocab=1, context=1, dim=dim, layers=1, heads=heads, kv_heads=kv_heads,
                            ffn_hidden=ffn_hidden, alibi=alibi, rope=rope, swiglu=swiglu, rms_norm=rms_norm,
                            dropout=float(dropout), activation=activation, checkpoint_every=int(bool(checkpoint)))
    d, dev = _place(dtype, device)
    return Module(_C.nx_transformer_block_create(c, d, dev, None))


class GPT(Module):
    """Decoder-only language model: [batch, seq] token ids -> [batch, seq, vocab] logits."""

    __slots__ = ()

    def __init__(self, vocab: int, context: int, dim: int, layers: int, heads: int, kv_heads: int = 0,
                 ffn_hidden: int = 0, alibi: bool = False, rope: bool = False, swiglu: bool = False,
                 rms_norm: bool = False, tie_embeddings: bool = False, dropout: float = 0.0,
                 dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu", activation: str = "gelu",
                 checkpoint_every: int = 0) -> None:
        """checkpoint_every n > 0: blocks 0, n, 2n... keep only their input in training and are
        recomputed inside backward (gradient checkpointing; 1: every block)."""
        c = _transformer_config(vocab=vocab, context=context, dim=dim, layers=layers, heads=heads,
                                kv_heads=kv_heads, ffn_hidden=ffn_hidden, alibi=alibi, rope=rope, swiglu=swiglu,
                                rms_norm=rms_norm, tie_embeddings=tie_embeddings, dropout=float(dropout),
                                activation=activation, checkpoint_every=int(checkpoint_every))
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_gpt_create(c, d, dev, None))

    def generate(self, prompt: Sequence[int], new_tokens: int, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0) -> Tensor:
        """The prompt followed by new_tokens sampled tokens, as a [1, n + new_tokens] int64 CPU tensor
        (temperature 0: greedy)."""
        c = _C.nx_sample_config()
        c.temperature, c.top_k, c.top_p, c.seed = float(temperature), int(top_k), float(top_p), int(seed)
        return _wrap(_C.nx_gpt_generate(self._m, [int(t) for t in prompt], int(new_tokens), c, None))


# ---------------------------------------------------------------- optimizers
class Optimizer:
    """Updates the given leaf tensors from their .grad (torch.optim semantics)."""

    __slots__ = ("_o", "_params")

    def __init__(self, handle: Any, params: List[Tensor]) -> None:
        self._o = handle
        self._params = params

    def step(self) -> None:
        _C.nx_optimizer_step(self._o, None)

    def zero_grad(self) -> None:
        _C.nx_optimizer_zero_grad(self._o)

    @property
    def lr(self) -> float:
        return _C.nx_optimizer_get_lr(self._o)

    @lr.setter
    def lr(self, value: float) -> None:
        _C.nx_optimizer_set_lr(self._o, float(value))

    def save(self, path: str) -> None:
        """Moments and step count as SafeTensors."""
        _C.nx_optimizer_save(self._o, str(path))

    def load(self, path: str) -> None:
        _C.nx_optimizer_load(self._o, str(path))


def _params(params: Iterable[Any]) -> List[Tensor]:
    if isinstance(params, Module):
        return params.parameters()
    return list(params)


def SGD(params: Iterable[Tensor], lr: float, momentum: float = 0.0, nesterov: bool = False,
        weight_decay: float = 0.0) -> Optimizer:
    ps = _params(params)
    o = _options(_C.nx_sgd_options, lr=float(lr), momentum=float(momentum), nesterov=bool(nesterov),
                 weight_decay=float(weight_decay))
    return Optimizer(_C.nx_sgd_create([p._h for p in ps], o), ps)


def Adam(params: Iterable[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
         weight_decay: float = 0.0) -> Optimizer:
    return _adam(params, lr, betas, eps, weight_decay, False)


def AdamW(params: Iterable[Tensor], lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
          weight_decay: float = 0.01) -> Optimizer:
    return _adam(params, lr, betas, eps, weight_decay, True)


def _adam(params: Iterable[Tensor], lr: float, betas: Tuple[float, float], eps: float, weight_decay: float,
          decoupled: bool) -> Optimizer:
    ps = _params(params)
    o = _options(_C.nx_adam_options, lr=float(lr), beta1=float(betas[0]), beta2=float(betas[1]), eps=float(eps),
                 weight_decay=float(weight_decay), decoupled_weight_decay=decoupled)
    return Optimizer(_C.nx_adam_create([p._h for p in ps], o), ps)


def clip_grad_norm_(params: Iterable[Tensor], max_norm: float) -> float:
    """Scales the gradients so that their global L2 norm is at most max_norm; returns the norm before."""
    return _C.nx_clip_grad_norm([p._h for p in _params(params)], float(max_norm), None)


def lr_step(base_lr: float, step: int, step_size: int, gamma: float) -> float:
    """StepLR: base_lr * gamma ** (step // step_size)."""
    return _C.nx_lr_step(float(base_lr), int(step), int(step_size), float(gamma))


def lr_cosine_warmup(base_lr: float, step: int, warmup_steps: int, total_steps: int, min_lr: float = 0.0) -> float:
    """Linear warm-up, then cosine decay to min_lr."""
    return _C.nx_lr_cosine_warmup(float(base_lr), int(step), int(warmup_steps), int(total_steps), float(min_lr))


# ---------------------------------------------------------------- text
class Tokenizer:
    """Byte-level (Tokenizer.bytes()) or byte-pair-encoding (Tokenizer.train_bpe(text, vocab_size))."""

    __slots__ = ("_t",)

    def __init__(self, handle: Any) -> None:
        self._t = handle

    @staticmethod
    def bytes() -> "Tokenizer":
        return Tokenizer(_C.nx_tokenizer_bytes_create())

    @staticmethod
    def train_bpe(text: Any, vocab_size: int) -> "Tokenizer":
        return Tokenizer(_C.nx_tokenizer_bpe_train(text, int(vocab_size)))

    @staticmethod
    def load(path: str) -> "Tokenizer":
        return Tokenizer(_C.nx_tokenizer_load(str(path)))

    def save(self, path: str) -> None:
        _C.nx_tokenizer_save(self._t, str(path))

    @property
    def vocab_size(self) -> int:
        return _C.nx_tokenizer_vocab_size(self._t)

    def encode(self, text: Any) -> Tensor:
        """str (UTF-8) or bytes -> 1-d int64 tensor of token ids."""
        return _wrap(_C.nx_tokenizer_encode(self._t, text))

    def decode(self, ids: Any, errors: str = "replace") -> str:
        if isinstance(ids, Tensor):
            ids = ids.reshape(-1).tolist()
        return _C.nx_tokenizer_decode(self._t, [int(i) for i in ids]).decode("utf-8", errors)


class TextLoader:
    """Shuffled (input, target) windows of a 1-d token tensor; target is input shifted by one."""

    __slots__ = ("_l", "_tokens")

    def __init__(self, tokens: Tensor, batch: int, seq: int, seed: int = 0) -> None:
        self._tokens = tokens
        self._l = _C.nx_text_loader_create(tokens._h, int(batch), int(seq), int(seed))

    def next(self, device: DeviceLike = "cpu") -> Tuple[Tensor, Tensor]:
        a, b = _C.nx_text_loader_next(self._l, to_device(device), None)
        return _wrap(a), _wrap(b)

    def __len__(self) -> int:
        return _C.nx_text_loader_batches_per_epoch(self._l)
