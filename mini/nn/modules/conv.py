"""Conv2d and the 2-D pooling layers (NCHW), on :mod:`mini.nn.functional`: the
convolution runs the chapter 04 slots (im2col + one matrix product)."""
from __future__ import annotations

import math

from mini.autograd.tensor import Tensor
from mini.nn import functional as F
from mini.nn import init
from mini.nn.module import Module
from mini.nn.parameter import Parameter
from mini.ops import conv as _conv
from mini.ops import creation as _C

__all__ = ["Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d"]

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class Conv2d(Module):
    """``out = conv2d(x, weight, bias)`` with ``weight`` [out_channels, in_channels / groups,
    kh, kw].

    Initialised like PyTorch: weight ~ kaiming_uniform(a=sqrt(5)) (that is
    U(-1/sqrt(fan_in), 1/sqrt(fan_in))), bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    ``fan_in = in_channels / groups * kh * kw``.  ``padding_mode`` other than ``'zeros'``
    pads with :func:`mini.nn.functional.pad` first, as PyTorch does.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None):
        super().__init__()
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {_PADDING_MODES}, got {padding_mode!r}")
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must be divisible by groups ({groups})")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = _conv._pair(kernel_size, "kernel_size")
        self.stride = _conv._pair(stride, "stride")
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Conv2d: padding must be an int, a pair, 'same' or 'valid', got "
                                 f"{padding!r}")
            if padding == "same" and self.stride != (1, 1):
                raise ValueError("Conv2d: padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _conv._pair(padding, "padding")
        self.dilation = _conv._pair(dilation, "dilation")
        self.groups = groups
        self.padding_mode = padding_mode
        self.weight = Parameter(_C.empty(out_channels, in_channels // groups, *self.kernel_size,
                                         dtype=dtype, device=device))
        if bias:
            self.bias = Parameter(_C.empty(out_channels, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def _explicit_padding(self) -> tuple:
        """(left, right, top, bottom) for F.pad, when padding_mode is not 'zeros'."""
        if self.padding == "valid":
            return (0, 0, 0, 0)
        if self.padding == "same":
            total = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            return (total[1] // 2, total[1] - total[1] // 2, total[0] // 2, total[0] - total[0] // 2)
        ph, pw = self.padding
        return (pw, pw, ph, ph)

    def forward(self, input: Tensor) -> Tensor:
        if self.padding_mode != "zeros":
            padded = F.pad(input, self._explicit_padding(), mode=self.padding_mode)
            return F.conv2d(padded, self.weight, self.bias, self.stride, 0, self.dilation,
                            self.groups)
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Pool2d(Module):
    def __init__(self, kernel_size, stride, padding, ceil_mode: bool):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"ceil_mode={self.ceil_mode}")


class MaxPool2d(_Pool2d):
    """Maximum over ``kernel_size`` windows; ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1,
                 return_indices: bool = False, ceil_mode: bool = False):
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.dilation = dilation
        self.return_indices = return_indices

    def forward(self, input: Tensor):
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                            ceil_mode=self.ceil_mode, return_indices=self.return_indices)


class AvgPool2d(_Pool2d):
    """Mean over ``kernel_size`` windows; ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True, divisor_override: int | None = None):
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)


class AdaptiveAvgPool2d(Module):
    """Mean pooling to a fixed output size (``AdaptiveAvgPool2d(1)``: global average)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
