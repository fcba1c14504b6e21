"""NexusGrad from Python: the C quick start (examples/c/quickstart.c) as a script, plus a few steps
of gradient descent, NumPy and PyTorch interop, and an error.

    pip install .                      # or: cmake -DNEXUS_PYTHON=ON, PYTHONPATH=<build>/python
    python examples/python/quickstart.py [cpu|cuda]
"""
import sys

import numpy as np

import nexusgrad as ng


def main(device: str = "cpu") -> None:
    ng.manual_seed(42)
    x = ng.Tensor.randn([2, 4], device=device)
    w = ng.Tensor.randn([4, 3], requires_grad=True, device=device)
    y = ng.matmul(x, w)
    loss = ng.sum(y)
    ng.backward(loss)
    print("d loss / d w =", w.grad)

    # A tiny regression: fit w so that x @ w matches a target, with plain gradient descent.
    target = ng.randn(2, 3, device=device)
    for step in range(50):
        loss = ng.mse_loss(x @ w, target)
        w.zero_grad()
        loss.backward()
        with ng.no_grad():
            w -= 0.1 * w.grad
    print(f"loss after 50 steps: {loss.item():.5f}")

    # NumPy sees the tensor's memory (CPU); from_numpy shares the other way.
    if device == "cpu":
        a = np.asarray(y)
        print("numpy view of y:", a.shape, a.dtype)
        t = ng.from_numpy(np.arange(4.0))
        print("from_numpy:", t)
    try:
        import torch

        print("torch sees:", torch.from_dlpack(ng.arange(3.0, device=device)))
    except ImportError:
        pass

    try:
        ng.matmul(x, x)
    except ng.ShapeError as e:  # also a ValueError
        print("ShapeError:", e.message)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")
