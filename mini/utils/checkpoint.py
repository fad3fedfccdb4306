"""Activation checkpointing: trade compute for memory (``torch.utils.checkpoint``).
Exercises ``06.checkpoint_forward`` and ``06.checkpoint_backward``.

Backward needs what forward saved: the activations of every layer, O(N) memory for N
layers.  A checkpointed segment saves only its *input*: its forward runs without recording
a graph, and its backward runs the segment's forward again (this time recording), then
backpropagates through that fresh graph.  Cut N layers into √N segments: forward keeps √N
segment inputs, backward holds one segment's activations at a time (√N layers), so the
peak is O(√N), for about one extra forward pass (every segment but the last is run twice).

    y = checkpoint(block, x, use_reentrant=False)
    y = checkpoint_sequential(model_layers, segments=4, input=x, use_reentrant=False)

The recomputation must be the same computation: same inputs (checked with the version
counter: an input changed in place since forward is an error) and the same random numbers
(``preserve_rng_state=True`` saves mini's random state before the forward and restores it
for the recomputation, so dropout draws the same mask; afterwards the state is put back so
the rest of the program sees the random stream it would have seen).  Gradients are then
identical, bit for bit, to training without checkpointing.

mini has one mechanism for both values of ``use_reentrant``: the recomputation runs a
backward of its own inside the outer one (PyTorch's "reentrant" form).  As in PyTorch, the
function returns one tensor here, and ``autograd.grad`` / ``create_graph=True`` do not go
through a checkpoint.  Parameters of a ``Module`` segment get gradients even when its input
does not require grad.
"""
from __future__ import annotations

import warnings

from mini.random import get_rng_state, set_rng_state
from mini.autograd import grad_mode
from mini.autograd.function import Node
from mini.autograd.tensor import Tensor
from mini.exercises import exercise
from mini.utils import profiler as _profiler

__all__ = ["checkpoint", "checkpoint_sequential", "checkpoint_forward", "checkpoint_backward"]


@exercise("06.checkpoint_forward")
def checkpoint_forward(ctx, function, args: tuple, preserve_rng_state: bool):
    """The forward of a checkpointed segment: return ``function(*args)`` computed without
    recording a graph (under ``mini.no_grad()``, so none of its activations is saved).

    Store on ``ctx`` what backward needs to run it again: ``ctx.function = function``,
    ``ctx.inputs = args`` (the tuple as given), and ``ctx.rng_state``: mini's random state
    from *before* the call (``mini.get_rng_state()``) when ``preserve_rng_state``, else None.
    """
    ### BEGIN SOLUTION
    ctx.function = function
    ctx.inputs = args
    ctx.rng_state = get_rng_state() if preserve_rng_state else None
    with grad_mode.no_grad():
        return function(*args)
    ### END SOLUTION


@exercise("06.checkpoint_backward")
def checkpoint_backward(ctx, grad_output) -> tuple:
    """The backward of a checkpointed segment: run it again, then backpropagate.

    1. For each tensor in ``ctx.inputs``, make a detached copy of it (``x.detach()``: the
       same data, no history) that requires grad exactly when the original did.  Other
       arguments are passed through unchanged.
    2. If ``ctx.rng_state`` is not None, remember mini's current random state, set
       ``ctx.rng_state`` for the recomputation (``mini.set_rng_state``), and set the
       remembered state back when it is done (also if it fails).
    3. Under ``mini.enable_grad()``, compute ``output = ctx.function(*detached)`` and
       ``mini.autograd.backward(output, grad_output)``: parameters used inside the segment
       accumulate their ``.grad`` during this inner backward.
    4. Return a tuple with one entry per element of ``ctx.inputs``: the detached copy's
       ``.grad`` for a tensor that requires grad, None otherwise.
    """
    ### BEGIN SOLUTION
    from mini.autograd.engine import backward
    detached = []
    for a in ctx.inputs:
        if isinstance(a, Tensor):
            d = a.detach()
            d.requires_grad_(a.requires_grad)
            detached.append(d)
        else:
            detached.append(a)
    current = get_rng_state() if ctx.rng_state is not None else None
    try:
        if ctx.rng_state is not None:
            set_rng_state(ctx.rng_state)
        with grad_mode.enable_grad():
            output = ctx.function(*detached)
            backward(output, grad_output)
    finally:
        if current is not None:
            set_rng_state(current)
    return tuple(d.grad if isinstance(d, Tensor) and d.requires_grad else None
                 for d in detached)
    ### END SOLUTION


