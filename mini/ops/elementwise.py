"""Elementwise operations.  Each op's forward and backward (VJP) sit side by side;
``jvp`` is its forward-mode rule.  Binary ops broadcast; their gradients are summed
back to each input's shape (see ``sum_to``)."""
from __future__ import annotations

import math

import numpy as np

from mini.autograd.function import Function, observed
from mini.autograd.tensor import Tensor
from mini.autograd import grad_mode
from mini.ndarray.dtypes import as_dtype
from mini.exercises import exercise
from mini.ops._util import nd, tangent_sum, sum_to, cast_like


_out = Tensor._wrap


def _binary(op: str, a, b):
    """Run a binary kernel on a Tensor/number pair (at least one is a Tensor)."""
    if isinstance(a, Tensor):
        return _out(a._data.ewise(op, b._data if isinstance(b, Tensor) else b))
    return _out(b._data.scalar(op, a, reverse=True))


@exercise("02.add_vjp")
def add_vjp(grad, a, b):
    """Vector-Jacobian product of ``out = a + b``: the gradients of a and b given ``grad``
    (dL/d out).  Returns ``(grad_a, grad_b)`` shaped like ``out``; the caller sums them
    back to each input's shape (exercise 02.unbroadcast).  The rule needs neither input,
    so mini passes None for ``a`` and ``b``."""
    ### BEGIN SOLUTION
    return grad, grad
    ### END SOLUTION


class Add(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, b):
        return _binary("add", a, b)

    @staticmethod
    def backward(ctx, g):
        ga, gb = add_vjp(g, None, None)
        return _reduce_grad(ga, ctx._arg_meta[0]), _reduce_grad(gb, ctx._arg_meta[1])

    @staticmethod
    def jvp(ctx, ta, tb):
        return tangent_sum(ctx._out_shape, ta, tb)


class Sub(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, b):
        return _binary("sub", a, b)

    @staticmethod
    def backward(ctx, g):
        a_meta, b_meta = ctx._arg_meta
        return _reduce_grad(g, a_meta), _reduce_grad(-g, b_meta) if b_meta else None

    @staticmethod
    def jvp(ctx, ta, tb):
        return tangent_sum(ctx._out_shape, ta, None if tb is None else -tb)


@exercise("02.mul_vjp")
def mul_vjp(grad, a, b):
    """VJP of ``out = a * b`` (a, b tensors or numbers): ``(grad_a, grad_b)``."""
    ### BEGIN SOLUTION
    return grad * b, grad * a
    ### END SOLUTION


@exercise("02.mul_jvp")
def mul_jvp(a, b, tangent_a, tangent_b):
    """Forward mode for ``out = a * b``: the tangent of out from the tangents of a and b
    (either may be None, meaning zero).  The product rule."""
    ### BEGIN SOLUTION
    if tangent_a is None:
        return a * tangent_b
    if tangent_b is None:
        return tangent_a * b
    return tangent_a * b + a * tangent_b
    ### END SOLUTION


