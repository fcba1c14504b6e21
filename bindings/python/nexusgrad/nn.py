"""Layers, optimizers and text utilities of nexus.h (nx_module, nx_optimizer, nx_tokenizer,
nx_text_loader) with PyTorch's names: nexusgrad.nn.Linear(4, 3)(x), nexusgrad.nn.SGD(params)...

Layers are built by the engine (their parameters are initialized like PyTorch's defaults from
the generator seeded by nexusgrad.manual_seed); :class:`Module` holds their handles. Subclass
:class:`Module` as in torch: attributes that are :class:`Parameter`\\ s or Modules are registered,
named after the attribute, and reached by parameters(), state_dict(), train(), to()...

``nexusgrad.nn.functional`` is :mod:`nexusgrad.functional` (``import nexusgrad.nn.functional as F``).
"""
from __future__ import annotations

import sys
from collections import OrderedDict, namedtuple
from collections.abc import MutableMapping
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from . import _nexus as _C
from . import functional
from ._dtypes import DTypeLike, DeviceLike, float32, to_device, to_dtype
from .tensor import Tensor, _options, _wrap, no_grad, tensor, zeros

__all__ = ["Module", "Parameter", "Linear", "Embedding", "LayerNorm", "RMSNorm", "Dropout", "Activation", "ReLU",
           "GELU", "Tanh", "Sigmoid", "Flatten", "Conv2d", "MaxPool2d", "AvgPool2d", "Sequential", "ModuleList",
           "Residual", "SwiGLU", "MultiheadAttention", "TransformerBlock", "GPT", "Optimizer", "SGD", "Adam", "AdamW",
           "clip_grad_norm_", "lr_step", "lr_cosine_warmup", "Tokenizer", "TextLoader", "functional"]

# `import nexusgrad.nn.functional as F` (torch.nn.functional's spelling) finds the functional module.
sys.modules[__name__ + ".functional"] = functional


def _place(dtype: Optional[DTypeLike], device: DeviceLike) -> Tuple[int, str]:
    return (float32 if dtype is None else to_dtype(dtype)).value, to_device(device)


