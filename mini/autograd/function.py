"""Function and the nodes of the recorded graph.

Calling ``SomeFunction.apply(*inputs)`` runs ``forward`` with grad mode off and,
when an input requires grad, creates a node (``SomeFunctionBackward``) that
becomes the output's ``grad_fn``.  The node is also the ``ctx`` that ``forward``
and ``backward`` receive: values stored on it in forward are there in backward.
``node.next_functions`` holds one ``(node, 0)`` edge per tensor input: the
``grad_fn`` of a non-leaf, the ``AccumulateGrad`` of a leaf that requires grad,
or ``None``.
"""
from __future__ import annotations

import functools

from mini.autograd import grad_mode
from mini.autograd import forward_ad as _fw


class RemovableHandle:
    """Returned by ``register_*hook``; ``handle.remove()`` takes the hook out again."""

    def __init__(self, hooks: list, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class Node:
    """A recorded operation in the graph: the ``grad_fn`` of the tensors it produced.

    A node is created for every op (it is the ``ctx`` of ``forward``), so it carries no
    per-instance state until something is stored on it: every field below has a class-level
    default, and the hook lists are created on first registration.
    """

    next_functions: tuple = ()
    needs_input_grad: tuple = ()
    _arg_meta: tuple | list = ()    # (shape, dtype) per argument, None for non-tensors
    _tensor_positions = None        # argument positions of the edges; None: every argument
    _saved = None
    _saved_versions = None
    _released = False
    _pre_hooks: tuple | list = ()   # run on the gradient flowing into this node
    _hooks: tuple | list = ()       # run after backward: hook(grad_inputs, grad_outputs)

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"

    @property
    def _input_meta(self) -> tuple:
        """(shape, dtype) per edge, to check the gradients backward returns."""
        meta, positions = self._arg_meta, self._tensor_positions
        return meta if positions is None else tuple(meta[i] for i in positions)

    # --- saved tensors -----------------------------------------------------------------
    def save_for_backward(self, *tensors) -> None:
        self._saved = tensors
        self._saved_versions = tuple(t._data.storage.version if hasattr(t, "_data") else None
                                     for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        if self._released:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Saved intermediate values of the "
                "graph are freed when you call .backward() or autograd.grad(). Specify "
                "retain_graph=True if you need to backward through the graph a second time or "
                "if you need to access saved tensors after calling backward.")
        if self._saved is None:
            return ()
        for i, (t, v) in enumerate(zip(self._saved, self._saved_versions)):
            if v is not None and t._data.storage.version != v:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by "
                    f"an inplace operation: [{t.dtype.name} tensor of shape {list(t.shape)}], "
                    f"saved by {self.name()} (saved tensor {i}), is at version "
                    f"{t._data.storage.version}; expected version {v} instead. Use an "
                    f"out-of-place operation, or .clone() the tensor before modifying it.")
        return self._saved

    def saved_tensor_bytes(self) -> int:
        """Bytes of the distinct buffers this node keeps alive for backward."""
        if self._released or not self._saved:
            return 0
        seen = {}
        for t in self._saved:
            if hasattr(t, "_data"):
                seen[id(t._data.storage)] = t._data.storage.nbytes
        return sum(seen.values())

    def release(self) -> None:
        """Drop the saved tensors (done after backward unless retain_graph=True)."""
        if self._saved is not None:
            self._saved = None
            self._released = True
        for k in [k for k in self.__dict__ if k.startswith("saved_")]:
            del self.__dict__[k]

    # --- hooks ------------------------------------------------------------------------
    def register_prehook(self, hook) -> RemovableHandle:
        if not isinstance(self._pre_hooks, list):
            self._pre_hooks = []
        self._pre_hooks.append(hook)
        return RemovableHandle(self._pre_hooks, hook)

    def register_hook(self, hook) -> RemovableHandle:
        if not isinstance(self._hooks, list):
            self._hooks = []
        self._hooks.append(hook)
        return RemovableHandle(self._hooks, hook)

    # --- the backward rule --------------------------------------------------------------
    def apply_backward(self, grad):
        """Gradients for each edge in ``next_functions`` (None where no gradient flows)."""
        raise NotImplementedError