class Mul(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, b):
        # Save only what backward needs (b for a's gradient, a for b's), so that an
        # in-place update of an input that needs no gradient stays legal.
        ctx.save_for_backward(a if _needs(ctx, 1) else 0.0, b if _needs(ctx, 0) else 0.0)
        return _binary("mul", a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga, gb = mul_vjp(g, a, b)
        a_meta, b_meta = ctx._arg_meta
        return (_reduce_grad(ga, a_meta) if _needs(ctx, 0) else None,
                _reduce_grad(gb, b_meta) if _needs(ctx, 1) else None)

    @staticmethod
    def jvp(ctx, ta, tb):
        a, b = ctx._fw_args
        return tangent_sum(ctx._out_shape, mul_jvp(a, b, ta, tb))


@exercise("02.div_vjp")
def div_vjp(grad, a, b):
    """VJP of ``out = a / b`` (a, b tensors or numbers): ``(grad_a, grad_b)``."""
    ### BEGIN SOLUTION
    return grad / b, -grad * a / (b * b)
    ### END SOLUTION


class Div(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _binary("div", a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga, gb = div_vjp(g, a, b)
        a_meta, b_meta = ctx._arg_meta
        return (_reduce_grad(ga, a_meta) if _needs(ctx, 0) else None,
                _reduce_grad(gb, b_meta) if _needs(ctx, 1) else None)

    @staticmethod
    def jvp(ctx, ta, tb):
        a, b = ctx._fw_args
        return tangent_sum(ctx._out_shape, None if ta is None else ta / b,
                           None if tb is None else -tb * a / (b * b))


class Neg(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a):
        return _out(a._data.unary("neg"))

    @staticmethod
    def backward(ctx, g):
        return -g

    @staticmethod
    def jvp(ctx, t):
        return -t


@exercise("02.pow_vjp")
def pow_vjp(grad, a, exponent: float):
    """VJP of ``out = a ** exponent`` for a tensor ``a`` and a number ``exponent``: grad_a."""
    ### BEGIN SOLUTION
    return grad * exponent * a ** (exponent - 1)
    ### END SOLUTION


class Pow(Function):
    """a ** b for tensor or number a and b (at least one tensor)."""
    _builtin = True

    @staticmethod
    def forward(ctx, a, b):
        out = _binary("pow", a, b)
        ctx.save_for_backward(a, b, out if _needs(ctx, 1) else None)
        return out

    @staticmethod
    def backward(ctx, g):
        a, b, out = ctx.saved_tensors
        a_meta, b_meta = ctx._arg_meta
        ga = gb = None
        if _needs(ctx, 0):
            if not isinstance(b, Tensor):
                ga = pow_vjp(g, a, b) if b != 0 else g * 0.0
            else:
                ga = g * b * a ** (b - 1)
            ga = _reduce_grad(ga, a_meta)
        if _needs(ctx, 1):
            # d(a^b)/db = a^b·log(a); at a == 0 the limit is 0 (as PyTorch defines it)
            if isinstance(a, Tensor):
                gb = where(a == 0, 0.0, g * out * a.log())
            else:
                gb = g * out * math.log(a) if a != 0 else g * 0.0
            gb = _reduce_grad(gb, b_meta)
        return ga, gb

    @staticmethod
    def jvp(ctx, ta, tb):
        a, b = ctx._fw_args
        terms = []
        if ta is not None:
            terms.append(ta * b * a ** (b - 1))
        if tb is not None:
            la = a.log() if isinstance(a, Tensor) else math.log(a)
            terms.append(tb * (a ** b) * la)
        return tangent_sum(ctx._out_shape, *terms)


@exercise("02.exp_vjp")
def exp_vjp(grad, out):
    """VJP of ``out = exp(a)``, written with the saved *output* (exp is its own derivative)."""
    ### BEGIN SOLUTION
    return grad * out
    ### END SOLUTION


@exercise("02.log_vjp")
def log_vjp(grad, a):
    """VJP of ``out = log(a)``: grad_a."""
    ### BEGIN SOLUTION
    return grad / a
    ### END SOLUTION


@exercise("02.relu_vjp")
def relu_vjp(grad, a):
    """VJP of ``out = relu(a)``: the gradient passes where a > 0 and is 0 where a <= 0."""
    ### BEGIN SOLUTION
    return grad * (a > 0).to(dtype=grad.dtype)
    ### END SOLUTION




def _unary(name, kernel, grad_rule, saves="input", vjp=None):
    """Build a unary Function from its kernel name and its derivative rule.

    ``grad_rule(x, y)`` returns dy/dx as a Tensor expression of the input x and the output y;
    ``vjp(g, x, y)``, where given, is the backward rule (an exercise slot of chapter 02).
    """
    def forward(ctx, a):
        out = _out(a._data.unary(kernel))
        ctx.save_for_backward(a if "input" in saves else None, out if "output" in saves else None)
        return out

    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return vjp(g, x, y) if vjp is not None else g * grad_rule(x, y)

    def jvp(ctx, t):
        x, y = ctx.saved_tensors
        return t * grad_rule(x, y)

    return type(name, (Function,), {"_builtin": True, "forward": staticmethod(forward),
                                    "backward": staticmethod(backward), "jvp": staticmethod(jvp)})


_SQRT_2PI = math.sqrt(2 * math.pi)

Exp = _unary("Exp", "exp", lambda x, y: y, saves="output", vjp=lambda g, x, y: exp_vjp(g, y))
Log = _unary("Log", "log", lambda x, y: 1.0 / x, vjp=lambda g, x, y: log_vjp(g, x))
Sqrt = _unary("Sqrt", "sqrt", lambda x, y: 0.5 / y, saves="output")
Sin = _unary("Sin", "sin", lambda x, y: x.cos())
Cos = _unary("Cos", "cos", lambda x, y: -x.sin())
Tanh = _unary("Tanh", "tanh", lambda x, y: 1.0 - y * y, saves="output")
Sigmoid = _unary("Sigmoid", "sigmoid", lambda x, y: y * (1.0 - y), saves="output")
# relu'(x) = 1 for x > 0 and 0 for x <= 0 (PyTorch's choice at the kink)
Relu = _unary("Relu", "relu", lambda x, y: (x > 0).to(dtype=x.dtype),
               vjp=lambda g, x, y: relu_vjp(g, x))
Abs = _unary("Abs", "abs", lambda x, y: x.sign())
# exact GELU: x·Φ(x), derivative Φ(x) + x·φ(x)
Gelu = _unary("Gelu", "gelu",
              lambda x, y: 0.5 * (1.0 + (x * (1 / math.sqrt(2.0))).erf())
              + x * (-0.5 * x * x).exp() / _SQRT_2PI)


class Maximum(Function):
    """Elementwise max; where a == b the gradient is split evenly (as PyTorch does)."""
    _builtin = True

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _binary("maximum", a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        a_meta, b_meta = ctx._arg_meta
        wa = (a > b).to(dtype=g.dtype) + 0.5 * (a == b).to(dtype=g.dtype)
        return _reduce_grad(g * wa, a_meta), _reduce_grad(g * (1.0 - wa), b_meta)

    @staticmethod
    def jvp(ctx, ta, tb):
        a, b = ctx.saved_tensors
        wa = (a > b).to(dtype=a.dtype) + 0.5 * (a == b).to(dtype=a.dtype)
        return tangent_sum(ctx._out_shape, None if ta is None else ta * wa,
                           None if tb is None else tb * (1.0 - wa))


class Where(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, cond, a, b):
        ctx.cond = cond
        return _out(cond._data.where(a._data, b._data))

    @staticmethod
    def backward(ctx, g):
        zero = g * 0.0
        a_meta, b_meta = ctx._arg_meta[1], ctx._arg_meta[2]
        return (None, _reduce_grad(where(ctx.cond, g, zero), a_meta),
                _reduce_grad(where(ctx.cond, zero, g), b_meta))

    @staticmethod
    def jvp(ctx, tc, ta, tb):
        a, b = ctx._fw_args[1], ctx._fw_args[2]
        ta = ta if ta is not None else a * 0.0
        tb = tb if tb is not None else b * 0.0
        return where(ctx.cond, ta, tb)


class Cast(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, dtype):
        ctx.src_dtype = a.dtype
        return _out(a._data.astype(dtype))

    @staticmethod
    def backward(ctx, g):
        return g.to(dtype=ctx.src_dtype), None

    @staticmethod
    def jvp(ctx, t, _):
        return t.to(dtype=ctx._out_dtype)


class ToDevice(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, device):
        ctx.src_device = a.device
        return _out(a._data.to(device))

    @staticmethod
    def backward(ctx, g):
        return to_device(g, ctx.src_device), None


def _needs(ctx, i) -> bool:
    n = ctx.needs_input_grad
    return bool(n) and n[i]


def _reduce_grad(g, meta):
    if meta is None:
        return None
    shape, dtype = meta
    return cast_like(sum_to(g, shape), dtype)


# --- public functions ----------------------------------------------------------------------
def _binary_op(fn_cls):
    apply = fn_cls.apply

    def op(a, b):
        if isinstance(b, Tensor) and isinstance(a, Tensor):  # the common case, checked first
            return apply(a, b)
        _check_operands(fn_cls.__name__.lower(), a, b)
        like = a if isinstance(a, Tensor) else b
        return apply(_as_operand(a, like), _as_operand(b, like))
    op.__name__ = fn_cls.__name__.lower()
    return op


def _check_operands(name, a, b):
    for x in (a, b):
        if not isinstance(x, (Tensor, int, float, bool, np.ndarray, np.number)):
            raise TypeError(f"{name}: unsupported operand type {type(x).__name__}")


def _as_operand(x, like):
    """numpy arrays become tensors on the other operand's device; numbers stay numbers."""
    if isinstance(x, np.ndarray):
        return Tensor(x, device=like.device)
    if isinstance(x, np.number):
        return x.item()
    return x


add = _binary_op(Add)
sub = _binary_op(Sub)
mul = _binary_op(Mul)
div = _binary_op(Div)
pow = _binary_op(Pow)
maximum = _binary_op(Maximum)


def minimum(a, b):
    return -maximum(-a, -b)


def neg(a):
    return Neg.apply(a)


def exp(a):
    return Exp.apply(a)


def log(a):
    return Log.apply(a)


def sqrt(a):
    return Sqrt.apply(a)


def sin(a):
    return Sin.apply(a)


def cos(a):
    return Cos.apply(a)


def tanh(a):
    return Tanh.apply(a)


def sigmoid(a):
    return Sigmoid.apply(a)


def relu(a):
    return Relu.apply(a)


def gelu(a):
    return Gelu.apply(a)


def abs(a):
    return Abs.apply(a)


def where(cond, a, b):
    if not isinstance(a, Tensor):
        a = Tensor(a, dtype=b.dtype if isinstance(b, Tensor) else None, device=cond.device)
    if not isinstance(b, Tensor):
        b = Tensor(b, dtype=a.dtype, device=cond.device)
    return Where.apply(cond, a, b)


def clamp(a, min=None, max=None):
    out = a
    if min is not None:
        out = maximum(out, _like(min, a))
    if max is not None:
        out = minimum(out, _like(max, a))
    return out


def _like(v, a):
    return v if isinstance(v, Tensor) else Tensor(v, dtype=a.dtype, device=a.device)


def cast(a, dtype):
    return Cast.apply(a, as_dtype(dtype))


def to_device(a, device):
    return ToDevice.apply(a, device)


# Not differentiable: comparisons, sign, erf (used inside derivative rules).  They do not
# go through Function.apply, so ``observed`` shows them to the op observer.
def _compare(op):
    def f(a, b):
        if isinstance(a, Tensor):
            return _out(a._data.ewise(op, nd(b)))
        return _out(b._data.scalar(op, a, reverse=True))
    f.__name__ = op
    return observed(f)


eq, ne, lt, le, gt, ge = (_compare(o) for o in ("eq", "ne", "lt", "le", "gt", "ge"))


@observed
def sign(a):
    return _out(a._data.unary("sign"))


@observed
def isfinite(a):
    return _out(a._data.unary("isfinite"))


@observed
def isnan(a):
    return _out(a._data.unary("isnan"))


@observed
def logical_not(a):
    return _out(a._data.unary("logical_not"))


@observed
def any(a, dim=None, keepdim=False):
    return _out(a._data.reduce("any", dim, keepdim))


@observed
def all(a, dim=None, keepdim=False):
    return _out(a._data.reduce("all", dim, keepdim))


def erf(a):
    if a.requires_grad and grad_mode.is_grad_enabled():
        return Erf.apply(a)
    return _erf_values(a)


def _erf_values(a):
    return _out(a._data.unary("erf"))


_erf_values = observed(_erf_values, "erf")


Erf = _unary("Erf", "erf", lambda x, y: (2 / math.sqrt(math.pi)) * (-(x * x)).exp())