# ---------------------------------------------------------------- parameters
class _ParameterType(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and getattr(obj, "_param", False)


class Parameter(metaclass=_ParameterType):
    """torch.nn.Parameter: ``Parameter(data, requires_grad=True)`` is a leaf tensor sharing data's
    memory, marked so that assigning it to a Module attribute registers it.

    It is a :class:`Tensor` (``isinstance(p, nn.Parameter)`` and ``isinstance(p, Tensor)`` both
    hold; ``type(p) is Tensor``): a subclass would miss the op layer's ``type(x) is Tensor`` fast
    paths. A layer's parameters (``linear.weight``, ``parameters()``) are Parameters too."""

    def __new__(cls, data: Any = None, requires_grad: bool = True) -> Tensor:  # type: ignore[misc]
        src = zeros(0) if data is None else data if isinstance(data, Tensor) else tensor(data)
        p = _wrap(_C.nx_tensor_detach(src._h))
        if requires_grad:
            _C.nx_tensor_set_requires_grad(p._h, True)
        p._param = True
        return p


def _as_parameter(h: Any) -> Tensor:
    p = _wrap(h)
    p._param = True
    return p


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _move_in_place(t: Tensor, device: str) -> None:
    """Moves a registered tensor to device, keeping the Python object (as torch's module.to keeps
    the Parameter): its handle is replaced by a leaf copy on device."""
    h = _C.nx_tensor_to(_C.nx_tensor_detach(t._h), device, None)
    if _C.nx_tensor_get_requires_grad(t._h):
        _C.nx_tensor_set_requires_grad(h, True)
    t._h = h


IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


# ---------------------------------------------------------------- Module
class Module:
    """Base class of layers, as torch.nn.Module.

    Two kinds share it. The layers of this module (Linear, GPT...) hold an engine module (an
    ``nx_module`` handle, ``_m``) whose parameters the engine names. A Python subclass calls
    ``super().__init__()`` and assigns :class:`Parameter`\\ s and Modules as attributes, which are
    registered under the attribute's name (``self.fc = Linear(4, 3)`` gives ``fc.weight``); it
    defines ``forward``. Plain tensors assigned are ordinary attributes (use register_buffer to
    put one in the state_dict), as in torch.
    """

    def __init__(self, handle: Any = None, children: Sequence["Module"] = (),
                 child_names: Optional[Sequence[str]] = None) -> None:
        d = self.__dict__
        d["_m"] = handle
        d["_children"] = list(children)  # an engine container's layers: kept alive, shown by children()
        d["_child_names"] = list(child_names) if child_names is not None else [str(i) for i in range(len(children))]
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent"] = set()
        d["_modules"] = OrderedDict()
        d["_training"] = True

    # ------------------------------------------------------------ registration
    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if "_parameters" not in d:
            raise AttributeError(f"cannot assign {name!r} before Module.__init__() is called "
                                 f"(call super().__init__() first in {type(self).__name__}.__init__)")
        if isinstance(value, Parameter):
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            self.add_module(name, value)
        elif name in d["_parameters"]:
            if value is not None:
                raise TypeError(f"cannot assign a {type(value).__name__} as parameter {name!r} "
                                "(nexusgrad.nn.Parameter or None expected)")
            d["_parameters"][name] = None
        elif name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign a {type(value).__name__} as child module {name!r} "
                                "(nexusgrad.nn.Module or None expected)")
            d["_modules"][name] = None
        elif name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign a {type(value).__name__} as buffer {name!r} (Tensor or None expected)")
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # Only called when ordinary lookup fails: the registered members, then the engine's
        # parameters by name (linear.weight).
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            r = d.get(registry)
            if r is not None and name in r:
                return r[name]
        if not name.startswith("_") and d.get("_m") is not None:
            h = self._engine_parameter(name)
            if h is not None:
                return _as_parameter(h)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in d[registry]:
                del d[registry][name]
                d["_non_persistent"].discard(name)
                return
        object.__delattr__(self, name)

    def _engine_parameter(self, name: str) -> Any:
        for i in range(_C.nx_module_parameter_count(self._m)):
            pname, h = _C.nx_module_parameter(self._m, i)
            if pname == name:
                return h
        return None

    def _free_name(self, name: str, what: str) -> None:
        """Removes name from the other registries and the instance dict (a name means one thing)."""
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"{what} name must be a non-empty string without '.', got {name!r}")
        d = self.__dict__
        if d["_m"] is not None and self._engine_parameter(name) is not None:
            raise KeyError(f"{name!r} is a parameter of the engine layer {self.kind}: change its values in place "
                           f"(module.{name}.data = ..., load_state_dict) instead of replacing it")
        for registry in ("_parameters", "_buffers", "_modules"):
            d[registry].pop(name, None)
        d["_non_persistent"].discard(name)
        d.pop(name, None)

    def register_parameter(self, name: str, param: Optional[Tensor]) -> None:
        """Adds a parameter (a :class:`Parameter`, or None for an optional one) under name."""
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign a {type(param).__name__} as parameter {name!r} "
                            "(nexusgrad.nn.Parameter or None expected)")
        self._free_name(name, "parameter")
        self.__dict__["_parameters"][name] = param

    def register_buffer(self, name: str, tensor: Optional[Tensor], persistent: bool = True) -> None:
        """Adds a tensor that is state but not a parameter (in state_dict when persistent, moved by to())."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign a {type(tensor).__name__} as buffer {name!r} (Tensor or None expected)")
        self._free_name(name, "buffer")
        self.__dict__["_buffers"][name] = tensor
        if not persistent:
            self.__dict__["_non_persistent"].add(name)

    def add_module(self, name: str, module: Optional["Module"]) -> None:
        """Adds a child module under name (its parameters are then named name.<its names>)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a nexusgrad.nn.Module")
        self._free_name(name, "module")
        self.__dict__["_modules"][name] = module

    register_module = add_module

    # ------------------------------------------------------------ forward
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        """The engine layer's forward pass (recorded by autodiff). Python subclasses define their own."""
        if self._m is None:
            raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')
        return _wrap(_C.nx_module_forward(self._m, x._h, None))

    @property
    def kind(self) -> str:
        """The engine layer's kind ('Linear', 'GPT'...), or the class name of a Python module."""
        return _C.nx_module_kind(self._m) if self._m is not None else type(self).__name__

    # ------------------------------------------------------------ traversal
    def _child_edges(self) -> Iterator[Tuple[str, "Module", bool]]:
        """(name, child, inside_engine): an engine container's layers (whose parameters the
        container's engine module already lists), then the registered modules."""
        for name, child in zip(self._child_names, self._children):
            yield name, child, True
        for name, child in self._modules.items():
            if child is not None:
                yield name, child, False

    def _walk(self, prefix: str = "", memo: Optional[set] = None,
              inside_engine: bool = False) -> Iterator[Tuple[str, "Module", bool]]:
        """(dotted name, module, inside_engine) for self and its descendants, each module once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self, inside_engine
        for name, child, engine_edge in self._child_edges():
            yield from child._walk(_join(prefix, name), memo, engine_edge)

    def _own_parameters(self, inside_engine: bool) -> Iterator[Tuple[str, Tensor]]:
        if self._m is not None and not inside_engine:
            for i in range(_C.nx_module_parameter_count(self._m)):
                name, h = _C.nx_module_parameter(self._m, i)
                yield name, _as_parameter(h)
        for name, p in self._parameters.items():
            if p is not None:
                yield name, p

    def _state(self, prefix: str = "", with_buffers: bool = True,
               recurse: bool = True) -> Iterator[Tuple[str, Tensor]]:
        """Parameters then persistent buffers of each module in turn, as torch's state_dict orders them;
        a tensor registered twice is listed once."""
        seen = set()
        walk = self._walk(prefix) if recurse else iter([(prefix, self, False)])
        for mprefix, m, inside in walk:
            members = list(m._own_parameters(inside))
            if with_buffers:
                members += [(n, b) for n, b in m._buffers.items() if b is not None and n not in m._non_persistent]
            for name, t in members:
                if id(t) not in seen:
                    seen.add(id(t))
                    yield _join(mprefix, name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[Tuple[str, Tensor]]:
        """(dotted name, parameter) pairs; the tensors are the parameters themselves (not copies)."""
        return self._state(prefix, with_buffers=False, recurse=recurse)

    def parameters(self, recurse: bool = True) -> List[Tensor]:
        """The parameters, as a list (torch gives an iterator; a list serves every use of one but next())."""
        if self._m is not None and recurse and self._engine_only():  # one C call (clip_grad_norm_ per step)
            return [_as_parameter(h) for h in _C.nx_module_parameters(self._m)]
        return [p for _, p in self.named_parameters(recurse=recurse)]

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[Tuple[str, Tensor]]:
        walk = self._walk(prefix) if recurse else iter([(prefix, self, False)])
        for mprefix, m, _ in walk:
            for name, b in m._buffers.items():
                if b is not None:
                    yield _join(mprefix, name), b

    def buffers(self, recurse: bool = True) -> List[Tensor]:
        return [b for _, b in self.named_buffers(recurse=recurse)]

    def named_children(self) -> Iterator[Tuple[str, "Module"]]:
        seen = set()
        for name, child, _ in self._child_edges():
            if id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator["Module"]:
        return (m for _, m in self.named_children())

    def named_modules(self, prefix: str = "") -> Iterator[Tuple[str, "Module"]]:
        return ((name, m) for name, m, _ in self._walk(prefix))

    def modules(self) -> Iterator["Module"]:
        return (m for _, m in self.named_modules())

    def apply(self, fn: Callable[["Module"], Any]) -> "Module":
        """fn(module) for every child (recursively), then for self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------------------ state
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Name -> tensor for every parameter and persistent buffer, as torch's: the values share
        memory with the module's tensors and are detached (keep_vars=True: the tensors themselves)."""
        return OrderedDict((k, v if keep_vars else v.detach()) for k, v in self._state(prefix))

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copies state_dict's values into the parameters and buffers of the same names (cast to their
        dtype, moved to their device). Raises RuntimeError (nexusgrad.StateError) listing every
        mismatch, missing keys and unexpected ones when strict, and changes nothing then: all or
        nothing, where torch may have copied some entries before it raises."""
        own = OrderedDict(self._state())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
        if strict and missing:
            errors.insert(0, "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        sources = {}
        for name, target in own.items():
            if name not in state_dict:
                continue
            value = state_dict[name]
            src = value if isinstance(value, Tensor) else tensor(value)
            if src.shape != target.shape:
                errors.append(f"size mismatch for {name}: copying a param with shape {list(src.shape)} from "
                              f"checkpoint, the shape in current model is {list(target.shape)}.")
            sources[name] = src
        if errors:
            raise _C.StateError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        with no_grad():
            for name, src in sources.items():
                target = own[name]
                _C.nx_copy_(target._h, src.to(device=target.device)._h, None)
        return IncompatibleKeys(missing, unexpected)

    def _engine_only(self) -> bool:
        """Whether the engine alone holds this module's state (no Python registrations anywhere)."""
        return all(m._m is not None and not m._parameters and not m._buffers and not m._modules
                   for _, m, _ in self._walk())

    def save(self, path: str) -> None:
        """The state_dict as SafeTensors (atomic; nx_module_save for an engine layer)."""
        if self._engine_only():
            _C.nx_module_save(self._m, str(path))
        else:
            functional.save(dict(self.state_dict()), path)

    def load(self, path: str) -> "Module":
        """Loads a file written by save (every name, shape and dtype is checked first: all or nothing)."""
        if self._engine_only():
            _C.nx_module_load(self._m, str(path))
        else:
            self.load_state_dict(functional.load(path))
        return self

    # ------------------------------------------------------------ modes, devices, gradients
    @property
    def training(self) -> bool:
        """Whether the module is in training mode (see train() and eval())."""
        return _C.nx_module_get_training(self._m) if self._m is not None else self.__dict__["_training"]

    @training.setter
    def training(self, mode: bool) -> None:
        """This module's flag only (train() also sets the children's)."""
        if self._m is not None:
            _C.nx_module_set_training(self._m, bool(mode))
        self.__dict__["_training"] = bool(mode)

    def train(self, mode: bool = True) -> "Module":
        """Training mode (dropout active; the default) or, with mode False, evaluation mode, for this
        module and its children."""
        self.training = mode
        for child in self._modules.values():
            if child is not None:
                child.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def to(self, *args: Any, device: DeviceLike = None, dtype: Optional[DTypeLike] = None) -> "Module":
        """module.to('cuda'): moves every parameter and buffer in place and returns self. Tensors taken
        from an engine layer before keep the old data (as do optimizers made before: make them after,
        as torch advises). A dtype raises NotSupportedError: nx_module_to changes the device only."""
        for a in args:
            if isinstance(a, tuple) or type(a).__name__ == "device" or \
                    (isinstance(a, str) and (a.startswith("cpu") or a.startswith("cuda"))):
                device = a
            else:
                dtype = a
        if dtype is not None:
            raise _C.NotSupportedError("Module.to(dtype): the C API moves a module between devices only "
                                       "(nx_module_to); create the layers with dtype=... instead")
        if device is None:
            return self
        dev = to_device(device)
        for _, m, inside in self._walk():
            if m._m is not None and not inside:
                _C.nx_module_to(m._m, dev, None)
            for registry in (m._parameters, m._buffers):
                for t in registry.values():
                    if t is not None and _C.nx_tensor_device(t._h) != dev:
                        _move_in_place(t, dev)
        return self

    def cpu(self) -> "Module":
        return self.to("cpu")

    def cuda(self, device: int = 0) -> "Module":
        return self.to(f"cuda:{device}")

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Sets requires_grad on every parameter (freezing with False)."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drops every parameter's gradient (set_to_none, the default of torch 2; torch 1.13's default
        was False), or with set_to_none=False fills the existing gradients with zeros."""
        _zero_grads(self.parameters(), set_to_none)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Module":
        """A copy with copied parameters, for modules written in Python only: the C API cannot copy
        an engine layer (no nx_module_clone), so one inside raises NotSupportedError."""
        if any(m._m is not None for m in self.modules()):
            raise _C.NotSupportedError(f"copy.deepcopy({type(self).__name__}): engine layers cannot be copied; "
                                       "keep a copy of the state instead: "
                                       "{k: v.clone() for k, v in model.state_dict().items()}")
        import copy

        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        return new

    def __repr__(self) -> str:
        if self._m is not None and not self._modules:
            name = self.kind if type(self) in (Module, Activation) else type(self).__name__
            return f"{name}({_C.nx_module_parameter_count(self._m)} parameters)"
        lines = [f"({name}): " + repr(child).replace("\n", "\n  ") for name, child in self._modules.items()]
        return type(self).__name__ + "(" + ("\n  " + "\n  ".join(lines) + "\n" if lines else "") + ")"


def _zero_grads(params: Iterable[Tensor], set_to_none: bool) -> None:
    with no_grad():
        for p in params:
            if set_to_none:
                _C.nx_tensor_zero_grad(p._h)
            else:
                g = _C.nx_tensor_grad(p._h)
                if g is not None:
                    _wrap(g).zero_()  # a copy of 0, not a multiplication: NaN gradients become 0 too


# ---------------------------------------------------------------- layers of the engine
class Linear(Module):
    """x @ weight.T + bias."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype: Optional[DTypeLike] = None,
                 device: DeviceLike = "cpu") -> None:
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_linear_create(int(in_features), int(out_features), bool(bias), d, dev, None))


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: Optional[DTypeLike] = None,
                 device: DeviceLike = "cpu") -> None:
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_embedding_create(int(num_embeddings), int(embedding_dim), d, dev, None))


class LayerNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5, dtype: Optional[DTypeLike] = None,
                 device: DeviceLike = "cpu") -> None:
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_layer_norm_create(int(dim), float(eps), d, dev, None))


class RMSNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-6, dtype: Optional[DTypeLike] = None,
                 device: DeviceLike = "cpu") -> None:
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_rms_norm_create(int(dim), float(eps), d, dev, None))


class Dropout(Module):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__(_C.nx_dropout_create(float(p)))


class Activation(Module):
    """Any unary op of the registry without a parameter (relu, gelu, gelu_tanh, silu, softplus, sigmoid,
    tanh...), or leaky_relu, swish, gcu, gaussian, parcon (beta 1.5; cone and parabolic_cone are registry ops),
    softmax, identity."""

    def __init__(self, name: str) -> None:
        super().__init__(_C.nx_activation_create(name))


class ReLU(Activation):
    def __init__(self) -> None:
        super().__init__("relu")


class GELU(Activation):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__("gelu_tanh" if approximate == "tanh" else "gelu")


class Tanh(Activation):
    def __init__(self) -> None:
        super().__init__("tanh")


class Sigmoid(Activation):
    def __init__(self) -> None:
        super().__init__("sigmoid")


class Flatten(Module):
    def __init__(self) -> None:
        super().__init__(_C.nx_flatten_create())


