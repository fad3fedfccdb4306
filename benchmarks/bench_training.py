"""Time to 97% test accuracy on digits: mini against PyTorch CPU, the same CNN side by side.

    python benchmarks/bench_training.py [--threads 1] [--max-epochs 8] [--device cpu|numpy]

Both frameworks train the chapter 05 model (two 3x3 conv + BatchNorm + ReLU + max-pool
blocks, dropout, a linear head; 6,186 parameters) with AdamW (lr 1e-2, weight decay 1e-4),
a 20-step warmup then cosine schedule, batch 32, He init on the convolutions, on the same
80/20 split of scikit-learn's digits.  Test accuracy is measured after every epoch (not
timed); the clock stops at the first epoch that reaches 97%.  Printed: seconds and epochs
for each, and the ratio mini / PyTorch.  Without torch installed, only mini runs.  mini runs
on ``--device`` (default: the cpu backend when its extension is built, else numpy); the
model, each batch and the test set are moved there with ``.to(device)``.
"""
from __future__ import annotations

import argparse
import gc
import math
import time


TARGET = 0.97
THREADS = [1]
_LIMITS = []


def _limit_threads():
    """Limit every BLAS / OpenMP pool loaded so far to THREADS[0] threads.  Called after the
    data is loaded: scikit-learn and scipy bring their own OpenBLAS and OpenMP runtimes (and
    reset numpy's), which a limit set before they load does not reach."""
    try:
        from threadpoolctl import threadpool_limits
        _LIMITS.append(threadpool_limits(THREADS[0]))
    except ImportError:
        pass


def _settle_heap():
    """Collect, then move every object alive now (the imported libraries: numpy, scipy,
    scikit-learn, the framework itself) out of the collector's reach, so that a full
    collection triggered inside the timed loop scans what the loop allocates, not the
    ~10^5 objects of the imports (~40 ms each time otherwise).  Done for both frameworks."""
    gc.collect()
    gc.freeze()


def mini_run(max_epochs: int, device: str = "numpy"):
    import mini
    from mini import nn
    from mini.nn import he_init, losses
    from mini.nn.modules.conv import Conv2d, MaxPool2d
    from mini.nn.modules.dropout import Dropout
    from mini.nn.modules.normalization import BatchNorm2d
    from mini.optim import lr_scheduler
    from mini.optim.adam import AdamW
    from mini.utils.data import DataLoader
    from mini.utils.data.datasets import digits_split

    mini.manual_seed(0)
    train, test = digits_split(0.2, seed=0)
    _limit_threads()
    model = nn.Sequential(Conv2d(1, 16, 3, padding=1), BatchNorm2d(16), nn.ReLU(), MaxPool2d(2),
                          Conv2d(16, 32, 3, padding=1), BatchNorm2d(32), nn.ReLU(), MaxPool2d(2),
                          nn.Flatten(), Dropout(0.1), nn.Linear(128, 10))
    for p in model.parameters():
        if p.ndim == 4:
            he_init.kaiming_normal_(p)
    model.to(device)
    loader = DataLoader(train, batch_size=32, shuffle=True)
    opt = AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)
    sched = lr_scheduler.WarmupCosineLR(opt, 20, max_epochs * len(loader))
    _settle_heap()
    xs, ys = test.tensors
    xs = xs.to(device)
    elapsed, acc = 0.0, 0.0
    for epoch in range(1, max_epochs + 1):
        start = time.perf_counter()
        model.train()
        for x, y in loader:
            loss = losses.cross_entropy(model(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        elapsed += time.perf_counter() - start
        model.eval()
        with mini.no_grad():
            acc = float((model(xs).argmax(dim=1).numpy() == ys.numpy()).mean())
        if acc >= TARGET:
            return elapsed, epoch, acc
    return math.inf, max_epochs, acc


def torch_run(max_epochs: int):
    import torch
    from torch import nn
    from mini.utils.data.datasets import digits_split

    torch.manual_seed(0)
    train, test = digits_split(0.2, seed=0)
    _limit_threads()
    xtr, ytr = (torch.from_numpy(t.numpy().copy()) for t in train.tensors)
    xte, yte = (torch.from_numpy(t.numpy().copy()) for t in test.tensors)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.1),
                          nn.Linear(128, 10))
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xtr, ytr), batch_size=32,
                                         shuffle=True)
    steps = max_epochs * len(loader)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)

    def lam(step, warm=20, total=steps):
        if step < warm:
            return (step + 1) / warm
        return (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm)))) / 2

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    _settle_heap()
    elapsed, acc = 0.0, 0.0
    for epoch in range(1, max_epochs + 1):
        start = time.perf_counter()
        model.train()
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        elapsed += time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            acc = float((model(xte).argmax(1) == yte).float().mean())
        if acc >= TARGET:
            return elapsed, epoch, acc
    return math.inf, max_epochs, acc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="BLAS / intra-op threads for both")
    ap.add_argument("--max-epochs", type=int, default=8)
    ap.add_argument("--device", default=None, help="mini's device: cpu (default when built) or numpy")
    args = ap.parse_args(argv)
    device = args.device
    if device in (None, "cpu"):
        # load the cpu extension (and its OpenMP runtime) before limiting the thread pools:
        # a runtime loaded after threadpool_limits keeps its default thread count
        try:
            from mini.backends import get_backend
            get_backend("cpu")
            device = "cpu"
        except Exception:
            if device == "cpu":
                raise
            device = "numpy"
    THREADS[0] = args.threads
    _limit_threads()
    m_sec, m_ep, m_acc = mini_run(args.max_epochs, device)
    print(f"mini   : {m_sec:6.2f} s to {TARGET:.0%} ({m_ep} epochs, test accuracy {m_acc:.2%}, "
          f"device={device})")
    try:
        import torch
    except ImportError:
        print("torch  : not installed; no ratio")
        return 0
    torch.set_num_threads(args.threads)
    t_sec, t_ep, t_acc = torch_run(args.max_epochs)
    print(f"torch  : {t_sec:6.2f} s to {TARGET:.0%} ({t_ep} epochs, test accuracy {t_acc:.2%})")
    print(f"ratio  : mini / torch = {m_sec / t_sec:.2f}x   (time per epoch: "
          f"{(m_sec / m_ep) / (t_sec / t_ep):.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
