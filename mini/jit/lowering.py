"""Lowering: give every node of a graph a *kernel*, a plain function of numpy arrays that
computes what the op computed in eager mode, with none of eager's per-call work.

In eager mode each op call checks its operands' types, devices, shapes and dtypes, decides
whether to broadcast or promote, allocates its result, wraps it in an NDArray and a Tensor,
and records a graph node for autograd.  A trace has made each of those decisions once, so a
replay only has to call the kernel that eager ended up calling.  That is what this module
gives each node:

- elementwise ops on float arrays, the other operand a tensor (of the same shape, or one that
  broadcasts) or a Python number (``Add``, ``Sub``, ``Mul``, ``Div``, ``Maximum``; ``Neg``,
  ``Exp``, ``Log``, ``Sqrt``, ``Sin``, ``Cos``, ``Tanh``, ``Sigmoid``, ``Relu``, ``Abs``), and
  2-D float matrix products, call the kernel eager calls on this device (the ``cpu`` device's
  C++ loops, numpy's ufuncs), chosen by the backend's own rules, so a replay computes the same
  bits as eager;
- views (``Reshape``, ``Permute``, ``Expand``, basic ``GetItem``, ``Alias``) are numpy views;
- the reads that guards check (``item``, ``numpy``, ``tolist``) read the array;
- every other op gets a *generic* kernel: its arrays are wrapped as tensors that share their
  memory and the op itself runs (under ``no_grad``): correct for any op, as slow as eager.

**Values.**  A kernel takes and returns numpy arrays in the form mini's flat kernels take
them: a value whose elements are contiguous (row-major) is its flat 1-D buffer, whatever its
shape (the shape is in the graph); any other value (a transposed or broadcast view) is a
numpy view of its shape.  So a reshape of a contiguous value costs nothing, and a result
goes straight into the next kernel.  :func:`as_array` and :func:`as_tensor` convert at the
edges of a replay.
"""
from __future__ import annotations

import math

import numpy as np

from mini.backends import get_backend
from mini.backends.numpy_backend import (ALIGNMENT, BINARY, POOL_MIN_BYTES, UNARY,
                                         _count_trackers, aligned_empty)
from mini.autograd.tensor import Tensor
from mini.jit.graph import Graph, Node, Ref, TensorMeta, refs_in
from mini.ndarray.memory import _ACTIVE as _TRACKERS, _TOTAL
from mini.ndarray.ndarray import NDArray, Storage

_wrap = Tensor._wrap
_make = NDArray.make

__all__ = ["lower", "kernel_for", "as_array", "as_tensor", "LOWERED_OPS"]

_BINARY_OPS = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Maximum": "maximum"}
_UNARY_OPS = {"Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Sin": "sin",
              "Cos": "cos", "Tanh": "tanh", "Sigmoid": "sigmoid", "Relu": "relu", "Abs": "abs"}
_VIEWS = {"Alias", "Reshape", "Permute", "Expand", "GetItem"}

#: The ops that get a kernel of their own (the rest get the generic one).
LOWERED_OPS = frozenset(_BINARY_OPS) | frozenset(_UNARY_OPS) | _VIEWS | {"MatMul", "item", "numpy",
                                                                       "tolist"}

_np_empty = np.empty


def lower(graph: Graph) -> Graph:
    """Set ``node.kernel`` for every node of ``graph`` (in place); returns the graph."""
    for node in graph.nodes:
        node.kernel = kernel_for(node, graph)
    return graph


def kernel_for(node: Node, graph: Graph):
    """The kernel of one node (see the module docstring)."""
    device = _device_of(node, graph)
    op, args = node.op, node.args
    if not node.kwargs and node.meta is not None and _is_float(node.meta):
        if op in _BINARY_OPS and len(args) == 2:
            k = _binary_kernel(_BINARY_OPS[op], args, graph, node.meta, device)
            if k is not None:
                return k
        if op in _UNARY_OPS and len(args) == 1 and isinstance(args[0], Ref) \
                and _same_kind(graph.meta(args[0]), node.meta):
            return _unary_kernel(_UNARY_OPS[op], node.meta, device,
                                 _contiguous(graph.meta(args[0])))
    if op == "MatMul" and len(args) == 2 and not node.kwargs and node.meta is not None \
            and all(isinstance(x, Ref) for x in args):
        k = _matmul_kernel(node, graph, device)
        if k is not None:
            return k
    if op in _VIEWS and not node.kwargs and node.meta is not None and args \
            and isinstance(args[0], Ref):
        k = _view_kernel(node, graph.meta(args[0]))
        if k is not None:
            return k
    if op in ("item", "numpy", "tolist") and len(args) == 1 and isinstance(args[0], Ref):
        return _read_kernel(op, graph.meta(args[0]))
    return _generic_kernel(node, graph, device)