class Conv2d(Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                 bias: bool = True, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> None:
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_conv2d_create(int(in_channels), int(out_channels), int(kernel_size), int(stride),
                                             int(padding), bool(bias), d, dev, None))


class MaxPool2d(Module):
    def __init__(self, kernel_size: int, stride: Optional[int] = None) -> None:
        super().__init__(_C.nx_max_pool2d_create(int(kernel_size), int(kernel_size if stride is None else stride)))


class AvgPool2d(Module):
    def __init__(self, kernel_size: int, stride: Optional[int] = None) -> None:
        super().__init__(_C.nx_avg_pool2d_create(int(kernel_size), int(kernel_size if stride is None else stride)))


def _engine_runs(m: "Module") -> bool:
    """Whether an engine container can run m itself: an engine layer with nothing added in Python."""
    return type(m).forward in (Module.forward, Sequential.forward, Residual.forward) and m._engine_only()


class Sequential(Module):
    """Applies the layers in order (they are shared, not copied). When every layer is an engine layer
    the engine runs them as one module (nx_sequential_create); otherwise (a Python module among
    them, or an OrderedDict of named layers) they are registered as "0", "1"... (or the dict's
    names) and run in turn from Python."""

    def __init__(self, *layers: Any) -> None:
        if len(layers) == 1 and isinstance(layers[0], Mapping):
            named = list(layers[0].items())
        else:
            named = [(str(i), m) for i, m in enumerate(layers)]
        mods = [m for _, m in named]
        if mods and all(isinstance(m, Module) and _engine_runs(m) for m in mods) and \
                not (len(layers) == 1 and isinstance(layers[0], Mapping)):
            super().__init__(_C.nx_sequential_create([m._m for m in mods]), mods)
        else:
            super().__init__()
            for name, m in named:
                self.add_module(name, m)

    def _layers(self) -> List[Module]:
        return self._children if self._m is not None else [m for m in self._modules.values() if m is not None]

    def forward(self, x: Any) -> Any:
        if self._m is not None:
            return Module.forward(self, x)
        for m in self._layers():
            x = m(x)
        return x

    def __getitem__(self, i: Any) -> Any:
        layers = self._layers()
        return Sequential(*layers[i]) if isinstance(i, slice) else layers[i]

    def __len__(self) -> int:
        return len(self._layers())

    def __iter__(self) -> Iterator[Module]:
        return iter(self._layers())


