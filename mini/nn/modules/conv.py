"""Conv2d and MaxPool2d (NCHW), on :mod:`mini.ops.conv` (im2col + matmul)."""
from __future__ import annotations

import math

from mini.autograd.tensor import Tensor
from mini.nn import init
from mini.nn.module import Module
from mini.nn.parameter import Parameter
from mini.ops import conv as _conv
from mini.ops import creation as _C

__all__ = ["Conv2d", "MaxPool2d"]


class Conv2d(Module):
    """``out = conv2d(x, weight, bias)`` with ``weight`` [out_channels, in_channels, kh, kw].

    Initialised like PyTorch: weight ~ kaiming_uniform(a=sqrt(5)) (that is
    U(-1/sqrt(fan_in), 1/sqrt(fan_in))), bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    ``fan_in = in_channels * kh * kw``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None):
        super().__init__()
        if padding_mode != "zeros" or groups != 1 or _conv._pair(dilation, "dilation") != (1, 1):
            raise NotImplementedError("mini's Conv2d supports padding_mode='zeros', groups=1, "
                                      "dilation=1")
        if isinstance(padding, str):
            raise NotImplementedError("mini's Conv2d takes an int padding, not 'same'/'valid'")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _conv._pair(kernel_size, "kernel_size")
        self.stride = _conv._pair(stride, "stride")
        self.padding = _conv._pair(padding, "padding")
        self.weight = Parameter(_C.empty(out_channels, in_channels, *self.kernel_size, dtype=dtype))
        if bias:
            self.bias = Parameter(_C.empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return _conv.conv2d(input, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.bias is None:
            s += ", bias=False"
        return s


class MaxPool2d(Module):
    """Maximum over ``kernel_size`` windows; ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding

    def forward(self, input: Tensor) -> Tensor:
        return _conv.max_pool2d(input, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
