"""Weight initialisation (``mini.nn.init``), with PyTorch's names and formulas.

Every function fills its tensor in place without recording a graph and returns it.  The
random ones draw from mini's global generator, so ``mini.manual_seed(s)`` makes them
reproducible.

The scale rules keep the variance of activations roughly constant from layer to layer:
Kaiming (He) uses ``std = gain / sqrt(fan)``, Xavier (Glorot) ``std = gain * sqrt(2 / (fan_in
+ fan_out))``; a uniform distribution on [-b, b] has std ``b / sqrt(3)``.

``kaiming_normal_`` draws through the chapter 05 exercise ``05.kaiming_init`` (He's normal
draw, :mod:`mini.nn.he_init`).  ``kaiming_uniform_`` (what Linear and Conv2d start from)
cannot: the exercise draws from a normal distribution, and a uniform one with the same
variance is another draw, so it keeps its own line here.
"""
from __future__ import annotations

import math
import warnings

from mini.autograd import grad_mode
from mini.autograd.tensor import Tensor
from mini.nn import he_init as _he_init

_RELU_GAIN = math.sqrt(2.0)

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "ones_", "zeros_",
           "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_"]


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The factor by which a nonlinearity shrinks the standard deviation, to undo in init.

    linear / conv / sigmoid: 1; tanh: 5/3; relu: sqrt(2); leaky_relu with slope ``param``
    (default 0.01): sqrt(2 / (1 + slope^2)); selu: 3/4.
    """
    linear_fns = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                  "conv_transpose2d", "conv_transpose3d"]
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """``fan_in = shape[1] * receptive field``, ``fan_out = shape[0] * receptive field``
    (receptive field = product of ``shape[2:]``, 1 for a Linear weight)."""
    if tensor.dim() < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than "
                         f"2 dimensions (got shape {tuple(tensor.shape)})")
    receptive = 1
    for s in tensor.shape[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _check_mode(mode: str) -> str:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    return mode


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = _check_mode(mode)
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def _check_generator(generator) -> None:
    if generator is not None:
        raise NotImplementedError("mini's initialisers draw from the global generator; "
                                  "seed it with mini.manual_seed(...) instead of passing "
                                  "generator=")


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with values drawn from U(a, b)."""
    _check_generator(generator)
    with grad_mode.no_grad():
        return tensor.uniform_(a, b)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with values drawn from N(mean, std²)."""
    _check_generator(generator)
    with grad_mode.no_grad():
        return tensor.normal_(mean, std)


def constant_(tensor: Tensor, val: float) -> Tensor:
    with grad_mode.no_grad():
        return tensor.fill_(val)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def _no_elements(tensor: Tensor, fn: str) -> bool:
    if tensor.numel() == 0:
        warnings.warn(f"Initializing zero-element tensors is a no-op ({fn})")
        return True
    return False


def kaiming_uniform_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """He initialisation, uniform: U(-b, b) with ``b = gain * sqrt(3 / fan)``.

    ``a`` is the negative slope of the leaky ReLU that follows (``a=sqrt(5)`` with fan_in
    gives Linear's default, U(-1/sqrt(in_features), 1/sqrt(in_features))).
    """
    _check_generator(generator)
    if _no_elements(tensor, "kaiming_uniform_"):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor: Tensor, a: float = 0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu", generator=None) -> Tensor:
    """He initialisation, normal: N(0, std²) with ``std = gain / sqrt(fan)``.

    The draw is the ``05.kaiming_init`` exercise (:func:`mini.nn.he_init.kaiming_normal_`,
    N(0, 2 / fan): the ReLU gain sqrt(2)); any other gain rescales it by ``gain / sqrt(2)``.
    """
    _check_generator(generator)
    if _no_elements(tensor, "kaiming_normal_"):
        return tensor
    mode = _check_mode(mode)
    gain = calculate_gain(nonlinearity, a)
    _he_init.kaiming_normal_(tensor, mode=mode)
    if gain != _RELU_GAIN:
        with grad_mode.no_grad():
            tensor.mul_(gain / _RELU_GAIN)
    return tensor


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot initialisation, uniform: U(-b, b) with ``b = gain * sqrt(6 / (fan_in + fan_out))``."""
    _check_generator(generator)
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -math.sqrt(3.0) * std, math.sqrt(3.0) * std)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot initialisation, normal: N(0, std²) with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    _check_generator(generator)
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std)
