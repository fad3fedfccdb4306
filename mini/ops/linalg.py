"""Matrix multiplication, batched and broadcasting like numpy.matmul.

The backward rule is exercise 02.matmul_vjp; the gradients are summed over broadcast
batch axes.  1-D operands are treated as a row (left) or a column (right) vector, as numpy does."""
from __future__ import annotations

from mini.autograd.function import Function
from mini.autograd.tensor import Tensor
from mini.exercises import exercise
from mini.ops._util import sum_to, cast_like


@exercise("02.matmul_vjp")
def matmul_vjp(grad, a, b):
    """VJP of ``out = a @ b`` for operands with at least 2 dimensions (leading axes are a
    batch of matrices): ``(grad_a, grad_b)``.  For matrices, grad_a has a's shape and grad_b
    has b's; with a broadcast batch their batch axes are out's, and the caller sums them
    back to each operand's shape."""
    ### BEGIN SOLUTION
    return grad @ b.transpose(-1, -2), a.transpose(-1, -2) @ grad
    ### END SOLUTION


class MatMul(Function):
    _builtin = True

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return Tensor._wrap(a._data.matmul(b._data))

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        (a_shape, a_dtype), (b_shape, b_dtype) = ctx._arg_meta
        # Promote vectors to matrices so one rule covers every case.
        if len(a_shape) == 1 and len(b_shape) == 1:
            g = g.reshape(1, 1)
        elif len(a_shape) == 1:
            g = g.unsqueeze(-2)
        elif len(b_shape) == 1:
            g = g.unsqueeze(-1)
        a2 = a.unsqueeze(-2) if len(a_shape) == 1 else a
        b2 = b.unsqueeze(-1) if len(b_shape) == 1 else b
        ga, gb = matmul_vjp(g, a2, b2)
        if ctx.needs_input_grad[0]:
            ga = ga.squeeze(-2) if len(a_shape) == 1 else ga
            ga = cast_like(sum_to(ga, a_shape), a_dtype)
        else:
            ga = None
        if ctx.needs_input_grad[1]:
            gb = gb.squeeze(-1) if len(b_shape) == 1 else gb
            gb = cast_like(sum_to(gb, b_shape), b_dtype)
        else:
            gb = None
        return ga, gb

    @staticmethod
    def jvp(ctx, ta, tb):
        a, b = ctx._fw_args
        out = None
        if ta is not None:
            out = ta @ b
        if tb is not None:
            out = a @ tb if out is None else out + a @ tb
        return out


def matmul(a, b):
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise TypeError(f"matmul: both operands must be tensors, got {type(a).__name__} and "
                        f"{type(b).__name__}")
    return MatMul.apply(a, b)
