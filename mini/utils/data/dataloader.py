"""DataLoader: batches from a dataset, in a seeded order, optionally from worker processes.

Order.  With ``shuffle=True`` the order of epoch ``e`` is a permutation drawn from a
generator seeded with ``(seed, e)``; ``seed`` comes from ``generator=`` (an int or a numpy
Generator) or, by default, from mini's global stream when the loader is made (so
``mini.manual_seed`` fixes it).  The order of any epoch is therefore a pure function of the
seed and the epoch number, and ``state_dict()`` -- seed, epoch, batches already handed out
-- is all it takes to resume *in the middle of an epoch* with exactly the batches the
uninterrupted run would have seen.

Workers.  With ``num_workers=n > 0`` each ``iter(loader)`` starts ``n`` processes.  The main
process sends batch numbers and their indices to the workers round-robin and keeps
``prefetch_factor · n`` batches in flight; each worker builds its batch (``collate_fn`` of
the samples) and sends it back; the main process hands batches out in order, whichever
worker finished first.  When the epoch ends, or the loop stops early (``break``, an
exception, the iterator being dropped), the workers get a stop message and are joined,
and terminated if they do not exit within a second.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import queue as _queue
import sys
import traceback

import numpy as np

from mini.autograd.tensor import Tensor
from mini.ndarray import NDArray
from mini.utils.data.dataset import _Batched

__all__ = ["DataLoader", "default_collate"]


def _to_tensor(a: np.ndarray) -> Tensor:
    return Tensor._wrap(NDArray.from_numpy(np.asarray(a, order="C")))


def default_collate(batch):
    """Stack a list of samples into a batch: tensors and arrays are stacked along a new
    first axis, Python ints become an int64 tensor and floats a float64 tensor (as in
    PyTorch), tuples/lists/dicts are collated field by field, strings stay a list."""
    if isinstance(batch, _Batched):  # TensorDataset.__getitems__ already stacked it
        return tuple(_to_tensor(a) for a in batch)
    if not batch:
        raise ValueError("default_collate: empty batch")
    elem = batch[0]
    if isinstance(elem, Tensor):
        return _to_tensor(np.stack([b.detach().numpy() for b in batch]))
    if isinstance(elem, np.ndarray):
        return _to_tensor(np.stack(batch))
    if isinstance(elem, (bool, np.bool_)):
        return _to_tensor(np.asarray(batch, dtype=np.bool_))
    if isinstance(elem, (int, np.integer)):
        return _to_tensor(np.asarray(batch, dtype=np.int64))
    if isinstance(elem, (float, np.floating)):
        return _to_tensor(np.asarray(batch, dtype=np.float64))
    if isinstance(elem, str):
        return list(batch)
    if isinstance(elem, dict):
        return {k: default_collate([b[k] for b in batch]) for k in elem}
    if isinstance(elem, (tuple, list)):
        n = len(elem)
        if any(len(b) != n for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        cols = [default_collate([b[i] for b in batch]) for i in range(n)]
        return tuple(cols) if isinstance(elem, tuple) else cols
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                    f"dicts or lists; found {type(elem).__name__}")


def _fetch(dataset, indices, collate_fn):
    if collate_fn is None:
        if hasattr(dataset, "__getitems__"):
            return default_collate(dataset.__getitems__(indices))
        return default_collate([dataset[i] for i in indices])
    return collate_fn([dataset[i] for i in indices])


class _WorkerError:
    def __init__(self, worker_id: int, text: str):
        self.worker_id, self.text = worker_id, text


def _worker_loop(dataset, collate_fn, index_queue, result_queue, worker_id, seed,
                 worker_init_fn):
    import mini
    result_queue.cancel_join_thread()   # exit without waiting for unread batches
    mini.manual_seed(seed)              # each worker its own, reproducible stream
    np.random.seed(seed % 2**32)
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
    except Exception:
        result_queue.put((-1, _WorkerError(worker_id, traceback.format_exc())))
        return
    while True:
        try:
            task = index_queue.get()
        except (KeyboardInterrupt, EOFError, OSError):
            return
        if task is None:
            return
        batch_no, indices = task
        try:
            data = _fetch(dataset, indices, collate_fn)
        except Exception:
            data = _WorkerError(worker_id, traceback.format_exc())
        result_queue.put((batch_no, data))


def _mp_context():
    if sys.platform.startswith("linux"):
        return mp.get_context("fork")
    return mp.get_context("spawn")


class DataLoader:
    """Batches of ``dataset``, like ``torch.utils.data.DataLoader``.

    ``for x, y in DataLoader(TensorDataset(X, Y), batch_size=64, shuffle=True): ...``

    PyTorch's arguments that mini does not implement raise ``NotImplementedError`` instead
    of being ignored: ``batch_sampler``, ``persistent_workers=True`` (mini starts the
    workers for each epoch) and ``pin_memory_device``.  Two are accepted because they change
    nothing here: ``pin_memory=True`` (page-locked memory only speeds up copies to a GPU;
    mini's batches are ordinary host memory and stay so) and ``in_order=False`` (it only
    *allows* batches out of order; mini always hands them out in order).
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = False,
                 sampler=None, batch_sampler=None, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, drop_last: bool = False, timeout: float = 0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True):
        if persistent_workers:
            if num_workers == 0:
                raise ValueError("persistent_workers option needs num_workers > 0")
            raise NotImplementedError("DataLoader(persistent_workers=True) is not implemented in "
                                      "mini: its workers start for each epoch (seeded by the "
                                      "epoch); leave persistent_workers=False")
        if pin_memory_device:
            raise NotImplementedError(f"DataLoader(pin_memory_device={pin_memory_device!r}) is "
                                      f"not implemented in mini: batches stay in host memory")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if batch_size is None or int(batch_size) < 1:
            raise ValueError(f"batch_size should be a positive integer, got {batch_size!r}")
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                             "let num_workers > 0 to enable multiprocessing")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            raise NotImplementedError("mini's DataLoader takes batch_size/sampler, not batch_sampler")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.pin_memory = bool(pin_memory)      # accepted, no effect (see the class docstring)
        self.in_order = bool(in_order)          # accepted: batches always come in order
        self.sampler = sampler
        self.num_workers = int(num_workers)
        self.collate_fn = collate_fn
        self.drop_last = bool(drop_last)
        self.timeout = float(timeout)
        self.worker_init_fn = worker_init_fn
        self.prefetch_factor = 2 if prefetch_factor is None else int(prefetch_factor)
        self.multiprocessing_context = multiprocessing_context
        if generator is None:
            from mini import random as _random
            self.seed = int(_random.generator().integers(0, 2**63 - 1))
        elif isinstance(generator, np.random.Generator):
            self.seed = int(generator.integers(0, 2**63 - 1))
        else:
            self.seed = int(generator)
        self._epoch = -1        # epoch being iterated (-1: none started)
        self._position = 0      # batches of that epoch handed out so far
        self._resume = False

    # --- order --------------------------------------------------------------------------
    def __len__(self) -> int:
        n = len(self._base_indices())
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _base_indices(self):
        if self.sampler is not None:
            return list(self.sampler)
        return range(len(self.dataset))

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The sample indices of ``epoch`` in the order they are served."""
        base = np.asarray(list(self._base_indices()), dtype=np.int64)
        if not self.shuffle:
            return base
        rng = np.random.default_rng([self.seed % 2**63, int(epoch)])
        return base[rng.permutation(len(base))]

    def _batches(self, epoch: int) -> list[list[int]]:
        order = self.epoch_order(epoch).tolist()
        bs = self.batch_size
        batches = [order[i:i + bs] for i in range(0, len(order), bs)]
        if self.drop_last and batches and len(batches[-1]) < bs:
            batches.pop()
        return batches

    # --- resumable state ----------------------------------------------------------------
    def state_dict(self) -> dict:
        """Seed, epoch and position: where the next batch comes from."""
        return {"seed": self.seed, "epoch": self._epoch, "position": self._position,
                "shuffle": self.shuffle, "batch_size": self.batch_size,
                "num_samples": len(self._base_indices())}

    def load_state_dict(self, state: dict) -> None:
        """The next ``iter(loader)`` continues the saved epoch from the saved position."""
        if state.get("batch_size", self.batch_size) != self.batch_size or \
                state.get("num_samples", len(self._base_indices())) != len(self._base_indices()):
            raise ValueError(f"DataLoader.load_state_dict: the saved loader had batch_size "
                             f"{state.get('batch_size')} over {state.get('num_samples')} samples, "
                             f"this one has {self.batch_size} over {len(self._base_indices())}")
        self.seed = int(state["seed"])
        self._epoch = int(state["epoch"])
        self._position = int(state["position"])
        self._resume = True

    # --- iteration ----------------------------------------------------------------------
    def __iter__(self):
        if self._resume and self._epoch >= 0 and self._position < len(self):
            start = self._position
        else:
            self._epoch += 1
            self._position = 0
            start = 0
        self._resume = False
        batches = self._batches(self._epoch)[start:]
        if self.num_workers == 0:
            return self._single(batches)
        return self._multi(batches, self._epoch)

    def _single(self, batches):
        for idx in batches:
            data = _fetch(self.dataset, idx, self.collate_fn)
            self._position += 1
            yield data

    def _multi(self, batches, epoch):
        it = _WorkerPool(self, batches, epoch)
        try:
            for data in it:
                self._position += 1
                yield data
        finally:
            it.shutdown()


class _WorkerPool:
    """The workers of one epoch and the bookkeeping of the batches in flight."""

    def __init__(self, loader: DataLoader, batches, epoch: int):
        ctx = loader.multiprocessing_context
        if ctx is None:
            ctx = _mp_context()
        elif isinstance(ctx, str):
            ctx = mp.get_context(ctx)
        self.loader, self.batches = loader, batches
        self.result_queue = ctx.Queue()
        self.index_queues, self.workers = [], []
        base_seed = int(np.random.default_rng([loader.seed % 2**63, epoch, 1]).integers(2**62))
        for wid in range(loader.num_workers):
            q = ctx.Queue()
            w = ctx.Process(target=_worker_loop, daemon=True,
                            args=(loader.dataset, loader.collate_fn, q, self.result_queue, wid,
                                  base_seed + wid, loader.worker_init_fn))
            w.start()
            self.index_queues.append(q)
            self.workers.append(w)
        self.sent = 0
        self.buffer: dict[int, object] = {}
        self.closed = False
        for _ in range(loader.prefetch_factor * loader.num_workers):
            self._send()

    def _send(self) -> None:
        if self.sent < len(self.batches):
            q = self.index_queues[self.sent % len(self.index_queues)]
            q.put((self.sent, self.batches[self.sent]))
            self.sent += 1

    def _receive(self, want: int):
        waited = 0.0
        while want not in self.buffer:
            try:
                batch_no, data = self.result_queue.get(timeout=1.0)
            except _queue.Empty:
                waited += 1.0
                dead = [w for w in self.workers if not w.is_alive()]
                if dead:
                    codes = ", ".join(f"worker pid {w.pid} exit code {w.exitcode}" for w in dead)
                    raise RuntimeError(f"DataLoader worker(s) exited unexpectedly ({codes})")
                if self.loader.timeout and waited >= self.loader.timeout:
                    raise RuntimeError(f"DataLoader timed out after {self.loader.timeout} s "
                                       f"waiting for batch {want}")
                continue
            if isinstance(data, _WorkerError):
                raise RuntimeError(f"Caught an exception in DataLoader worker process "
                                   f"{data.worker_id}:\n{data.text}")
            self.buffer[batch_no] = data
        return self.buffer.pop(want)

    def __iter__(self):
        for want in range(len(self.batches)):
            data = self._receive(want)
            self._send()
            yield data

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        for q in self.index_queues:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for w in self.workers:
            w.join(timeout=1.0)
            if w.is_alive():
                w.terminate()
                w.join(timeout=1.0)
        for q in self.index_queues + [self.result_queue]:
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass
