"""Tensor: an NDArray plus what autograd needs (requires_grad, grad, grad_fn).

Operators and methods such as ``+``, ``exp`` and ``sum`` are attached by
:mod:`mini.ops`, which is where each operation's forward and backward live.
"""
from __future__ import annotations

import numbers
import weakref

import numpy as np

from mini.ndarray import NDArray, as_dtype, get_default_dtype
from mini.ndarray.dtypes import int64, bool_
from mini.backends import device as _device, get_backend

_new_tensor = object.__new__


class Tensor:
    # Every op makes a tensor, so the four fields every tensor uses are slots, set by
    # _wrap; the rarely set ones are class-level defaults, stored per tensor (in its
    # __dict__, created on first write) only when set.
    __slots__ = ("_data", "requires_grad", "grad", "grad_fn", "__dict__", "__weakref__")
    _accumulate = None        # the AccumulateGrad node of a leaf that requires grad
    _retains_grad = False     # retain_grad() was called
    _fw_tangent = None        # forward-mode AD: the tangent of a dual tensor
    _base = None              # the tensor whose buffer this view shares

    # numpy: `ndarray * tensor` must call Tensor.__rmul__, not turn the tensor into an array
    __array_priority__ = 1000
    __array_ufunc__ = None

    def __init__(self, data=None, dtype=None, device=None, requires_grad: bool = False):
        if isinstance(data, NDArray):
            nd = data if dtype is None else data.astype(dtype)
            if device is not None:
                nd = nd.to(device)
        else:
            nd = _ndarray_from_data(data, dtype, device)
        self._data = nd
        self.grad = None
        self.grad_fn = None
        self.requires_grad = False
        if requires_grad:
            self.requires_grad_(True)

    @classmethod
    def _wrap(cls, nd: NDArray) -> "Tensor":
        """Fast constructor for results of operations (no validation, no grad)."""
        t = _new_tensor(cls)
        t._data = nd
        t.grad = None
        t.grad_fn = None
        t.requires_grad = False
        return t

    def _alias(self) -> "Tensor":
        """A new tensor object over the same data, with this tensor's history as a pass-through."""
        from mini.ops.shape import Alias
        return Alias.apply(self)

    def _alias_no_tangent(self) -> "Tensor":
        t = self._alias()
        t._fw_tangent = None
        return t

    # --- metadata --------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return Size(self._data.shape)

    def size(self, dim=None):
        if dim is None:
            return Size(self._data.shape)
        return self._data.shape[dim]

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def device(self):
        return self._data.device

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return self._data.size

    def stride(self, dim=None):
        if dim is None:
            return self._data.strides
        return self._data.strides[dim]

    def storage_offset(self) -> int:
        return self._data.offset

    def is_contiguous(self) -> bool:
        return self._data.is_compact()

    def element_size(self) -> int:
        return self._data.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self._data.nbytes

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def _version(self) -> int:
        return self._data.storage.version

    @property
    def data(self) -> "Tensor":
        """The same data, detached from the graph (writes to it are not tracked)."""
        return Tensor._wrap(self._data)

    @data.setter
    def data(self, value: "Tensor"):
        if not isinstance(value, Tensor):
            raise TypeError(f"data must be set to a Tensor, got {type(value).__name__}")
        self._data = value._data

    @property
    def T(self) -> "Tensor":
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> "Tensor":
        return self.transpose(-2, -1)

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self)))

    def __hash__(self):
        return id(self)

    def __deepcopy__(self, memo):
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol; detach() first")
        t = Tensor._wrap(self._data.copy())
        t.requires_grad = self.requires_grad
        memo[id(self)] = t
        if self.grad is not None:
            t.grad = self.grad.__deepcopy__(memo)
        return t

    def __reduce__(self):
        # Pickle the values (a compact numpy copy), dtype, device and requires_grad.
        return (_rebuild_tensor, (self._data.numpy(), self.dtype.name, self.device.name,
                                  self.requires_grad))

    # --- conversion ------------------------------------------------------------------------
    # Reading values into Python is an op the op observer sees (as "numpy", "tolist",
    # "item"): a graph tracer must know what the program branched on.
    def numpy(self) -> np.ndarray:
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        if _function._op_observer is not None:
            return _function.observe_op("numpy", Tensor.numpy, (self,), {},
                                        self._data.to_numpy_view)
        return self._data.to_numpy_view()

    def __array__(self, dtype=None, copy=None):
        if _function._op_observer is not None:
            a = _function.observe_op("numpy", Tensor.numpy, (self,), {}, self._data.numpy)
        else:
            a = self._data.numpy()
        return a if dtype is None else a.astype(dtype)

    def tolist(self):
        if _function._op_observer is not None:
            return _function.observe_op("tolist", Tensor.tolist, (self,), {},
                                        lambda: self._data.to_numpy_view().tolist())
        return self._data.to_numpy_view().tolist()

    def item(self):
        if _function._op_observer is not None:
            return _function.observe_op("item", Tensor.item, (self,), {}, self._data.item)
        return self._data.item()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype != int64 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    def __repr__(self):
        body = np.array2string(self._data.to_numpy_view(), separator=", ", prefix="tensor(",
                               precision=4)
        extras = []
        if self.dtype not in (get_default_dtype(), int64) or (
                self.dtype == int64 and self.numel() == 0):
            extras.append(f"dtype={self.dtype!r}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    # --- autograd ----------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if not self.is_leaf and not requires_grad:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If "
                               "you want to use a computed variable in a subgraph that doesn't "
                               "require differentiation use var_no_grad = var.detach().")
        if requires_grad and not (self.dtype.is_floating_point):
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients, "
                               f"got {self.dtype}")
        self.requires_grad = bool(requires_grad)
        return self

    def detach(self) -> "Tensor":
        """The same data, cut off from the graph."""
        t = Tensor._wrap(self._data)
        return t

    def detach_(self) -> "Tensor":
        self.grad_fn = None
        self.requires_grad = False
        return self

    def _accumulate_node(self):
        acc = self._accumulate
        if acc is None:
            from mini.autograd.function import AccumulateGrad
            acc = self._accumulate = AccumulateGrad(self)
        return acc

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False, inputs=None):
        """Accumulate d(self)/d(leaf) into the ``.grad`` of every leaf that requires grad."""
        from mini.autograd.engine import backward
        backward([self], None if gradient is None else [gradient], retain_graph=retain_graph,
                 create_graph=create_graph, inputs=inputs)

    def register_hook(self, hook):
        """``hook(grad)`` runs when the gradient of this tensor is computed; a non-None
        return value replaces the gradient.  Returns a handle with ``remove()``."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        node = self.grad_fn if self.grad_fn is not None else self._accumulate_node()
        return node.register_prehook(hook)

    def register_post_accumulate_grad_hook(self, hook):
        """``hook(tensor)`` runs after a gradient has been accumulated into this leaf's
        ``.grad`` during backward (DDP starts communication from here).  Returns a handle
        with ``remove()``."""
        if not self.requires_grad or not self.is_leaf:
            raise RuntimeError("post accumulate grad hooks can only be registered on leaf "
                               "tensors that require grad")
        return self._accumulate_node().register_hook(hook)

    def retain_grad(self) -> None:
        """Keep ``.grad`` for this non-leaf tensor after backward."""
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.is_leaf or self._retains_grad:
            return
        # The engine stores the gradient after every tensor hook has run, whatever the order
        # in which the hooks and retain_grad() were registered (as PyTorch does).
        self.grad_fn._retained = weakref.ref(self)
        self._retains_grad = True

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    # --- device and dtype ------------------------------------------------------------------
    def to(self, *args, **kwargs) -> "Tensor":
        """``t.to(device)``, ``t.to(dtype)``, ``t.to(device, dtype)`` or ``t.to(other)`` (other's
        device and dtype), as in PyTorch: ``t`` itself when nothing changes (unless
        ``copy=True``), else a differentiable copy.  ``non_blocking`` is accepted and ignored
        (every copy is synchronous)."""
        device = kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        copy = kwargs.pop("copy", False)
        kwargs.pop("non_blocking", None)
        kwargs.pop("memory_format", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif isinstance(a, (str, _device)):
                device = a
            elif a is not None:
                dtype = a
        from mini.ops.elementwise import to_device, cast
        t = self
        if dtype is not None and as_dtype(dtype) != self.dtype:
            t = cast(t, dtype)
        if device is not None and get_backend(device) is not t._data.storage.device:
            t = to_device(t, device)
        if copy and t is self:
            t = self.clone()
        return t

    def float(self) -> "Tensor":
        return self.to(dtype="float32")

    def double(self) -> "Tensor":
        return self.to(dtype="float64")

    def long(self) -> "Tensor":
        return self.to(dtype="int64")

    def bool(self) -> "Tensor":
        return self.to(dtype="bool")

    def type_as(self, other) -> "Tensor":
        return self.to(dtype=other.dtype)

    def cpu(self) -> "Tensor":
        """This tensor on device ``cpu`` (mini's default device): itself when it is there
        already, else a differentiable copy (``t.to("cpu")``), as in PyTorch."""
        return self.to("cpu")

    def cuda(self) -> "Tensor":
        """This tensor on the cuda device (a GPU, or mini's CUDA emulator)."""
        return self.to("cuda")

    @property
    def is_cpu(self) -> bool:
        return self._data.storage.device is get_backend("cpu")

    @property
    def is_cuda(self) -> bool:
        return self._data.storage.device.name == "cuda"


class Size(tuple):
    """The shape of a tensor: a tuple that prints like PyTorch's."""

    def __repr__(self):
        return f"mini.Size({list(self)})"

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n


def _ndarray_from_data(data, dtype, device) -> NDArray:
    if isinstance(data, Tensor):
        data = data._data.to_numpy_view()
    if dtype is None:
        arr = np.asarray(data)
        if arr.dtype.kind == "f" and not isinstance(data, np.ndarray):
            dtype = get_default_dtype()  # Python floats become the default dtype
        elif arr.dtype.kind in "iu":
            dtype = int64
        elif arr.dtype.kind == "b":
            dtype = bool_
        elif arr.dtype.kind == "O":
            raise TypeError(f"could not make a tensor from {type(data).__name__}: ragged or "
                            f"non-numeric data")
        else:
            dtype = as_dtype(arr.dtype)
    else:
        dtype = as_dtype(dtype)
        arr = np.asarray(data)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"could not make a tensor from data of numpy dtype {arr.dtype}")
    return NDArray.from_numpy(arr, device=device, dtype=dtype)


def _rebuild_tensor(array, dtype_name, device_name, requires_grad):
    return Tensor(array, dtype=dtype_name, device=device_name, requires_grad=requires_grad)


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)


def as_tensor_like(x, like: Tensor) -> Tensor:
    """Python numbers and arrays become tensors on ``like``'s device (scalars keep its dtype)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, numbers.Number):
        d = like.dtype if (like.dtype.is_floating_point or isinstance(x, numbers.Integral)) \
            else get_default_dtype()
        return Tensor(x, dtype=d, device=like.device)
    return Tensor(x, device=like.device)


from mini.autograd import function as _function  # noqa: E402  (function.py imports this module)