def _is_float(meta: TensorMeta) -> bool:
    return meta.dtype in ("float32", "float64")


# --------------------------------------------------------------------------- elementwise

def _contiguous(meta: TensorMeta) -> bool:
    """Whether a value's elements are contiguous (row-major), from its recorded strides.  The
    guards keep input strides as they were, and every other value's strides follow from
    them, so what a kernel sees is known when it is lowered."""
    expected = 1
    for d, st in zip(reversed(meta.shape), reversed(meta.strides)):
        if d != 1 and st != expected:
            return False
        expected *= d
    return True


def _native(device):
    """The cpu backend's extension and its tables of native ops, or None (numpy's kernels)."""
    from mini.backends import cpu
    if isinstance(device, cpu.CpuBackend):
        return device.ext, cpu
    return None


def _binary_kernel(name, args, graph, meta, device):
    a, b = args
    if isinstance(a, Ref) and isinstance(b, Ref):
        ma, mb = graph.meta(a), graph.meta(b)
        if ma is None or mb is None or ma.dtype != meta.dtype or mb.dtype != meta.dtype:
            return None
        if ma.shape == meta.shape and mb.shape == meta.shape:
            return _tensor_tensor(name, meta, device, _contiguous(ma) and _contiguous(mb))
        return _broadcast_kernel(name, meta, ma.shape, mb.shape)
    if isinstance(a, Ref) and b.__class__ in (int, float) and _same_kind(graph.meta(a), meta):
        return _tensor_scalar(name, meta, device, False, _contiguous(graph.meta(a)))
    if isinstance(b, Ref) and a.__class__ in (int, float) and _same_kind(graph.meta(b), meta):
        return _tensor_scalar(name, meta, device, True, _contiguous(graph.meta(b)))
    return None


def _same_kind(m, meta) -> bool:
    return m is not None and m.shape == meta.shape and m.dtype == meta.dtype


# Each kernel below is specialised when it is lowered: which kernel eager calls (the cpu
# device's C++ loop, or numpy's ufunc: the backend's own tables decide), whether the operands
# are contiguous, how many bytes the result takes.  Allocation is counted as eager counts it.

def _tensor_tensor(name: str, meta: TensorMeta, device, contiguous: bool):
    ufunc = BINARY[name]
    shape, size, dt = meta.shape, math.prod(meta.shape), np.dtype(meta.dtype)
    nbytes = size * dt.itemsize
    native = _native(device)
    ext = native[0].ewise if native and name in native[1]._NATIVE_BINARY else None
    if not contiguous:
        def strided(a, b):
            out = _alloc(size, dt, nbytes)
            ufunc(_shaped(a, shape), _shaped(b, shape), out=out.reshape(shape))
            return out
        return _named(strided, f"{name}_strided_kernel")
    if device.host_buffers and nbytes <= ALIGNMENT:
        # NumpyBackend.ewise: a result within one cache line is computed by numpy's ufunc
        def tiny(a, b):
            _TOTAL.count += 1
            _TOTAL.bytes += nbytes
            if _TRACKERS:
                _count_trackers(nbytes)
            return ufunc(a, b)
        return _inline(_named(tiny, f"{name}_kernel"), "{out} = {ufunc}({a0}, {a1})",
                       {"ufunc": ufunc}, nbytes)
    if nbytes >= POOL_MIN_BYTES:
        def large(a, b):
            out = aligned_empty(size, dt)
            ext(name, a, b, out) if ext is not None else ufunc(a, b, out=out)
            return out
        return _named(large, f"{name}_kernel")
    if ext is not None:
        def native_kernel(a, b):
            _TOTAL.count += 1
            _TOTAL.bytes += nbytes
            if _TRACKERS:
                _count_trackers(nbytes)
            out = _np_empty(size, dt)
            ext(name, a, b, out)
            return out
        return _inline(_named(native_kernel, f"{name}_kernel"),
                       "{out} = {empty}({size}, {dt}); {ext}({name}, {a0}, {a1}, {out})",
                       {"empty": _np_empty, "dt": dt, "ext": ext}, nbytes, size=size, name=repr(name))

    def numpy_kernel(a, b):
        out = _alloc(size, dt, nbytes)
        ufunc(a, b, out=out)
        return out
    return _named(numpy_kernel, f"{name}_kernel")


