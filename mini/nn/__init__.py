"""Neural-network building blocks (layer 4 of mini), with PyTorch's names.

``Module`` is the base class of layers and models; ``Parameter`` marks trainable tensors;
``mini.nn.functional`` (``F``) holds the stateless functions; ``mini.nn.init`` the
initialisers.
"""
from mini.nn.parameter import Parameter, Buffer
from mini.nn.module import Module
from mini.nn import functional, init, utils, parallel
from mini.nn.modules import *  # noqa: F401,F403
from mini.nn.modules import __all__ as _modules_all

__all__ = ["Parameter", "Buffer", "Module", "functional", "init", "utils", "parallel"] + list(_modules_all)
