"""The layers of mini.nn."""
from mini.nn.modules.linear import Identity, Linear
from mini.nn.modules.activation import ReLU, Sigmoid, Tanh, GELU, Softmax, LogSoftmax
from mini.nn.modules.flatten import Flatten
from mini.nn.modules.container import Sequential, ModuleList, ModuleDict
from mini.nn.modules.loss import MSELoss, L1Loss, NLLLoss, CrossEntropyLoss

__all__ = ["Identity", "Linear", "ReLU", "Sigmoid", "Tanh", "GELU", "Softmax", "LogSoftmax",
           "Flatten", "Sequential", "ModuleList", "ModuleDict", "MSELoss", "L1Loss", "NLLLoss",
           "CrossEntropyLoss"]