class AccumulateGrad(Node):
    """The node of a leaf tensor that requires grad: adds incoming gradients into ``.grad``."""

    def __init__(self, variable):
        self.variable = variable

    def apply_backward(self, grad):
        return ()

    def accumulate(self, grad, create_graph: bool) -> None:
        from mini.autograd.engine import accumulate_grad
        if create_graph:
            # clone() is recorded, so the stored gradient stays differentiable yet private
            accumulate_grad(self.variable, grad.clone())
            return
        if _op_observer is None:
            # what grad.detach().clone() computes (Clone.forward: a compact copy of the
            # data, no history), without dispatching two ops; with an observer watching
            # (the profiler counts ops) the ops run so that it sees them.
            accumulate_grad(self.variable, Tensor._wrap(grad._data.copy()))
            return
        with grad_mode.no_grad():
            # A clone keeps .grad private: backward rules may pass one gradient object to
            # several inputs (add), and a seed given to backward() belongs to the caller.
            accumulate_grad(self.variable, grad.detach().clone())


class BackwardFunction(Node):
    """Node created by ``Function.apply``; runs the Function's ``backward``."""
    _function = None

    def apply_backward(self, grad):
        grads = self._function.backward(self, grad)
        if not isinstance(grads, tuple):
            grads = (grads,)
        n_args = len(self._arg_meta)
        if len(grads) != n_args:
            raise RuntimeError(
                f"function {self.name()} returned an incorrect number of gradients "
                f"(expected {n_args}, got {len(grads)})")
        positions = self._tensor_positions
        return grads if positions is None else tuple(grads[i] for i in positions)


class FunctionMeta(type):
    """Gives every Function subclass its own node class, named like PyTorch's."""

    def __init__(cls, name, bases, namespace):
        super().__init__(name, bases, namespace)
        suffix = "Backward0" if namespace.get("_builtin", False) else "Backward"
        cls._node_cls = type(name + suffix, (BackwardFunction,), {"_function": cls})


# ---------------------------------------------------------------------------------------
# The op observer: one hook on the dispatch path of every operation, for tools that watch
# the ops of a program go by (a graph tracer, the profiler).  It is None normally, and then
# an op pays one global lookup for it.  Install one with ``set_op_observer``.  While it is
# set, every op calls
#
#     _op_observer(name, op, args, kwargs, run)
#
# instead of running: ``name`` is the op's name ("Add", "MatMul", "eq"), ``op`` what a
# replay calls (``SomeFunction.apply`` or the public function), ``args``/``kwargs`` its
# inputs and attributes exactly as passed, and ``run()`` computes and returns the output
# (recording the graph as usual).  The observer returns what the op returns, normally
# ``run()``'s result.  Ops that run inside ``run()`` (those an op is built from) are not
# observed: the observer sees each op the program calls, once.  Fast paths that would
# replace several ops by one are off while an observer is installed (see
# ``mini.exercises.fast_paths_active``), so it sees the ops the program wrote.
_op_observer = None


def set_op_observer(observer):
    """Install ``observer`` (or None to remove it); returns the one installed before, which
    the caller restores when done (observers nest: an outer one is not called meanwhile)."""
    global _op_observer
    previous, _op_observer = _op_observer, observer
    return previous


def observe_op(name: str, op, args, kwargs, run):
    """Run an op that does not go through ``Function.apply`` (comparisons, in-place
    updates) under the installed observer.  Call it only when ``_op_observer`` is set."""
    global _op_observer
    observer = _op_observer

    def unobserved():
        global _op_observer
        _op_observer = None
        try:
            return run()
        finally:
            _op_observer = observer
    return observer(name, op, args, kwargs, unobserved)


def observed(fn, name: str | None = None):
    """``fn``, an op that does not go through ``Function.apply`` (a comparison, an
    in-place update, a random draw), made visible to the op observer as ``name``."""
    name = name or fn.__name__

    @functools.wraps(fn)
    def op(*args, **kwargs):
        if _op_observer is None:
            return fn(*args, **kwargs)
        return observe_op(name, op, args, kwargs, lambda: fn(*args, **kwargs))
    return op


_GRAD = grad_mode._ENABLED        # [bool]: is grad mode on
_FW_LEVEL = _fw._LEVEL            # [int]: open forward-mode AD levels
_NO_NEEDS = [(False,) * n for n in range(8)]
_NO_EDGE = (None, 0)
_new_node = object.__new__


