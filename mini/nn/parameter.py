"""Parameter: a Tensor that a Module registers as trainable state; Buffer: one it registers
as non-trainable state (running statistics)."""
from __future__ import annotations

from mini.autograd.tensor import Tensor


class Parameter(Tensor):
    """A tensor that, assigned as an attribute of a :class:`~mini.nn.Module`, is registered as
    one of its parameters (so ``module.parameters()`` finds it and an optimizer updates it).

    ``Parameter(data)`` shares ``data``'s memory and requires grad unless told otherwise.
    """

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True):
        if data is None:
            from mini.ndarray import NDArray, get_default_dtype
            nd = NDArray.empty((0,), get_default_dtype())
        elif isinstance(data, Tensor):
            nd = data._data
        else:
            nd = Tensor(data)._data
        super().__init__(nd)  # same buffer, no history: a parameter is always a leaf
        if requires_grad:
            self.requires_grad_(True)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = type(self)(self.detach().clone(), self.requires_grad)
        memo[id(self)] = result
        return result

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (self.detach(), self.requires_grad))


def _rebuild_parameter(data, requires_grad):
    return Parameter(data, requires_grad)


class Buffer(Tensor):
    """Marks a tensor to be registered as a buffer when assigned to a Module attribute
    (``self.running_mean = nn.Buffer(mini.zeros(n))``), like ``register_buffer``.
    The module stores a plain Tensor sharing this one's memory."""

    def __init__(self, data: Tensor, *, persistent: bool = True):
        nd = data._data if isinstance(data, Tensor) else Tensor(data)._data
        super().__init__(nd)
        self.persistent = persistent
