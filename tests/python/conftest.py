"""Shared fixtures of the nexusgrad Python tests (run by ctest -L python with PYTHONPATH set to the
build tree's python/ directory, or directly with pytest after `pip install .`)."""
import gc
import os
import sys

import pytest

try:
    import nexusgrad  # noqa: F401
except ImportError:  # running pytest by hand from the repository: try the usual build trees
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for build in ("build-py", "build"):
        cand = os.path.join(root, build, "python")
        if os.path.isdir(os.path.join(cand, "nexusgrad")):
            sys.path.insert(0, cand)
            break
    import nexusgrad  # noqa: F401

import nexusgrad as ng

DEVICES = ["cpu"] + (["cuda:0"] if ng.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    """Every test that takes `device` runs on the CPU and, when present, on the first GPU."""
    return request.param


@pytest.fixture(autouse=True)
def _seed_and_leaks():
    """Seeds the generators (ours, numpy's and torch's where the tests have it: a test's random
    inputs are the same on every run), and checks that the test left no tensor handle alive."""
    import numpy as np

    ng.manual_seed(1234)
    np.random.seed(1234)
    try:
        import torch
    except ImportError:  # an installed package tested without torch: its torch tests skip
        torch = None
    if torch is not None:
        torch.manual_seed(1234)
    before = ng.live_tensor_count()
    if before:
        gc.collect()
        before = ng.live_tensor_count()
    yield
    after = ng.live_tensor_count()
    if after > before:  # reference cycles (rare) need the collector
        gc.collect()
        after = ng.live_tensor_count()
    assert after <= before, f"the test leaked {after - before} tensor handles"
