"""DistributedDataParallel: the same model on every rank, each rank on its own part of the
batch, gradients averaged so every rank takes the same step.  Exercises
``06.assign_buckets``, ``06.mark_grad_ready`` and ``06.allreduce_hook``.

The four promises of data parallelism (same parameters, matched backward, partitioned data,
averaged gradients) and how DDP keeps them:

1. **Same parameters.**  At construction rank 0's parameters and buffers are broadcast to
   every rank; identical gradients and identical optimizer steps keep them identical.
2. **Buckets.**  One all-reduce per parameter would pay the per-message latency α for each
   of them; one all-reduce for the whole model could only start when backward has finished.
   DDP groups the parameters into buckets of about ``bucket_cap_mb`` megabytes, in reverse
   order of ``module.parameters()``, the order in which backward produces their gradients
   (:func:`assign_buckets`).
3. **Overlap.**  A hook on every parameter fires when its gradient has been accumulated
   (``Tensor.register_post_accumulate_grad_hook``).  When all the gradients of a bucket are
   final the bucket's all-reduce starts as a non-blocking MPI request
   (:func:`mark_grad_ready`), and backward carries on computing the gradients of earlier
   layers while the bytes travel.  Buckets start strictly in order, on every rank: MPI
   matches collectives by the order in which ranks issue them.
4. **Average.**  The communication hook (:func:`allreduce_hook` unless
   ``register_comm_hook`` sets another) divides the bucket by the world size and sums it
   over the ranks.  When the last bucket has been started, DDP waits for all of them and
   writes the averages back into each parameter's ``.grad``.

``no_sync()`` skips the averaging (gradients accumulate locally, for gradient accumulation
over micro-batches); the next backward outside it averages what has accumulated.
``find_unused_parameters=True`` handles parameters that a forward pass does not use: found by
walking the graph at the end of forward, they are marked ready at once (contributing zeros),
and a parameter no rank used keeps its ``.grad``.

Every hook and bucket is on the communication event log
(:func:`mini.distributed.record_communication`): ``grad_ready`` markers with the parameter
and bucket, and each bucket's all-reduce with origin ``"ddp bucket <b>"``.
"""
from __future__ import annotations

import contextlib

import numpy as np

from mini.autograd import grad_mode
from mini.autograd.function import AccumulateGrad
from mini.autograd.tensor import Tensor
from mini.exercises import exercise
from mini.nn.module import Module

__all__ = ["DistributedDataParallel", "GradBucket", "assign_buckets", "mark_grad_ready",
           "allreduce_hook"]


@exercise("06.assign_buckets")
def assign_buckets(sizes: list, bucket_cap_bytes: int) -> list:
    """Group parameters into buckets for the gradient all-reduce.

    ``sizes[i]`` is the size in bytes of parameter i (in ``module.parameters()`` order).
    Walk the parameters from the last to the first (backward produces gradients roughly in
    that order), adding each index to the open bucket; as soon as the bucket's total
    reaches ``bucket_cap_bytes`` (``>=``) close it and open a new one.  A parameter at least
    as large as the cap therefore closes the bucket it joins; the last bucket may be
    smaller.  Returns a list of buckets, each a list of parameter indices in the order they
    were added (no empty buckets; ``[]`` when there are no parameters).
    """
    ### BEGIN SOLUTION
    buckets, current, total = [], [], 0
    for i in reversed(range(len(sizes))):
        current.append(i)
        total += sizes[i]
        if total >= bucket_cap_bytes:
            buckets.append(current)
            current, total = [], 0
    if current:
        buckets.append(current)
    return buckets
    ### END SOLUTION