class ModuleList(Module):
    """A list of modules registered as "0", "1"... (torch.nn.ModuleList); it has no forward."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def __getitem__(self, i: Any) -> Any:
        mods = list(self._modules.values())
        return ModuleList(mods[i]) if isinstance(i, slice) else mods[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))


class Residual(Module):
    """x + inner(x) (one engine module when inner is an engine layer, else run from Python)."""

    def __init__(self, inner: Module) -> None:
        if _engine_runs(inner):
            super().__init__(_C.nx_residual_create(inner._m), [inner], ["inner"])
        else:
            super().__init__()
            self.inner = inner

    def forward(self, x: Tensor) -> Tensor:
        if self._m is not None:
            return Module.forward(self, x)
        return x + self.inner(x)


class SwiGLU(Module):
    def __init__(self, dim: int, hidden: int, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> None:
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_swiglu_create(int(dim), int(hidden), d, dev, None))


class MultiheadAttention(Module):
    """Self-attention on [batch, seq, dim] (grouped-query when kv_heads < heads)."""

    def __init__(self, dim: int, heads: int, kv_heads: int = 0, causal: bool = False, alibi: bool = False,
                 rope: bool = False, dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu") -> None:
        c = _C.nx_attention_config()
        c.dim, c.heads, c.kv_heads, c.causal, c.alibi, c.rope = int(dim), int(heads), int(kv_heads), causal, alibi, rope
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_attention_create(c, d, dev, None))


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


class TransformerBlock(Module):
    """Pre-norm block: x + attn(norm(x)), then x + ffn(norm(x)); activation ("gelu", "gelu_tanh",
    "relu", "silu") is the MLP's when not swiglu. checkpoint: keep only the block's input in training
    and recompute the block inside backward."""

    def __init__(self, dim: int, heads: int, kv_heads: int = 0, ffn_hidden: int = 0, alibi: bool = False,
                 rope: bool = False, swiglu: bool = False, rms_norm: bool = False, dropout: float = 0.0,
                 dtype: Optional[DTypeLike] = None, device: DeviceLike = "cpu", activation: str = "gelu",
                 checkpoint: bool = False) -> None:
        c = _transformer_config(vocab=1, context=1, dim=dim, layers=1, heads=heads, kv_heads=kv_heads,
                                ffn_hidden=ffn_hidden, alibi=alibi, rope=rope, swiglu=swiglu, rms_norm=rms_norm,
                                dropout=float(dropout), activation=activation, checkpoint_every=int(bool(checkpoint)))
        d, dev = _place(dtype, device)
        super().__init__(_C.nx_transformer_block_create(c, d, dev, None))


class GPT(Module):
    """Decoder-only language model: [batch, seq] token ids -> [batch, seq, vocab] logits."""

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
class _ParamGroup(MutableMapping):
    """The one parameter group of an engine optimizer, as torch's ``optimizer.param_groups[0]``:
    'lr' reads and writes the optimizer's learning rate; 'params' and the hyperparameters read."""

    def __init__(self, optimizer: "Optimizer") -> None:
        self._optimizer = optimizer

    def __getitem__(self, key: str) -> Any:
        if key == "lr":
            return self._optimizer.lr
        if key == "params":
            return list(self._optimizer._params)
        return self._optimizer._defaults[key]

    def __setitem__(self, key: str, value: Any) -> None:
        if key != "lr":
            raise KeyError(f"param group entry {key!r} cannot be changed after creation (only 'lr' can)")
        self._optimizer.lr = value

    def __delitem__(self, key: str) -> None:
        raise KeyError(f"param group entries cannot be deleted ({key!r})")

    def __iter__(self) -> Iterator[str]:
        return iter(["params", "lr", *self._optimizer._defaults])

    def __len__(self) -> int:
        return 2 + len(self._optimizer._defaults)

    def __repr__(self) -> str:
        return repr({k: (f"<{len(self['params'])} tensors>" if k == "params" else self[k]) for k in self})


