"""Mini-batches for training loops, as torch.utils.data's Dataset, TensorDataset and DataLoader,
over NumPy arrays (the usual source of a training set) or Tensors.

    from nexusgrad.data import TensorDataset, DataLoader
    loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True, drop_last=True)
    for xb, yb in loader:            # Tensors: xb [64, ...] in X's dtype, yb [64]
        ...

Batches are made in the calling thread (num_workers and pin_memory are accepted and ignored).
Shuffling draws a new order every epoch from ``generator`` (a numpy.random.Generator or an int
seed) or, without one, from a seed taken from nexusgrad's generator, so that
``nexusgrad.manual_seed`` makes it reproducible as torch.manual_seed does torch's. The orders
themselves are not torch's (another generator).
"""
from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, Callable, Iterator, List, Optional, Sequence

import numpy as np

from . import _nexus as _C
from ._dtypes import float64, int64
from .tensor import Tensor, _wrap, from_numpy, rand, tensor

__all__ = ["Dataset", "TensorDataset", "DataLoader", "default_collate"]

# NumPy dtypes a Tensor can share without conversion (others go through nexusgrad.tensor's rules:
# uint8 and the other integer widths become int64).
_SHAREABLE = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64, np.int32, np.int64, np.bool_))


def _from_array(a: np.ndarray) -> Tensor:
    """A Tensor of a freshly made NumPy array (shared, not copied again, when its dtype allows)."""
    return from_numpy(np.ascontiguousarray(a)) if a.dtype in _SHAREABLE else tensor(a)


class Dataset:
    """Base of map-style datasets: subclasses define __getitem__(i) and __len__()."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__} must define __len__")


class TensorDataset(Dataset):
    """Samples i of several arrays (NumPy arrays, Tensors or anything NumPy converts) with the same
    first dimension: dataset[i] is a tuple of Tensors, one row of each."""

    def __init__(self, *arrays: Any) -> None:
        self.arrays = [a if isinstance(a, (Tensor, np.ndarray)) else np.asarray(a) for a in arrays]
        if not self.arrays:
            raise ValueError("TensorDataset needs at least one array")
        lengths = [len(a) for a in self.arrays]
        if any(n != lengths[0] for n in lengths):
            raise ValueError(f"TensorDataset: the arrays have different first dimensions {lengths}")

    def __len__(self) -> int:
        return len(self.arrays[0])

    def __getitem__(self, index: int) -> tuple:
        i = operator.index(index)
        return tuple(a[i] if isinstance(a, Tensor) else tensor(a[i]) for a in self.arrays)

    def rows(self, indices: np.ndarray) -> List[Tensor]:
        """One batch: the given rows of every array, gathered at once (np.take / index_select)."""
        out = []
        for a in self.arrays:
            if isinstance(a, Tensor):
                idx = _C.nx_tensor_from_data(indices, [indices.size], _C.NX_I64, _C.nx_tensor_device(a._h), None)
                out.append(_wrap(_C.nx_index_select(a._h, idx, 0, None)))
            else:
                out.append(_from_array(np.take(a, indices, axis=0)))
        return out


def default_collate(batch: Sequence[Any]) -> Any:
    """Samples -> one batch, as torch's default_collate: Tensors are stacked, NumPy arrays and
    scalars stacked into Tensors (Python floats as float64, ints as int64), tuples and lists
    collated field by field (a list), dicts key by key; strings stay a list."""
    from .functional import stack

    first = batch[0]
    if isinstance(first, Tensor):
        return stack(list(batch))
    if isinstance(first, (np.ndarray, np.generic)):
        return _from_array(np.stack(batch))
    if isinstance(first, bool):
        return tensor(list(batch))
    if isinstance(first, int):
        return tensor(list(batch), dtype=int64)
    if isinstance(first, float):
        return tensor(list(batch), dtype=float64)
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, Mapping):
        return {key: default_collate([sample[key] for sample in batch]) for key in first}
    if isinstance(first, (tuple, list)):
        if any(len(sample) != len(first) for sample in batch):
            raise ValueError("default_collate: the samples of a batch have different numbers of fields")
        return [default_collate(list(field)) for field in zip(*batch)]
    raise TypeError(f"default_collate: cannot batch samples of type {type(first).__name__}; pass a collate_fn")


class DataLoader:
    """Iterates over a dataset in batches of batch_size samples, in order or shuffled anew each epoch;
    drop_last drops a last, smaller batch. A TensorDataset without collate_fn is batched by
    gathering rows (one np.take per array), other datasets sample by sample through collate_fn
    (default_collate)."""

    def __init__(self, dataset: Any, batch_size: int = 1, shuffle: bool = False, drop_last: bool = False,
                 generator: Any = None, collate_fn: Optional[Callable[[List[Any]], Any]] = None,
                 num_workers: int = 0, pin_memory: bool = False) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size!r}")
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.collate_fn = collate_fn
        if generator is None or isinstance(generator, np.random.Generator):
            self.generator = generator
        else:
            self.generator = np.random.default_rng(operator.index(generator))

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self) -> np.ndarray:
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        rng = self.generator
        if rng is None:  # a seed from nexusgrad's generator (64 random bits per draw)
            rng = np.random.default_rng((rand(4, dtype=float64).numpy() * 2.0 ** 53).astype(np.uint64))
        return rng.permutation(n).astype(np.int64)

    def __iter__(self) -> Iterator[Any]:
        order = self._order()
        n, size = len(order), self.batch_size
        end = n - n % size if self.drop_last else n
        for start in range(0, end, size):
            yield self._batch(order[start:start + size])

    def _batch(self, indices: np.ndarray) -> Any:
        if self.collate_fn is None and isinstance(self.dataset, TensorDataset):
            return self.dataset.rows(indices)
        return (self.collate_fn or default_collate)([self.dataset[int(i)] for i in indices])
