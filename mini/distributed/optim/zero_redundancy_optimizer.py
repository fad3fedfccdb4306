"""ZeRO stage 1: optimizer state sharded over the ranks.  Exercise ``06.zero_step``.

Plain data parallelism keeps everything on every rank: for Ψ float32 parameters under Adam,
4Ψ bytes of weights, 4Ψ of gradients and 8Ψ of optimizer state (the two moments) per rank.
The optimizer state is the largest part and nothing forces every rank to hold all of it:
the step is elementwise, so rank r can update just its shard of the parameters, with state
for that shard only, and then send its updated shard to everyone.  Per rank that is
4Ψ + 4Ψ + 8Ψ/p bytes (:func:`mini.napkin.scaling.zero_memory_per_rank`), and the
weights come out exactly as plain AdamW's: the same elementwise arithmetic on the same
numbers.

mini shards the parameters as one flat vector (all parameters concatenated in order), cut
with :func:`mini.distributed.shard_bounds`, so every rank's state is within one element of
Ψ/p whatever the parameter sizes (``torch``'s ``ZeroRedundancyOptimizer`` assigns whole
parameters to ranks instead, which can be far from even).
"""
from __future__ import annotations

import numpy as np

from mini.autograd import grad_mode
from mini.autograd.tensor import Tensor
from mini.distributed.checkpoint import Shard
from mini.distributed.collectives import broadcast
from mini.distributed.process_group import _group, get_rank, get_world_size
from mini.distributed.ring import shard_bounds
from mini.exercises import exercise
from mini.optim.optimizer import Optimizer

__all__ = ["ZeroRedundancyOptimizer", "zero_step"]


@exercise("06.zero_step")
def zero_step(flat_param, flat_grad, shard_param, shard_optimizer, group=None) -> None:
    """One ZeRO-1 optimizer step.

    ``flat_param`` is a 1-D tensor of all Ψ parameters of the model (the same on every
    rank), ``flat_grad`` their gradients, already averaged over the ranks, in the same
    layout.  This rank r owns the elements ``[start, stop) = shard_bounds(Ψ, p, r)``:
    ``shard_param`` is a leaf tensor of ``stop - start`` values and the only thing
    ``shard_optimizer`` (for example AdamW) updates, so its state covers the shard only.

    1. Copy ``flat_param[start:stop]`` into ``shard_param`` and set ``shard_param.grad`` to
       a copy of ``flat_grad[start:stop]``.
    2. ``shard_optimizer.step()``.
    3. Copy ``shard_param`` back into ``flat_param[start:stop]``, then for every rank q,
       broadcast q's slice of ``flat_param`` from rank q, so every rank ends with every
       updated shard.

    Work under ``mini.no_grad()``.  Returns None.
    """
    ### BEGIN SOLUTION
    p, r = get_world_size(group), get_rank(group)
    n = flat_param.numel()
    start, stop = shard_bounds(n, p, r)
    with grad_mode.no_grad():
        shard_param.copy_(flat_param[start:stop])
        shard_param.grad = flat_grad[start:stop].clone()
        shard_optimizer.step()
        flat_param[start:stop].copy_(shard_param)
        for q in range(p):
            a, b = shard_bounds(n, p, q)
            broadcast(flat_param[a:b], src=q, group=group)
    ### END SOLUTION


