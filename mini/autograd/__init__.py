"""Reverse-mode (and forward-mode) automatic differentiation: layer 2 of mini."""
from mini.autograd.grad_mode import no_grad, enable_grad, set_grad_enabled, is_grad_enabled
from mini.autograd.function import Function, Node, AccumulateGrad, RemovableHandle
from mini.autograd.tensor import Tensor, Size
from mini.autograd.engine import backward, grad, topological_order
from mini.autograd.gradcheck import gradcheck, GradcheckError
from mini.autograd import forward_ad
from mini.autograd import graph

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "Function", "Node",
           "AccumulateGrad", "RemovableHandle", "Tensor", "Size", "backward", "grad",
           "topological_order", "gradcheck", "GradcheckError", "forward_ad", "graph"]
