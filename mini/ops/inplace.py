"""In-place operations: they write through the tensor's view into the shared buffer and
bump the storage's version counter.

With autograd, an in-place op on a tensor that is part of a graph is recorded as its
out-of-place twin whose result is written back: the tensor's ``grad_fn`` moves to the new
node.  Backward rules that saved the old value notice the version bump and raise."""
from __future__ import annotations

import numbers

from mini.autograd import grad_mode
from mini.autograd.function import observed
from mini.autograd.tensor import Tensor
from mini.ops import elementwise as E
from mini.ops import shape as SH
from mini import random as _random


def _check_inplace(t: Tensor, *others) -> bool:
    """True if this in-place op must be recorded in the graph; raises where it can't be."""
    if not grad_mode.is_grad_enabled():
        return False
    involved = t.requires_grad or any(isinstance(o, Tensor) and o.requires_grad for o in others)
    if not involved:
        return False
    if t.is_leaf and t.requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation. Wrap the update in `with mini.no_grad():` (as optimizers "
                           "do), or work on a clone().")
    if t._base is not None and (t._base.requires_grad or t.requires_grad):
        raise RuntimeError("mini does not record in-place writes into a view of a tensor that "
                           "requires grad; clone() the view first, or write into the base tensor")
    return True


def _write_back(t: Tensor, result: Tensor) -> Tensor:
    """Store ``result`` into ``t``'s buffer and move ``t`` onto the recorded history."""
    t._data.copy_from(result._data.astype(t.dtype))
    if result.requires_grad:
        t.grad_fn = result.grad_fn
        t.requires_grad = True
    return t


def _inplace_binary(op_name, fn):
    def method(self, other, alpha=None):
        if alpha is not None:
            other = other * alpha
        if _check_inplace(self, other):
            # The op may save its input for backward (mul_ by a tensor that requires grad
            # needs the old value): give it a recorded copy, since the buffer is overwritten.
            return _write_back(self, fn(SH.clone(self), other))
        if isinstance(other, Tensor):
            result = self._data.ewise(op_name, other._data)
            if tuple(result.shape) != tuple(self.shape):
                raise RuntimeError(f"output with shape {tuple(self.shape)} doesn't match the "
                                   f"broadcast shape {tuple(result.shape)}")
        else:
            result = self._data.scalar(op_name, other)
        self._data.copy_from(result.astype(self.dtype))
        return self
    method.__name__ = op_name + "_"
    return method


# In-place ops do not go through Function.apply (without a graph they write the buffer
# directly): ``observed`` shows each of them to the op observer.
add_ = observed(_inplace_binary("add", E.add))
sub_ = observed(_inplace_binary("sub", E.sub))
mul_ = observed(_inplace_binary("mul", E.mul))
div_ = observed(_inplace_binary("div", E.div))


@observed
def pow_(self, exponent):
    if _check_inplace(self, exponent):
        return _write_back(self, E.pow(SH.clone(self), exponent))
    self._data.copy_from((self._data.ewise("pow", exponent._data) if isinstance(exponent, Tensor)
                          else self._data.scalar("pow", exponent)).astype(self.dtype))
    return self


@observed
def clamp_(self, min=None, max=None):
    if _check_inplace(self):
        # clamp saves its input for backward: give it a recorded copy (see _inplace_binary)
        return _write_back(self, E.clamp(SH.clone(self), min, max))
    self._data.copy_from(E.clamp(self, min, max)._data)
    return self


def apply_(self, fn):
    """Write ``fn(self)`` into ``self`` in place and return ``self``: what ``inplace=True``
    means for a function of one tensor (``F.leaky_relu(x, inplace=True)``).  Recorded like
    the other in-place ops: ``fn`` runs on a recorded copy, so what it saves for backward
    is not overwritten."""
    if _check_inplace(self):
        return _write_back(self, fn(SH.clone(self)))
    with grad_mode.no_grad():
        result = fn(self)
    self._data.copy_from(result._data.astype(self.dtype))
    return self


@observed
def copy_(self, src):
    if not isinstance(src, Tensor):
        raise TypeError(f"copy_: expected a Tensor source, got {type(src).__name__}")
    if _check_inplace(self, src):
        return _write_back(self, SH.Copy.apply(self, src))
    self._data.copy_from(src._data.astype(self.dtype))
    return self


@observed
def fill_(self, value):
    if isinstance(value, Tensor):
        value = value.item()
    if _check_inplace(self):
        return _write_back(self, SH.Copy.apply(self, Tensor(value, dtype=self.dtype,
                                                            device=self.device)))
    self._data.fill(value)
    return self


@observed
def zero_(self):
    return fill_(self, 0)


@observed
def setitem(self, key, value):
    if isinstance(key, Tensor):
        key = key._data.to_numpy_view() if key.dtype.name == "bool" else key
    if _check_inplace(self, value):
        return _write_back(self, SH.SetItem.apply(self, key, value))
    if isinstance(value, Tensor):
        self._data[key] = value._data.astype(self.dtype)
    elif isinstance(value, (numbers.Number, bool)):
        self._data[key] = value
    else:
        self._data[key] = Tensor(value, dtype=self.dtype, device=self.device)._data
    return None


@observed
def uniform_(self, a: float = 0.0, b: float = 1.0):
    with grad_mode.no_grad():
        values = _random.generator().uniform(a, b, size=tuple(self.shape))
        self._data.copy_from(Tensor(values, dtype=self.dtype, device=self.device)._data)
    return self


@observed
def normal_(self, mean: float = 0.0, std: float = 1.0):
    with grad_mode.no_grad():
        values = _random.generator().normal(mean, std, size=tuple(self.shape))
        self._data.copy_from(Tensor(values, dtype=self.dtype, device=self.device)._data)
    return self
