"""Per-call overhead of nexusgrad from Python, against PyTorch in the same process.

    PYTHONPATH=<build>/python python3 bench/python_overhead.py [--device cpu|cuda] [--threads N]

Two workloads small enough that the time is the binding and dispatch, not the arithmetic:
  add:     a + b on 16 float32 elements
  fwd+bwd: y = relu(x @ w) with x, w 16x16 (w requires grad), loss = sum(y), backward
Each is timed as the best of several repeats of many calls; the table gives microseconds per call
and the ratio nexusgrad / PyTorch (below 1: nexusgrad is faster). The "nexusgrad raw" row calls the
SWIG module nexusgrad._nexus directly, which shows the cost of the Pythonic Tensor layer.
"""
import argparse
import os
import sys
import timeit


def best_us(fn, number, repeat=7):
    fn()  # warm up
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads for both libraries (default 1)")
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args()

    import torch

    import nexusgrad as ng
    from nexusgrad import _nexus as C

    torch.set_num_threads(args.threads)
    ng.set_num_threads(args.threads)
    dev = args.device
    cuda = dev.startswith("cuda")
    sync_t = torch.cuda.synchronize if cuda else (lambda: None)
    sync_n = ng.cuda.synchronize if cuda else (lambda: None)
    n = args.number if not cuda else max(args.number // 4, 1000)

    # ---- a + b, 16 floats
    a, b = ng.randn(16, device=dev), ng.randn(16, device=dev)
    ta, tb = torch.randn(16, device=dev), torch.randn(16, device=dev)
    ha, hb = a._h, b._h

    def ng_add():
        a + b

    def raw_add():
        C.nx_add(ha, hb, None)

    def torch_add():
        ta + tb

    # ---- 16x16 matmul, relu, sum, backward
    x = ng.randn(16, 16, device=dev)
    w = ng.randn(16, 16, device=dev, requires_grad=True)
    tx = torch.randn(16, 16, device=dev)
    tw = torch.randn(16, 16, device=dev, requires_grad=True)
    hx, hw = x._h, w._h

    def ng_step():
        loss = ng.sum(ng.relu(x @ w))
        ng.backward(loss)
        w.zero_grad()

    def raw_step():
        y = C.nx_relu(C.nx_matmul(hx, hw, None), None)
        loss = C.nx_sum(y, None, False, None)
        C.nx_backward(loss, None, None, None)
        C.nx_tensor_zero_grad(hw)

    def torch_step():
        loss = torch.sum(torch.relu(tx @ tw))
        loss.backward()
        tw.grad = None

    def timed(fn, sync, number):
        def run():
            fn()
        if not cuda:
            return best_us(run, number)

        def batch():
            for _ in range(number):
                fn()
            sync()
        return min(timeit.repeat(batch, number=1, repeat=5)) / number * 1e6

    rows = []
    for name, f_ng, f_raw, f_t, num in [("add (16 floats)", ng_add, raw_add, torch_add, n),
                                          ("fwd+bwd (16x16 matmul, relu, sum)", ng_step, raw_step, torch_step,
                                           max(n // 5, 200))]:
        t_ng = timed(f_ng, sync_n, num)
        t_raw = timed(f_raw, sync_n, num)
        t_t = timed(f_t, sync_t, num)
        rows.append((name, t_ng, t_raw, t_t))

    print(f"nexusgrad {ng.version()} ({ng.cpu_simd_level()}) vs torch {torch.__version__}, device {dev}, "
          f"{args.threads} thread(s), python {sys.version.split()[0]}")
    hdr = f"{'workload':36} {'nexusgrad us':>13} {'raw _nexus us':>14} {'torch us':>10} {'ratio ng/torch':>15}"
    print(hdr)
    print("-" * len(hdr))
    for name, t_ng, t_raw, t_t in rows:
        print(f"{name:36} {t_ng:13.2f} {t_raw:14.2f} {t_t:10.2f} {t_ng / t_t:15.2f}")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