class CheckpointBackward(Node):
    """The graph node of a checkpointed segment: its backward recomputes the segment."""

    def __init__(self):
        super().__init__()
        self._positions: tuple = ()   # which arguments are tensors with an edge

    def apply_backward(self, grad):
        self.saved_tensors  # noqa: B018 -- raises if an input was changed in place since forward
        depth, _profiler._DEPTH[0] = _profiler._DEPTH[0], 0   # count the recomputed ops too
        try:
            grads = checkpoint_backward(self, grad)
        finally:
            _profiler._DEPTH[0] = depth
        if not isinstance(grads, tuple) or len(grads) != len(self.inputs):
            raise RuntimeError(f"checkpoint_backward must return a tuple with one gradient per "
                               f"input ({len(self.inputs)}), got {grads!r}")
        return tuple(grads[i] for i in self._positions)

    def release(self) -> None:
        super().release()
        for name in ("function", "inputs", "rng_state"):
            self.__dict__.pop(name, None)


def _has_trainable_parameters(function) -> bool:
    params = getattr(function, "parameters", None)
    if not callable(params):
        return False
    try:
        return any(p.requires_grad for p in params())
    except TypeError:
        return False


def checkpoint(function, *args, use_reentrant: bool | None = None, context_fn=None,
               determinism_check: str = "default", debug: bool = False,
               preserve_rng_state: bool = True, **kwargs):
    """``function(*args)``, computed so that backward recomputes it instead of keeping its
    activations.  ``function`` returns one tensor.  ``use_reentrant`` is accepted for
    PyTorch compatibility (both values behave the same in mini); ``context_fn`` and
    ``debug`` are not supported."""
    if context_fn is not None or debug:
        raise NotImplementedError("mini's checkpoint has no context_fn or debug mode")
    if kwargs:
        raise TypeError(f"checkpoint passes positional arguments to the function; got keyword "
                        f"arguments {sorted(kwargs)} (wrap the call in a lambda or "
                        f"functools.partial)")
    ctx = CheckpointBackward()
    output = checkpoint_forward(ctx, function, tuple(args), preserve_rng_state)
    if not isinstance(output, Tensor):
        raise TypeError(f"mini's checkpoint supports functions that return one Tensor; "
                        f"{getattr(function, '__name__', type(function).__name__)} returned "
                        f"{type(output).__name__}")
    tensor_args = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
    needs = any(a.requires_grad for _, a in tensor_args) or _has_trainable_parameters(function)
    if not grad_mode.is_grad_enabled():
        return output
    if not needs:
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None",
                      UserWarning, stacklevel=2)
        return output
    from mini.autograd.function import _edge
    ctx.save_for_backward(*[a for _, a in tensor_args])
    ctx._positions = tuple(i for i, _ in tensor_args)
    ctx.next_functions = tuple(_edge(a) for _, a in tensor_args)
    ctx._arg_meta = tuple((a._data.shape, a._data.dtype) for _, a in tensor_args)  # one per edge
    ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
    if output.grad_fn is not None or output.requires_grad:
        output = Tensor._wrap(output._data)   # never rewrite another tensor's history
    output.grad_fn = ctx
    output.requires_grad = True
    return output


def _run_segment(functions, start: int, end: int):
    def forward(x):
        for f in functions[start:end + 1]:
            x = f(x)
        return x
    return forward


class _Segment:
    """Layers ``start..end`` run in order: a callable whose ``parameters()`` are theirs."""

    def __init__(self, functions, start: int, end: int):
        self.functions, self.start, self.end = functions, start, end
        self.run = _run_segment(functions, start, end)

    def __call__(self, x):
        return self.run(x)

    def parameters(self):
        for f in self.functions[self.start:self.end + 1]:
            params = getattr(f, "parameters", None)
            if callable(params):
                yield from params()


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = None,
                          **kwargs):
    """Run ``functions`` (a ``Sequential`` or a list of modules/functions) in order on
    ``input``, cut into ``segments`` segments of ``len(functions) // segments`` layers (the
    last one takes the rest).  Every segment but the last is checkpointed; the last runs
    normally, since its activations are needed right away by backward."""
    if kwargs.get("preserve_rng_state") is not None:
        preserve = kwargs.pop("preserve_rng_state")
    else:
        preserve = True
    if kwargs:
        raise TypeError(f"unexpected arguments {sorted(kwargs)}")
    if hasattr(functions, "children") and callable(functions.children):
        functions = list(functions.children())
    functions = list(functions)
    if not isinstance(segments, int) or not 1 <= segments:
        raise ValueError(f"segments must be a positive int, got {segments!r}")
    if segments > len(functions):
        raise ValueError(f"cannot cut {len(functions)} layers into {segments} segments")
    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(_Segment(functions, start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return _run_segment(functions, end + 1, len(functions) - 1)(input)