def _broadcast_kernel(name: str, meta: TensorMeta, a_shape, b_shape):
    """Operands of other shapes: eager broadcasts them to the result's shape as views (stride
    0), which no flat kernel takes, so numpy's ufunc computes it; so does this kernel."""
    ufunc = BINARY[name]
    shape, size, dt = meta.shape, math.prod(meta.shape), np.dtype(meta.dtype)
    nbytes = size * dt.itemsize

    def kernel(a, b):
        out = _alloc(size, dt, nbytes)
        ufunc(_shaped(a, a_shape), _shaped(b, b_shape), out=out.reshape(shape))
        return out
    return _named(kernel, f"{name}_broadcast_kernel")


def _matmul_kernel(node: Node, graph: Graph, device):
    """A 2-D float product: the kernel eager's backend runs (the cpu device's strided GEMM,
    which reads transposed operands in place; numpy's matmul on the numpy device)."""
    a, b = node.args
    ma, mb, meta = graph.meta(a), graph.meta(b), node.meta
    if ma is None or mb is None or len(ma.shape) != 2 or len(mb.shape) != 2 \
            or not (ma.dtype == mb.dtype == meta.dtype) or not _is_float(meta):
        return None
    (m, k), n = ma.shape, mb.shape[1]
    size, dt = m * n, np.dtype(meta.dtype)
    nbytes = size * dt.itemsize
    native = _native(device)
    if native is not None:
        gemm = native[0].matmul_strided

        def cpu_kernel(x, y):
            xb, xo, xs = _layout(x, ma.shape)
            yb, yo, ys = _layout(y, mb.shape)
            out = _alloc(size, dt, nbytes)
            if size:
                gemm(xb, xo, xs[0], xs[1], yb, yo, ys[0], ys[1], out, m, k, n)
            return out
        return _named(cpu_kernel, "matmul_kernel")
    from mini.backends.numpy_backend import _blas_operand

    def numpy_kernel(x, y):
        out = _alloc(size, dt, nbytes)
        np.matmul(_blas_operand(_shaped(x, ma.shape)), _blas_operand(_shaped(y, mb.shape)),
                  out=out.reshape(m, n))
        return out
    return _named(numpy_kernel, "matmul_kernel")


