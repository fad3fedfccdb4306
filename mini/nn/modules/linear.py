"""Linear (fully connected) and Identity layers."""
from __future__ import annotations

import math

from mini.autograd.tensor import Tensor
from mini.ndarray import NDArray, as_dtype, get_default_dtype
from mini.nn import functional as F
from mini.nn import init
from mini.nn.module import Module
from mini.nn.parameter import Parameter


def _empty(shape, dtype=None, device=None) -> Tensor:
    d = as_dtype(dtype) if dtype is not None else get_default_dtype()
    return Tensor(NDArray.empty(shape, d, device))


class Identity(Module):
    """Returns its input unchanged (a placeholder, e.g. to remove a layer from a model)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` with ``weight`` [out_features, in_features] and ``bias``
    [out_features].

    Both start as U(-1/sqrt(in_features), 1/sqrt(in_features)), PyTorch's default (the weight
    through ``kaiming_uniform_(a=sqrt(5))``).
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(_empty((out_features, in_features), dtype, device))
        if bias:
            self.bias = Parameter(_empty((out_features,), dtype, device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")