@exercise("06.mark_grad_ready")
def mark_grad_ready(state: dict, index: int, launch) -> None:
    """Called (once per backward) when the gradient of parameter ``index`` is final.

    ``state`` holds ``"bucket_of"`` (list: parameter index -> its bucket), ``"pending"``
    (list: per bucket, how many of its parameters are not ready yet) and ``"next_bucket"``
    (int: the first bucket not launched yet).  Count this parameter as ready in its bucket.
    Then launch buckets in order: while ``next_bucket`` is a bucket whose parameters are all
    ready, call ``launch(next_bucket)`` and move ``next_bucket`` on.  Never launch a bucket
    before all its gradients are ready, and never out of order (a later bucket that becomes
    ready first waits for the earlier ones): every rank must issue its all-reduces in the
    same order.  Returns None.
    """
    ### BEGIN SOLUTION
    bucket = state["bucket_of"][index]
    state["pending"][bucket] -= 1
    pending = state["pending"]
    while state["next_bucket"] < len(pending) and pending[state["next_bucket"]] == 0:
        launch(state["next_bucket"])
        state["next_bucket"] += 1
    ### END SOLUTION


class GradBucket:
    """What a communication hook receives (``torch.distributed.GradBucket``'s names)."""

    def __init__(self, index: int, buffer: Tensor, parameters: list, world_size: int):
        self._index, self._buffer, self._parameters = index, buffer, parameters
        self._world_size = world_size

    def index(self) -> int:
        return self._index

    def buffer(self) -> Tensor:
        """The bucket's gradients, flattened into one contiguous 1-D tensor (reduce it in
        place)."""
        return self._buffer

    def parameters(self) -> list:
        return list(self._parameters)

    def world_size(self) -> int:
        return self._world_size

    def is_last(self) -> bool:
        return self._index == 0


@exercise("06.allreduce_hook")
def allreduce_hook(state, bucket: GradBucket):
    """DDP's default communication hook: start averaging ``bucket.buffer()`` over all ranks,
    in place, without waiting for it.

    Divide the buffer by the world size, then start ``mini.distributed.all_reduce`` (a sum)
    with ``async_op=True`` and return its ``Work``: DDP calls ``wait()`` when every bucket
    has been started, so the communication overlaps the rest of backward.  ``state`` is
    whatever was passed to ``register_comm_hook`` (None by default).
    """
    ### BEGIN SOLUTION
    from mini.distributed import all_reduce, get_world_size
    buf = bucket.buffer()
    with grad_mode.no_grad():
        buf.div_(get_world_size())
    return all_reduce(buf, async_op=True)
    ### END SOLUTION


def ring_allreduce_hook(state, bucket: GradBucket):
    """A communication hook that averages each bucket with the ring all-reduce of
    ``06.ring_allreduce`` (blocking: it finishes before backward continues)."""
    from mini.distributed import get_world_size, ring_allreduce
    buf = bucket.buffer()
    ring_allreduce(buf)
    with grad_mode.no_grad():
        buf.div_(get_world_size())
    return None


def _leaf_variables(outputs) -> set[int]:
    """ids of the leaf tensors that the graph behind ``outputs`` accumulates into."""
    stack, seen, found = [], set(), set()

    def add(o):
        if isinstance(o, Tensor):
            if o.grad_fn is not None:
                stack.append(o.grad_fn)
            elif o.requires_grad:
                found.add(id(o))
        elif isinstance(o, (list, tuple)):
            for x in o:
                add(x)
        elif isinstance(o, dict):
            for x in o.values():
                add(x)

    add(outputs)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, AccumulateGrad):
            found.add(id(node.variable))
        for child, _ in node.next_functions:
            if child is not None and id(child) not in seen:
                stack.append(child)
    return found


class _Reducer:
    """The bucket bookkeeping of one DDP model across one backward pass."""

    def __init__(self, ddp: "DistributedDataParallel", params: list, names: list,
                 bucket_cap_bytes: int):
        self.ddp = ddp
        self.params, self.names = params, names
        sizes = [p.numel() * p.element_size() for p in params]
        self.buckets = [list(b) for b in assign_buckets(sizes, bucket_cap_bytes)]
        flat = sorted(i for b in self.buckets for i in b)
        if flat != list(range(len(params))):
            raise RuntimeError(f"assign_buckets must place every parameter index 0..{len(params) - 1} "
                               f"in exactly one bucket; it returned {self.buckets}")
        self.bucket_of = [0] * len(params)
        for b, members in enumerate(self.buckets):
            for i in members:
                self.bucket_of[i] = b
        self.active = False
        self.ready: set[int] = set()
        self.handles = [p.register_post_accumulate_grad_hook(self._hook_for(i))
                        for i, p in enumerate(params)]

    def _hook_for(self, i):
        def hook(param):
            self.grad_ready(i)
        return hook

    def prepare(self, outputs) -> None:
        from mini.distributed import events
        if self.active and self.ready:
            missing = [self.names[i] for i in range(len(self.params)) if i not in self.ready]
            self.active = False
            raise RuntimeError(
                f"DistributedDataParallel: the previous backward did not produce gradients for "
                f"the parameters {missing}, so their buckets were never reduced.  If your "
                f"forward does not use every parameter, pass find_unused_parameters=True; if "
                f"it ran backward twice per forward, run forward again first.")
        self.state = {"bucket_of": list(self.bucket_of), "pending": [len(b) for b in self.buckets],
                      "next_bucket": 0}
        self.ready = set()
        self.works = [None] * len(self.buckets)
        self.flats = [None] * len(self.buckets)
        self.used = None
        self.active = True
        if self.ddp.find_unused_parameters:
            reached = _leaf_variables(outputs)
            local = np.array([1 if id(p) in reached else 0 for p in self.params], dtype=np.int32)
            self.used = local.copy()
            from mini.distributed import all_reduce
            with events.origin("ddp unused-parameter map"):
                self.used_work = all_reduce(self.used, async_op=True)
            for i in np.flatnonzero(local == 0):
                self._mark(int(i))

    def grad_ready(self, i: int) -> None:
        if not self.active or not self.ddp.require_backward_grad_sync:
            return
        from mini.distributed import events
        events.mark("grad_ready", self.ddp.rank, param=i, bucket=self.bucket_of[i])
        with events.origin(f"ddp grad hook: param {i}"):
            self._mark(i)

    def _mark(self, i: int) -> None:
        if i in self.ready:
            raise RuntimeError(f"DistributedDataParallel: parameter {self.names[i]} was marked "
                               f"ready twice in one backward (each parameter must get its "
                               f"gradient once per forward; run forward again before another "
                               f"backward)")
        self.ready.add(i)
        mark_grad_ready(self.state, i, self._launch)
        if len(self.ready) == len(self.params):
            unlaunched = [b for b in range(len(self.buckets)) if self.flats[b] is None]
            if unlaunched:
                self.active = False
                raise RuntimeError(f"DistributedDataParallel: every gradient is ready but "
                                   f"buckets {unlaunched} were never launched "
                                   f"(mark_grad_ready must launch each bucket once all its "
                                   f"gradients are ready)")
            self._finish()

    def _launch(self, b: int) -> None:
        from mini.distributed import events
        if not 0 <= b < len(self.buckets) or self.works[b] is not None or self.flats[b] is not None:
            raise RuntimeError(f"DistributedDataParallel: bucket {b} launched twice or does not "
                               f"exist (there are {len(self.buckets)} buckets)")
        missing = [self.names[i] for i in self.buckets[b] if i not in self.ready]
        if missing:
            raise RuntimeError(f"DistributedDataParallel: bucket {b} was launched before the "
                               f"gradients of {missing} were final")
        if b > 0 and self.flats[b - 1] is None:
            raise RuntimeError(f"DistributedDataParallel: bucket {b} was launched before bucket "
                               f"{b - 1}; every rank must start its buckets in the same order")
        members = [self.params[i] for i in self.buckets[b]]
        parts = [np.zeros(p.numel(), dtype=p._data.storage.data.dtype) if p.grad is None
                 else p.grad._data.to_numpy_view().reshape(-1) for p in members]
        flat = Tensor(np.concatenate(parts) if parts else np.zeros(0, np.float32))
        self.flats[b] = flat
        bucket = GradBucket(b, flat, members, self.ddp.world_size)
        with events.origin(f"ddp bucket {b}"):
            self.works[b] = self.ddp._comm_hook(self.ddp._comm_state, bucket) or _Done()

    def _finish(self) -> None:
        for work in self.works:
            work.wait()
        globally_unused = set()
        if self.used is not None:
            self.used_work.wait()
            globally_unused = {i for i in range(len(self.params)) if self.used[i] == 0}
        with grad_mode.no_grad():
            for b, members in enumerate(self.buckets):
                flat = self.flats[b]._data.to_numpy_view()
                offset = 0
                for i in members:
                    p = self.params[i]
                    n = p.numel()
                    if i not in globally_unused:
                        value = flat[offset:offset + n].reshape(tuple(p.shape))
                        if p.grad is None:
                            p.grad = Tensor(value.astype(p._data.storage.data.dtype, copy=True))
                        else:
                            _assign(p.grad, value)
                    offset += n
        self.active = False

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