def _flat(params, tensors, dtype) -> np.ndarray:
    """``tensors`` (one per parameter, None counting as zeros) concatenated into 1-D."""
    parts = [np.zeros(p.numel(), dtype=dtype) if t is None else
             np.asarray(t._data.to_numpy_view(), dtype=dtype).reshape(-1)
             for p, t in zip(params, tensors)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


class ZeroRedundancyOptimizer(Optimizer):
    """``torch.distributed.optim.ZeroRedundancyOptimizer``: wraps an optimizer class so that
    each rank keeps its state for a 1/p shard of the parameters only.

        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=mini.optim.AdamW,
                                      lr=1e-3, weight_decay=0.01)

    Use it like the optimizer it wraps, after gradients have been averaged (DDP does it):
    ``step()`` updates this rank's shard and broadcasts it (``06.zero_step``).  The
    parameters must share one floating-point dtype; one parameter group (the options go to
    ``optimizer_class``).  ``param_groups`` are the wrapped optimizer's, so learning-rate
    schedulers work on it.
    """

    def __init__(self, params, optimizer_class, process_group=None,
                 parameters_as_bucket_view: bool = False, overlap_with_ddp: bool = False,
                 **defaults):
        if overlap_with_ddp:
            raise NotImplementedError("overlap_with_ddp is not implemented in mini: step "
                                      "after backward")
        params = list(params)
        if not params:
            raise ValueError("ZeroRedundancyOptimizer got an empty parameter list")
        if any(isinstance(p, dict) for p in params):
            raise ValueError("mini's ZeroRedundancyOptimizer takes one list of parameters "
                             "(no parameter groups); options go in as keyword arguments")
        dtypes = {p.dtype for p in params}
        if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
            raise TypeError(f"ZeroRedundancyOptimizer needs parameters of one floating-point "
                            f"dtype, got {sorted(d.name for d in dtypes)}")
        self._pg = _group(process_group)
        self._params = params
        self._np_dtype = params[0]._data.storage.data.dtype
        self.numel = sum(p.numel() for p in params)
        self.start, self.stop = shard_bounds(self.numel, self._pg.size(), self._pg.rank())
        if not (isinstance(self.start, int) and isinstance(self.stop, int)
                and 0 <= self.start <= self.stop <= self.numel):
            raise RuntimeError(f"shard_bounds({self.numel}, {self._pg.size()}, "
                               f"{self._pg.rank()}) returned ({self.start!r}, {self.stop!r}); "
                               f"it must be two ints with 0 <= start <= stop <= {self.numel}")
        flat = _flat(params, params, self._np_dtype)
        from mini.nn.parameter import Parameter
        self.shard_param = Parameter(Tensor(flat[self.start:self.stop].copy()))
        self.optim = optimizer_class([self.shard_param], **defaults)
        self.optimizer_class = optimizer_class
        self.defaults = self.optim.defaults

    # the wrapped optimizer's groups and state are this optimizer's (schedulers, printing)
    @property
    def param_groups(self):
        return self.optim.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optim.param_groups = value

    @property
    def state(self):
        return self.optim.state

    @state.setter
    def state(self, value):
        self.optim.state = value

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self._params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                with grad_mode.no_grad():
                    p.grad.zero_()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with grad_mode.enable_grad():
                loss = closure()
        flat_param = Tensor(_flat(self._params, self._params, self._np_dtype))
        flat_grad = Tensor(_flat(self._params, [p.grad for p in self._params], self._np_dtype))
        zero_step(flat_param, flat_grad, self.shard_param, self.optim)
        values = flat_param._data.to_numpy_view()
        offset = 0
        with grad_mode.no_grad():
            for p in self._params:
                n = p.numel()
                p._data.to_numpy_view()[...] = values[offset:offset + n].reshape(tuple(p.shape))
                p._data.storage.version += 1
                offset += n
        return loss

    def local_state_bytes(self) -> int:
        """Bytes of the optimizer-state tensors this rank holds."""
        total = 0
        for s in self.optim.state.values():
            for v in s.values():
                if isinstance(v, Tensor):
                    total += v.nbytes
        return total

    # --- checkpoints: the state is sharded ---------------------------------------------
    def state_dict(self) -> dict:
        """This rank's state: tensors of the shard's size as :class:`Shard` (their global
        position in the flat parameter vector), everything else as is.  Save it with
        :func:`mini.distributed.checkpoint.save` (every rank writes its shard), reload it
        with any number of ranks."""
        inner = self.optim.state_dict()
        state = {}
        for key, value in inner["state"].get(0, {}).items():
            if isinstance(value, Tensor) and value.numel() == self.stop - self.start:
                state[key] = Shard(value.detach().reshape(-1), self.start, self.numel)
            else:
                state[key] = value
        return {"numel": self.numel, "state": state, "param_groups": inner["param_groups"]}

    def load_state_dict(self, state_dict: dict) -> None:
        if int(state_dict["numel"]) != self.numel:
            raise ValueError(f"this state is for {state_dict['numel']} parameters; this "
                             f"optimizer has {self.numel}")
        state = {}
        for key, value in state_dict["state"].items():
            if isinstance(value, Shard):
                if (value.offset, value.offset + value.tensor.numel()) != (self.start, self.stop):
                    raise ValueError(f"state {key!r} holds elements [{value.offset}, "
                                     f"{value.offset + value.tensor.numel()}) but this rank owns "
                                     f"[{self.start}, {self.stop})")
                value = value.tensor
            state[key] = value
        self.optim.load_state_dict({"state": {0: state} if state else {},
                                    "param_groups": state_dict["param_groups"]})