def _layout(a: np.ndarray, shape) -> tuple:
    """(flat buffer, offset, strides in elements) of a 2-D value in kernel form."""
    if a.flags.c_contiguous:
        return a.reshape(-1), 0, (shape[1], 1)
    base = _flat_base(a)
    if base is None:
        return np.ascontiguousarray(a).reshape(-1), 0, (shape[1], 1)
    item = a.itemsize
    offset = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
    return base, offset, tuple(s // item for s in a.strides)


def _tensor_scalar(name: str, meta: TensorMeta, device, reverse: bool, contiguous: bool):
    from mini.backends.numpy_backend import _scalar_operand
    ufunc = BINARY[name]
    shape, size, dt = meta.shape, math.prod(meta.shape), np.dtype(meta.dtype)
    nbytes = size * dt.itemsize
    native = _native(device)
    native_name = None
    if native and contiguous:
        candidate = native[1]._REVERSED.get(name) if reverse else name
        if candidate in native[1]._NATIVE_SCALAR:
            native_name = candidate
    if native_name is not None:
        ext = native[0].scalar
        small = nbytes < POOL_MIN_BYTES

        def native_kernel(a, b):
            if small:
                _TOTAL.count += 1
                _TOTAL.bytes += nbytes
                if _TRACKERS:
                    _count_trackers(nbytes)
                out = _np_empty(size, dt)
            else:
                out = aligned_empty(size, dt)
            if reverse:
                ext(native_name, b, float(a), out)
            else:
                ext(native_name, a, float(b), out)
            return out
        kernel = _named(native_kernel, f"{'r' if reverse else ''}{name}_scalar_kernel")
        if small:
            x, s = ("{a1}", "{a0}") if reverse else ("{a0}", "{a1}")
            _inline(kernel, "{out} = {empty}({size}, {dt}); {ext}({name}, " + x + ", float(" + s
                    + "), {out})", {"empty": _np_empty, "dt": dt, "ext": ext}, nbytes,
                    size=size, name=repr(native_name))
        return kernel

    def numpy_kernel(a, b):
        x, s = (b, a) if reverse else (a, b)
        out = _alloc(size, dt, nbytes)
        if not contiguous:
            x, o = _shaped(x, shape), out.reshape(shape)
        else:
            o = out
        s = _scalar_operand(s, x, name)
        ufunc(s, x, out=o) if reverse else ufunc(x, s, out=o)
        return out
    return _named(numpy_kernel, f"{'r' if reverse else ''}{name}_scalar_kernel")


def _unary_kernel(name: str, meta: TensorMeta, device, contiguous: bool):
    fn = UNARY[name]
    shape, size, dt = meta.shape, math.prod(meta.shape), np.dtype(meta.dtype)
    nbytes = size * dt.itemsize
    native = _native(device)
    ext = native[0].unary if native and contiguous and name in native[1]._NATIVE_UNARY else None
    if ext is not None and nbytes < POOL_MIN_BYTES:
        def native_kernel(a):
            _TOTAL.count += 1
            _TOTAL.bytes += nbytes
            if _TRACKERS:
                _count_trackers(nbytes)
            out = _np_empty(size, dt)
            ext(name, a, out)
            return out
        return _inline(_named(native_kernel, f"{name}_kernel"),
                       "{out} = {empty}({size}, {dt}); {ext}({name}, {a0}, {out})",
                       {"empty": _np_empty, "dt": dt, "ext": ext}, nbytes, size=size, name=repr(name))

    def kernel(a):
        out = _alloc(size, dt, nbytes)
        if ext is not None:
            ext(name, a, out)
        elif contiguous:
            fn(a, out=out)
        else:
            fn(_shaped(a, shape), out=out.reshape(shape))
        return out
    return _named(kernel, f"{name}_kernel")


def _alloc(size: int, dt: np.dtype, nbytes: int) -> np.ndarray:
    """A new flat buffer, counted by mini's allocation counter as eager's are (large ones
    come from the backend's pool)."""
    if nbytes >= POOL_MIN_BYTES:
        return aligned_empty(size, dt)
    _TOTAL.count += 1
    _TOTAL.bytes += nbytes
    if _TRACKERS:
        _count_trackers(nbytes)
    return _np_empty(size, dt)


def _named(fn, name: str):
    fn.__name__ = name
    return fn


def _inline(kernel, template: str, names: dict, nbytes: int, **constants):
    """Attach to ``kernel`` the source a code generator may paste instead of calling it:
    ``template`` with ``{out}`` (the result's variable), ``{a0}``, ``{a1}`` (the arguments'
    source), ``{<key>}`` for each object in ``names`` (put in the generated code's namespace)
    and the ``constants`` (pasted as they are).  The pasted code does not count its one
    allocation of ``nbytes``: the generator adds it up (``kernel.allocates``)."""
    kernel.inline = (template, dict(names), dict(constants))
    kernel.allocates = nbytes
    return kernel


def _shaped(a: np.ndarray, shape) -> np.ndarray:
    """A value in kernel form (flat when contiguous) seen with its shape."""
    return a.reshape(shape) if a.shape != shape else a


# --------------------------------------------------------------------------- views, reads

def _flat_or_view(v: np.ndarray) -> np.ndarray:
    """Kernel form of a view's result: its flat buffer when its elements are contiguous."""
    return v.reshape(-1) if v.flags.c_contiguous else v


def _view_kernel(node: Node, in_meta: TensorMeta | None):
    if in_meta is None:
        return None
    op, args = node.op, node.args
    in_shape, out_shape = in_meta.shape, node.meta.shape
    if op == "Alias" and len(args) == 1:
        return lambda a: a
    if op == "Reshape" and len(args) in (2, 3):
        def reshape(a, shape, strict=False):
            if a.flags.c_contiguous:        # flat already: the same buffer, another shape
                return a
            return _flat_or_view(a.reshape(out_shape))
        return reshape
    if op == "Permute" and len(args) == 2:
        return lambda a, axes: _flat_or_view(_shaped(a, in_shape).transpose(axes))
    if op == "Expand" and len(args) == 2:
        return lambda a, shape: _flat_or_view(np.broadcast_to(_shaped(a, in_shape), out_shape))
    if op == "GetItem" and len(args) == 2 and _basic_key(args[1]):
        return lambda a, key: _flat_or_view(_shaped(a, in_shape)[key])
    return None


def _basic_key(key) -> bool:
    from mini.ndarray.ndarray import _is_basic_index
    return not refs_in(key) and _is_basic_index(key)


def _read_kernel(op: str, meta: TensorMeta | None):
    shape = meta.shape if meta is not None else None

    def item(a):
        if a.size != 1:
            raise ValueError(f"only one element arrays can be converted to Python scalars, "
                             f"got shape {shape}")
        return a.reshape(-1)[0].item()

    if op == "item":
        return item
    if op == "numpy":
        return lambda a: np.array(_shaped(a, shape), copy=True)
    return lambda a: _shaped(a, shape).tolist()


# --------------------------------------------------------------------------- generic

def _generic_kernel(node: Node, graph: Graph, device):
    """Run the op itself on tensors that share the arrays' memory."""
    from mini.autograd import grad_mode
    target, inplace = node.target, node.inplace
    template = (node.args, node.kwargs)     # where the graph's values go, and their shapes

    def to_tensor(ref: Ref, value):
        if not isinstance(value, np.ndarray):
            return value                    # a guard's Python value
        meta = graph.meta(ref)
        return as_tensor(value, device, meta.shape if meta is not None else None)

    def kernel(*args, **kwargs):
        targs, tkwargs = _fill(template, (args, kwargs), to_tensor)
        with grad_mode.no_grad():
            out = target(*targs, **tkwargs)
        if inplace and isinstance(args[0], np.ndarray):
            written = as_array(targs[0])
            if not np.shares_memory(written, args[0]):   # the tensor had to copy the array
                np.copyto(args[0], written.reshape(args[0].shape))
            return args[0]
        return as_array(out) if isinstance(out, Tensor) else out
    kernel.__name__ = f"{node.op}_generic_kernel"
    kernel.generic = True
    return kernel


def _fill(template, values, fn):
    """``values`` (``template`` with its Refs replaced) with ``fn(ref, value)`` at each place
    where ``template`` has a Ref; everything else as it is."""
    if isinstance(template, Ref):
        return fn(template, values)
    if type(template) in (tuple, list):
        return type(template)(_fill(t, v, fn) for t, v in zip(template, values))
    if type(template) is dict:
        return {k: _fill(template[k], values[k], fn) for k in template}
    return values


def _device_of(node: Node, graph: Graph):
    if node.meta is not None:
        return get_backend(node.meta.device)
    for r in refs_in(node.args):
        m = graph.meta(r)
        if m is not None:
            return get_backend(m.device)
    return get_backend(None)


# --------------------------------------------------------------------------- arrays <-> tensors

def as_array(t) -> np.ndarray:
    """A tensor's data in kernel form, sharing its memory: the flat run of its elements when
    they are contiguous, else a numpy view of its shape."""
    d = t._data
    flat = d._flat
    if flat is not None:
        return flat
    if d.is_compact():
        return d.storage.data[d.offset:d.offset + d.size]
    return d.to_numpy_view()


def as_tensor(a: np.ndarray, device=None, shape=None):
    """A mini tensor of ``shape`` (``a.shape`` if None) over the memory of the numpy array
    ``a`` (no copy when ``a`` is contiguous or a view of a flat buffer; otherwise a copy)."""
    device = get_backend(device)
    shape = tuple(a.shape) if shape is None else tuple(shape)
    if a.flags.c_contiguous:
        return _wrap(_make(a if a.ndim == 1 else a.reshape(-1), shape, device))
    if a.shape != shape:
        a = a.reshape(shape)
    base = _flat_base(a)
    if base is not None:
        item = a.itemsize
        offset = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
        strides = tuple(s // item for s in a.strides)
        try:
            return _wrap(NDArray(Storage(base, device), shape, strides, offset))
        except IndexError:
            pass
    return _wrap(_make(np.ascontiguousarray(a).reshape(-1), shape, device))


def _flat_base(a: np.ndarray):
    """The 1-D buffer of ``a``'s dtype that ``a`` is a view of (mini's buffers are such), or
    None when its strides are not whole elements or there is none."""
    if any(s % a.itemsize for s in a.strides):
        return None
    base = a.base
    for _ in range(16):                 # (as_strided's views hold their base in a DummyArray)
        if base is None:
            return None
        if isinstance(base, np.ndarray) and base.ndim == 1 and base.dtype == a.dtype \
                and base.flags.c_contiguous:
            return base
        base = getattr(base, "base", None)
    return None
