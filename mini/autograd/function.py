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

from mini.autograd import grad_mode
from mini.autograd import forward_ad as _fw
from mini.utils import profiler as _profiler


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
    """A recorded operation in the graph: the ``grad_fn`` of the tensors it produced."""

    next_functions: tuple = ()

    def __init__(self):
        self.next_functions = ()
        self._input_meta = ()           # (shape, dtype) per edge, to check returned grads
        self._saved = None
        self._saved_versions = None
        self._released = False
        self._pre_hooks = []            # run on the gradient flowing into this node
        self._hooks = []                # run after backward: hook(grad_inputs, grad_outputs)
        self.needs_input_grad = ()

    def name(self) -> str:
        return type(self).__name__

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"

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
        self._pre_hooks.append(hook)
        return RemovableHandle(self._pre_hooks, hook)

    def register_hook(self, hook) -> RemovableHandle:
        self._hooks.append(hook)
        return RemovableHandle(self._hooks, hook)

    # --- the backward rule --------------------------------------------------------------
    def apply_backward(self, grad):
        """Gradients for each edge in ``next_functions`` (None where no gradient flows)."""
        raise NotImplementedError


class AccumulateGrad(Node):
    """The node of a leaf tensor that requires grad: adds incoming gradients into ``.grad``."""

    def __init__(self, variable):
        super().__init__()
        self.variable = variable

    def apply_backward(self, grad):
        return ()

    def accumulate(self, grad, create_graph: bool) -> None:
        from mini.autograd.engine import accumulate_grad
        if create_graph:
            # clone() is recorded, so the stored gradient stays differentiable yet private
            accumulate_grad(self.variable, grad.clone())
            return
        if not _profiler._ACTIVE:
            # what grad.detach().clone() computes (Clone.forward: a compact copy of the
            # data, no history), without dispatching two ops; under the profiler the ops run
            # so that they are counted.
            Tensor = _TENSOR[0] if _TENSOR else _tensor_class()
            accumulate_grad(self.variable, Tensor._wrap(grad._data.copy()))
            return
        with grad_mode.no_grad():
            # A clone keeps .grad private: backward rules may pass one gradient object to
            # several inputs (add), and a seed given to backward() belongs to the caller.
            accumulate_grad(self.variable, grad.detach().clone())


class BackwardFunction(Node):
    """Node created by ``Function.apply``; runs the Function's ``backward``."""
    _function = None
    _tensor_positions: tuple = ()

    def apply_backward(self, grad):
        grads = self._function.backward(self, grad)
        if not isinstance(grads, tuple):
            grads = (grads,)
        n_args = self._n_args
        if len(grads) != n_args:
            raise RuntimeError(
                f"function {self.name()} returned an incorrect number of gradients "
                f"(expected {n_args}, got {len(grads)})")
        return tuple(grads[i] for i in self._tensor_positions)


class FunctionMeta(type):
    """Gives every Function subclass its own node class, named like PyTorch's."""

    def __init__(cls, name, bases, namespace):
        super().__init__(name, bases, namespace)
        suffix = "Backward0" if namespace.get("_builtin", False) else "Backward"
        cls._node_cls = type(name + suffix, (BackwardFunction,), {"_function": cls})


class Function(metaclass=FunctionMeta):
    """Base class of differentiable operations, with PyTorch's interface::

        class MultiplyAdd(Function):
            @staticmethod
            def forward(ctx, x, y, z):
                ctx.save_for_backward(x, y)
                return x * y + z
            @staticmethod
            def backward(ctx, grad):
                x, y = ctx.saved_tensors
                return grad * y, grad * x, grad

    ``forward`` runs with grad mode off and returns one Tensor.  ``backward``
    returns one gradient (or None) per argument of ``forward``.  An optional
    ``jvp(ctx, *tangents)`` gives forward-mode AD.
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
        Tensor = _TENSOR[0] if _TENSOR else _tensor_class()
        node = cls._node_cls()
        _ENABLED = grad_mode._ENABLED
        # one pass over the arguments: which need grad, and does any carry a tangent
        needs = []
        record = False
        tangent = False
        for a in args:
            if isinstance(a, Tensor):
                r = a.requires_grad
                needs.append(r)
                if r:
                    record = True
                if a._fw_tangent is not None:
                    tangent = True
            else:
                needs.append(False)
        record = record and _ENABLED[0]
        # forward may look at ctx.needs_input_grad to save only what backward will use
        node.needs_input_grad = tuple(needs) if record else (False,) * len(args)
        forward_mode = tangent and _fw._LEVEL[0]
        if record or forward_mode:
            # (shape, dtype) of every argument (None for numbers): backward rules use it to
            # reduce broadcast gradients and cast them back to each input's dtype.
            meta = []
            for a in args:
                if isinstance(a, Tensor):
                    d = a._data
                    meta.append((d.shape, d.dtype))
                else:
                    meta.append(None)
            node._arg_meta = meta = tuple(meta)
            if forward_mode:
                node._fw_args = args
        prev, _ENABLED[0] = _ENABLED[0], False
        try:
            if _profiler._ACTIVE:
                with _profiler.record(cls.__name__, "forward"):
                    out = cls.forward(node, *args, **kwargs)
            else:
                out = cls.forward(node, *args, **kwargs)
        finally:
            _ENABLED[0] = prev
        if not isinstance(out, Tensor):
            raise TypeError(f"{cls.__name__}.forward must return a single Tensor, got "
                            f"{type(out).__name__}")
        if record:
            for a in args:
                if out is a:
                    out = Tensor._wrap(out._data)  # never rewrite the history of an input returned as is
                    break
            positions = []
            edges = []
            input_meta = []
            for i, a in enumerate(args):
                if isinstance(a, Tensor):
                    positions.append(i)
                    edges.append(_edge(a))
                    input_meta.append(meta[i])
            node._tensor_positions = tuple(positions)
            node._n_args = len(args)
            node.next_functions = tuple(edges)
            node._input_meta = tuple(input_meta)
            out.grad_fn = node
            out.requires_grad = True
        if forward_mode:
            node._out_shape, node._out_dtype = out._data.shape, out._data.dtype
            _fw.propagate(cls, node, args, out)
        return out


_TENSOR: list = []


def _tensor_class():
    from mini.autograd.tensor import Tensor
    _TENSOR.append(Tensor)
    return Tensor


def _edge(t):
    fn = t.grad_fn
    if fn is not None:
        return (fn, 0)
    if t.requires_grad:
        acc = t._accumulate
        return (acc if acc is not None else t._accumulate_node(), 0)
    return (None, 0)
