"""Differentiable operations (layer 3) and the Tensor methods that call them."""
from mini.autograd.tensor import Tensor
from mini.ops.elementwise import (add, sub, mul, div, neg, pow, exp, log, sqrt, sin, cos, tanh,
                                  sigmoid, relu, gelu, abs, maximum, minimum, where, clamp, cast,
                                  to_device, eq, ne, lt, le, gt, ge, sign, erf,
                                  isfinite, isnan, logical_not, any, all)
from mini.ops.reduction import (sum, mean, max, min, amax, amin, argmax, argmin, logsumexp,
                                var, std)
from mini.ops.shape import (reshape, view, permute, transpose, t, broadcast_to, expand, expand_as,
                            getitem, squeeze, unsqueeze, flatten, cat, stack, contiguous, clone)
from mini.ops.linalg import matmul
from mini.ops import inplace as _inplace
from mini.ops.creation import (tensor, as_tensor, from_numpy, empty, zeros, ones, full,
                               zeros_like, ones_like, empty_like, full_like, arange, linspace,
                               eye, rand, randn, randint, randperm)


def _swap(fn):
    return lambda self, other: fn(other, self)


def _operator(fn, fn_cls):
    """``tensor <op> other``: straight to the Function when ``other`` is a tensor (the hot
    path of every binary operator), through the checks of ``fn`` otherwise."""
    apply = fn_cls.apply

    def method(self, other):
        if isinstance(other, Tensor):
            return apply(self, other)
        return fn(self, other)
    method.__name__ = fn.__name__
    return method


def _install_tensor_methods():
    from mini.ops import elementwise as E
    T = Tensor
    T.__add__, T.__radd__ = _operator(add, E.Add), _swap(add)
    T.__sub__, T.__rsub__ = _operator(sub, E.Sub), _swap(sub)
    T.__mul__, T.__rmul__ = _operator(mul, E.Mul), _swap(mul)
    T.__truediv__, T.__rtruediv__ = _operator(div, E.Div), _swap(div)
    T.__pow__, T.__rpow__ = pow, _swap(pow)
    T.__matmul__, T.__rmatmul__ = matmul, _swap(matmul)
    T.__neg__ = neg
    T.__invert__ = logical_not
    T.__pos__ = lambda self: self
    T.__abs__ = abs
    T.__eq__, T.__ne__, T.__lt__, T.__le__, T.__gt__, T.__ge__ = eq, ne, lt, le, gt, ge
    T.__getitem__ = getitem
    T.__setitem__ = _inplace.setitem
    T.__iadd__ = _inplace.add_
    T.__isub__ = _inplace.sub_
    T.__imul__ = _inplace.mul_
    T.__itruediv__ = _inplace.div_
    for name, fn in dict(
            add=add, sub=sub, mul=mul, div=div, pow=pow, neg=neg, exp=exp, log=log, sqrt=sqrt,
            sin=sin, cos=cos, tanh=tanh, sigmoid=sigmoid, relu=relu, abs=abs, maximum=maximum,
            minimum=minimum, clamp=clamp, sign=sign, erf=erf, isfinite=isfinite, isnan=isnan,
            logical_not=logical_not, any=any, all=all, eq=eq, ne=ne, lt=lt, le=le, gt=gt,
            ge=ge, sum=sum, mean=mean, max=max, min=min, amax=amax, amin=amin, argmax=argmax,
            argmin=argmin, logsumexp=logsumexp, var=var, std=std, reshape=reshape, view=view,
            permute=permute, transpose=transpose, t=t, broadcast_to=broadcast_to, expand=expand,
            expand_as=expand_as, squeeze=squeeze, unsqueeze=unsqueeze, flatten=flatten,
            contiguous=contiguous, clone=clone, matmul=matmul,
            add_=_inplace.add_, sub_=_inplace.sub_, mul_=_inplace.mul_, div_=_inplace.div_,
            pow_=_inplace.pow_, clamp_=_inplace.clamp_, copy_=_inplace.copy_,
            fill_=_inplace.fill_, zero_=_inplace.zero_, uniform_=_inplace.uniform_,
            normal_=_inplace.normal_).items():
        setattr(T, name, fn)
    T.view_as = lambda self, other: view(self, tuple(other.shape))
    T.reshape_as = lambda self, other: reshape(self, tuple(other.shape))
    T.gelu = gelu


_install_tensor_methods()

from mini.ops import fast_paths as _fast_paths  # noqa: E402,F401  (registers mini's fast paths)
