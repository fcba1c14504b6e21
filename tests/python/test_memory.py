"""Handles are freed by the garbage collector exactly once: 100,000 create/free cycles leave
nx_live_handle_count(NX_HANDLE_TENSOR) and the process's resident memory flat."""
import gc
import os

import numpy as np
import torch

import nexusgrad as ng

CYCLES = 100_000


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def churn(n):
    a = ng.ones(16)
    for i in range(n):
        t = ng.randn(4, 4)  # create, op, view, free
        u = (t + a.reshape(4, 4))[1:, ::2]
        del t, u


def test_100k_create_free_cycles_are_flat():
    gc.collect()
    base = ng.live_tensor_count()
    churn(2_000)  # warm up allocator pools and caches
    gc.collect()
    rss0 = rss_bytes()
    churn(CYCLES)
    gc.collect()
    assert ng.live_tensor_count() == base
    grown = rss_bytes() - rss0
    assert grown < 8 << 20, f"resident memory grew by {grown / 2**20:.1f} MiB over {CYCLES} cycles"


def test_autograd_cycles_are_flat():
    gc.collect()
    base = ng.live_tensor_count()
    w = ng.randn(8, 8, requires_grad=True)
    for _ in range(200):
        loss = ng.sum(ng.relu(ng.matmul(ng.randn(4, 8), w)))
        ng.backward(loss)
        w.zero_grad()
    graph_only = ng.sum(w * 2)  # a graph dropped without backward
    del graph_only, loss, w
    gc.collect()
    assert ng.live_tensor_count() == base


def test_interop_cycles_are_flat():
    gc.collect()
    base = ng.live_tensor_count()
    rss0 = None
    for i in range(20_000):
        if i == 2_000:
            gc.collect()
            rss0 = rss_bytes()
        a = np.ones(64, dtype=np.float32)
        t = ng.from_numpy(a)
        x = torch.from_dlpack(t)
        back = ng.from_dlpack(x)
        view = np.asarray(back)
        del a, t, x, back, view
    gc.collect()
    assert ng.live_tensor_count() == base
    assert rss_bytes() - rss0 < 8 << 20


def test_error_paths_do_not_leak():
    gc.collect()
    base = ng.live_tensor_count()
    x = ng.randn(2, 3)
    for _ in range(10_000):
        try:
            ng.matmul(x, x)
        except ng.ShapeError:
            pass
        try:
            ng.split(x, [1, 1], 1)
        except ng.ShapeError:
            pass
    del x
    gc.collect()
    assert ng.live_tensor_count() == base
