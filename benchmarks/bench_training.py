"""Time to 97% test accuracy on digits: one PyTorch-style script, run unchanged on mini and
on PyTorch CPU, side by side.

    python benchmarks/bench_training.py [--threads 1] [--max-epochs 8] [--device numpy]

``train`` below is written as a PyTorch user writes it (``torch.nn``, ``torch.nn.functional``,
``torch.optim``, ``torch.utils.data``, no device named anywhere) and takes the framework as
its argument: ``train(torch)`` and ``train(mini)`` run the same lines.  So mini runs on its
defaults, as a user's script would: device ``cpu`` (the C++ kernels) when they are built.
``--device numpy`` calls ``mini.set_default_device("numpy")`` first, to time the portable
reference backend instead.

The model is the chapter 05 CNN (two 3x3 conv + BatchNorm + ReLU + max-pool blocks, dropout,
a linear head; 6,186 parameters) with AdamW (lr 1e-2, weight decay 1e-4), a 20-step warmup
then cosine schedule, batch 32, He init on the convolutions, on the same 80/20 split of
scikit-learn's digits.  Test accuracy is measured after every epoch (not timed); the clock
stops at the first epoch that reaches 97%.  With one thread (the default) the clock is the
process's CPU time, which other processes on a busy machine inflate less than wall time;
with more threads it is wall time.  Each framework trains ``--repeats`` times, alternating
with the other, and its best run counts.  Printed: seconds and epochs for each, and the
ratio mini / PyTorch.  Without torch installed, only mini runs.
"""
from __future__ import annotations

import argparse
import gc
import math
import time

TARGET = 0.97
THREADS = [1]
CLOCK = [time.process_time]  # CPU time with one thread (a busy machine does not inflate it)
_LIMITS = []


def train(torch, data, max_epochs: int):
    """The script: a PyTorch user's training loop, for the framework module ``torch``.
    Returns (seconds to TARGET, epochs, test accuracy)."""
    nn, F = torch.nn, torch.nn.functional
    (x_train, y_train), (x_test, y_test) = data
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Dropout(0.1),
                          nn.Linear(128, 10))
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
    train_set = torch.utils.data.TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
    loader = torch.utils.data.DataLoader(train_set, batch_size=32, shuffle=True)
    x_test, y_test = torch.from_numpy(x_test), torch.from_numpy(y_test)
    steps = max_epochs * len(loader)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-4)

    def warmup_cosine(step, warm=20):
        if step < warm:
            return (step + 1) / warm
        return (1 + math.cos(math.pi * min(1.0, (step - warm) / max(1, steps - warm)))) / 2

    sched = torch.optim.lr_scheduler.LambdaLR(opt, warmup_cosine)
    _settle_heap()
    elapsed, acc = 0.0, 0.0
    for epoch in range(1, max_epochs + 1):
        start = CLOCK[0]()
        model.train()
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        elapsed += CLOCK[0]() - start
        model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        if acc >= TARGET:
            return elapsed, epoch, acc
    return math.inf, max_epochs, acc


def _data():
    """The 80/20 split of digits as numpy arrays (the same for both frameworks)."""
    from mini.utils.data.datasets import digits_split
    train, test = digits_split(0.2, seed=0)
    return tuple(tuple(t.numpy().copy() for t in split.tensors) for split in (train, test))


def _limit_threads():
    """Limit every BLAS / OpenMP pool loaded so far to THREADS[0] threads.  Called after the
    data and each framework are loaded: scikit-learn, scipy and mini's kernels bring their
    own OpenBLAS and OpenMP runtimes, which a limit set before they load does not reach."""
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="BLAS / intra-op threads for both")
    ap.add_argument("--max-epochs", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5,
                    help="train each framework this many times, alternating; the best run counts")
    ap.add_argument("--device", default=None,
                    help="run mini on this default device (numpy: the reference backend); "
                         "default: mini's own default, as a user's script gets")
    args = ap.parse_args(argv)
    THREADS[0] = args.threads
    if args.threads > 1:      # CPU time would add the threads up: wall time instead
        CLOCK[0] = time.perf_counter
    data = _data()
    import mini
    if args.device is not None:
        mini.set_default_device(args.device)
    mini.zeros(1)  # load the default device (its kernels and OpenMP runtime) before limiting
    frameworks = {"mini": mini}
    try:
        import torch
        torch.set_num_threads(args.threads)
        frameworks["torch"] = torch
    except ImportError:
        pass
    _limit_threads()
    best = {}
    for _ in range(args.repeats):   # alternating, so a burst of load hits both alike
        for name, fw in frameworks.items():
            run = train(fw, data, args.max_epochs)
            if name not in best or run[0] < best[name][0]:
                best[name] = run
    m_sec, m_ep, m_acc = best["mini"]
    print(f"mini   : {m_sec:6.2f} s to {TARGET:.0%} ({m_ep} epochs, test accuracy {m_acc:.2%}, "
          f"device={mini.get_default_device()})")
    if "torch" not in best:
        print("torch  : not installed; no ratio")
        return 0
    t_sec, t_ep, t_acc = best["torch"]
    print(f"torch  : {t_sec:6.2f} s to {TARGET:.0%} ({t_ep} epochs, test accuracy {t_acc:.2%})")
    print(f"ratio  : mini / torch = {m_sec / t_sec:.2f}x   (time per epoch: "
          f"{(m_sec / m_ep) / (t_sec / t_ep):.2f}x; best of {args.repeats} alternating runs each)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