class Optimizer:
    """Updates the given leaf tensors from their .grad (torch.optim semantics), with one parameter
    group: per-group options (a list of dicts) are not supported."""

    __slots__ = ("_o", "_params", "_defaults")

    def __init__(self, handle: Any, params: List[Tensor], defaults: Optional[Dict[str, Any]] = None) -> None:
        self._o = handle
        self._params = params
        self._defaults = dict(defaults or {})

    def step(self) -> None:
        _C.nx_optimizer_step(self._o, None)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drops the gradients (set_to_none, torch 2's default; torch 1.13's was False), or with
        set_to_none=False fills them with zeros."""
        if set_to_none:
            _C.nx_optimizer_zero_grad(self._o)
        else:
            _zero_grads(self._params, False)

    @property
    def lr(self) -> float:
        return _C.nx_optimizer_get_lr(self._o)

    @lr.setter
    def lr(self, value: float) -> None:
        _C.nx_optimizer_set_lr(self._o, float(value))

    @property
    def param_groups(self) -> List[_ParamGroup]:
        """[the one group]: ``optimizer.param_groups[0]["lr"] = 0.01`` sets the learning rate."""
        return [_ParamGroup(self)]

    def save(self, path: str) -> None:
        """Moments and step count as SafeTensors."""
        _C.nx_optimizer_save(self._o, str(path))

    def load(self, path: str) -> None:
        _C.nx_optimizer_load(self._o, str(path))


def _params(params: Any) -> List[Tensor]:
    if isinstance(params, Module):
        return params.parameters()
    ps = [params] if isinstance(params, Tensor) else list(params)
    for p in ps:
        if not isinstance(p, Tensor):
            raise TypeError(f"optimizer parameters must be Tensors, got a {type(p).__name__} (per-parameter "
                            "option groups are not supported: make one optimizer per group)")
    return ps


class SGD(Optimizer):
    """torch.optim.SGD (without dampening, which the engine lacks: a non-zero one is refused)."""

    __slots__ = ()

    def __init__(self, params: Any, lr: float, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        if dampening != 0:
            raise _C.NotSupportedError(f"SGD: dampening {dampening} is not supported by the engine (only 0)")
        ps = _params(params)
        o = _options(_C.nx_sgd_options, lr=float(lr), momentum=float(momentum), nesterov=bool(nesterov),
                     weight_decay=float(weight_decay))
        super().__init__(_C.nx_sgd_create([p._h for p in ps], o), ps,
                         dict(momentum=momentum, dampening=0.0, weight_decay=weight_decay, nesterov=nesterov))


class Adam(Optimizer):
    """torch.optim.Adam (L2 weight decay added to the gradient)."""

    __slots__ = ()
    _decoupled = False

    def __init__(self, params: Any, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None:
        ps = _params(params)
        o = _options(_C.nx_adam_options, lr=float(lr), beta1=float(betas[0]), beta2=float(betas[1]), eps=float(eps),
                     weight_decay=float(weight_decay), decoupled_weight_decay=self._decoupled)
        super().__init__(_C.nx_adam_create([p._h for p in ps], o), ps,
                         dict(betas=tuple(betas), eps=eps, weight_decay=weight_decay))


class AdamW(Adam):
    """torch.optim.AdamW (decoupled weight decay, default 0.01)."""

    __slots__ = ()
    _decoupled = True

    def __init__(self, params: Any, lr: float = 1e-3, betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)


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