class _Done:
    """What a communication hook that finished synchronously stands for."""

    def wait(self, timeout=None) -> bool:
        return True


def _assign(t: Tensor, value: np.ndarray) -> None:
    t._data.to_numpy_view()[...] = value
    t._data.storage.version += 1


class DistributedDataParallel(Module):
    """``torch.nn.parallel.DistributedDataParallel`` on mini.distributed.

    ``model = DistributedDataParallel(net)`` after ``init_process_group``; then train as
    usual (``model(x)``, ``loss.backward()``, ``optimizer.step()``), each rank on its own
    part of the data (``mini.utils.data.DistributedSampler``).  ``bucket_cap_mb``: the
    bucket size in megabytes (MiB, as in PyTorch).  mini uses it for every bucket
    (PyTorch makes the first one 1 MiB).  ``device_ids`` and ``output_device`` are for GPUs
    and must be None.
    """

    def __init__(self, module: Module, device_ids=None, output_device=None, dim: int = 0,
                 broadcast_buffers: bool = True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters: bool = False, check_reduction: bool = False,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False):
        super().__init__()
        from mini import distributed as dist
        if device_ids not in (None, []) or output_device is not None:
            raise ValueError("mini's DistributedDataParallel runs on CPU ranks: leave device_ids "
                             "and output_device out")
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps a mini.nn.Module, got "
                            f"{type(module).__name__}")
        self.module = module
        self.process_group = dist.process_group._group(process_group)
        self.rank = self.process_group.rank()
        self.world_size = self.process_group.size()
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.bucket_cap_mb = 25 if bucket_cap_mb is None else bucket_cap_mb
        if self.bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be positive, got {bucket_cap_mb}")
        self.require_backward_grad_sync = True
        self._comm_hook, self._comm_state = allreduce_hook, None
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._sync_module_states()
        self.reducer = _Reducer(self, [p for _, p in named], [n for n, _ in named],
                                int(self.bucket_cap_mb * 1024 * 1024))

    @property
    def bucket_assignment(self) -> list:
        """The buckets: lists of indices into the parameters that require grad."""
        return [list(b) for b in self.reducer.buckets]

    def _sync_module_states(self) -> None:
        from mini import distributed as dist
        if self.world_size == 1:
            return
        with grad_mode.no_grad():
            for t in list(self.module.parameters()) + list(self.module.buffers()):
                dist.broadcast(t.detach(), src=0)

    def forward(self, *inputs, **kwargs):
        from mini import distributed as dist
        if self.broadcast_buffers and self.world_size > 1:
            with grad_mode.no_grad():
                for b in self.module.buffers():
                    dist.broadcast(b.detach(), src=0)
        output = self.module(*inputs, **kwargs)
        if grad_mode.is_grad_enabled() and self.require_backward_grad_sync:
            self.reducer.prepare(output)
        return output

    @contextlib.contextmanager
    def no_sync(self):
        """Inside the block, backward accumulates gradients locally without averaging them;
        the first backward after it averages everything accumulated."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def register_comm_hook(self, state, hook) -> None:
        """Replace how a bucket is reduced: ``hook(state, bucket)`` gets a
        :class:`GradBucket`, must leave the average of ``bucket.buffer()`` over the ranks in
        it, and returns a ``Work`` to wait on (or None when it finished already)."""
        if not callable(hook):
            raise TypeError("register_comm_hook expects a callable hook(state, bucket)")
        self._comm_hook, self._comm_state = hook, state

    def extra_repr(self) -> str:
        return f"world_size={self.world_size}, buckets={len(self.reducer.buckets)}"
