"""mini: a small deep-learning framework you build yourself, one chapter at a time.

Layers, bottom up: ``mini.ndarray`` (strided arrays on a backend), ``mini.autograd``
(Tensor, Function, backward), ``mini.ops`` (differentiable operations), ``mini.nn``,
``mini.optim``, ``mini.utils``.  Names follow PyTorch: ``mini.tensor``, ``x.backward()``,
``mini.no_grad()``, ``mini.nn.Linear``, ``mini.optim.SGD``.
"""
from mini.ndarray import dtype, float32, float64, int64, bool_, get_default_dtype, set_default_dtype
from mini.backends import (get_backend as _get_backend, device, set_default_device,
                           get_default_device)
from mini.autograd import (Tensor, Size, Function, no_grad, enable_grad, set_grad_enabled,
                           is_grad_enabled)
from mini import autograd
from mini.ops import *  # noqa: F401,F403  (tensor, zeros, add, matmul, ...)
from mini.random import manual_seed, get_rng_state, set_rng_state
from mini import exercises
from mini.serialization import save, load

float = float32  # noqa: A001  (mini.float, as torch.float)
double = float64
long = int64
bool = bool_  # noqa: A001
is_tensor = autograd.tensor.is_tensor

__version__ = "0.1.0"


def __getattr__(name):
    # Higher layers load on first use, so `import mini` stays fast.
    import importlib
    if name == "compile":              # mini.compile, as torch.compile (see mini.jit)
        from mini.jit import compile
        return compile
    if name in ("nn", "optim", "utils", "napkin", "distributed", "cuda", "jit"):
        try:
            return importlib.import_module(f"mini.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"mini.{name}":
                raise
            # a package built in a later chapter: say so, not a bare import error
            chapter = {"cuda": "04"}.get(name, "06")
            raise AttributeError(f"module 'mini' has no attribute {name!r} (mini.{name} arrives "
                                 f"with chapter {chapter})") from None
    raise AttributeError(f"module 'mini' has no attribute {name!r}")