class Function(metaclass=FunctionMeta):
    """Base class of differentiable operations, with PyTorch's interface.

    A subclass defines two static methods and is called as ``SomeFunction.apply(*inputs)``:

    - ``forward(ctx, *inputs)`` runs with grad mode off and returns one Tensor.  Tensors
      that backward needs go through ``ctx.save_for_backward(*tensors)`` (so mini can free
      them after backward and notice an in-place write to them); other values may be
      stored as attributes of ``ctx``.
    - ``backward(ctx, grad)`` receives the gradient of the output and returns one gradient
      (or None) per argument of ``forward``, each shaped like that argument; saved tensors
      come back as ``ctx.saved_tensors``.

    An optional ``jvp(ctx, *tangents)`` gives forward-mode AD.
    """
    _builtin = False

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("a Function subclass must implement forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("a Function subclass must implement backward")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run ``forward`` and, when an input requires grad (and grad mode is on), record
        the node that ``backward`` will run.  This is the hot path of every op: it looks
        at each argument once; an installed op observer and forward-mode AD cost one
        check each when they are not in use."""
        if _op_observer is not None:
            return observe_op(cls.__name__, cls.apply, args, kwargs, lambda: cls.apply(*args, **kwargs))
        node = _new_node(cls._node_cls)  # (nodes have no __init__: skip type.__call__)
        record = False
        if _GRAD[0]:
            for a in args:
                if isinstance(a, Tensor) and a.requires_grad:
                    record = True
                    break
        if not record:                   # nothing to record: just run forward
            n = len(args)
            node.needs_input_grad = _NO_NEEDS[n] if n < 8 else (False,) * n
            out = _forward(cls, node, args, kwargs)
            if _FW_LEVEL[0]:
                _propagate_tangents(cls, node, args, out)
            return out
        # one pass over the arguments: what backward needs to know about each, and the
        # edge to the node that receives its gradient (what _edge computes, inlined)
        needs, meta, edges = [], [], []
        only_tensors = True
        for a in args:
            if isinstance(a, Tensor):
                r = a.requires_grad
                needs.append(r)
                d = a._data
                meta.append((d.shape, d.dtype))
                fn = a.grad_fn
                if fn is not None:
                    edges.append((fn, 0))
                elif r:
                    fn = a._accumulate
                    edges.append((fn if fn is not None else a._accumulate_node(), 0))
                else:
                    edges.append(_NO_EDGE)
            else:
                needs.append(False)
                meta.append(None)
                only_tensors = False
        # forward may look at ctx.needs_input_grad to save only what backward will use,
        # and at ctx._arg_meta (shape, dtype of each input) to reduce broadcast gradients
        node.needs_input_grad = tuple(needs)
        node._arg_meta = meta
        out = _forward(cls, node, args, kwargs)
        for a in args:
            if out is a:
                out = Tensor._wrap(out._data)  # never rewrite the history of an input returned as is
                break
        if not only_tensors:    # edges skip the arguments that are not tensors
            node._tensor_positions = tuple(i for i, m in enumerate(meta) if m is not None)
        node.next_functions = tuple(edges)
        out.grad_fn = node
        out.requires_grad = True
        if _FW_LEVEL[0]:
            _propagate_tangents(cls, node, args, out)
        return out


def _forward(cls, node, args, kwargs):
    """``cls.forward`` with grad mode off (restored afterwards); it must return a Tensor."""
    enabled = _GRAD[0]
    _GRAD[0] = False
    try:
        out = cls.forward(node, *args, **kwargs)
    finally:
        _GRAD[0] = enabled
    if not isinstance(out, Tensor):
        _bad_output(cls, out)
    return out


def _propagate_tangents(cls, node, args, out):
    """Forward-mode AD (a dual level is open): ``out``'s tangent from its inputs' tangents
    (``cls.jvp``), when an input has one."""
    for a in args:
        if isinstance(a, Tensor) and a._fw_tangent is not None:
            node._fw_args = args
            node._out_shape, node._out_dtype = out._data.shape, out._data.dtype
            _fw.propagate(cls, node, args, out)
            return


def _bad_output(cls, out):
    raise TypeError(f"{cls.__name__}.forward must return a single Tensor, got "
                    f"{type(out).__name__}")


def _edge(t):
    fn = t.grad_fn
    if fn is not None:
        return (fn, 0)
    if t.requires_grad:
        acc = t._accumulate
        return (acc if acc is not None else t._accumulate_node(), 0)
    return (None, 0)


from mini.autograd.tensor import Tensor  # noqa: E402  (tensor.py needs nothing from here)
