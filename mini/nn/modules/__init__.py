"""The layers of mini.nn."""
from mini.nn.modules.linear import Identity, Linear
from mini.nn.modules.activation import (ReLU, Sigmoid, Tanh, GELU, Softmax, LogSoftmax, LeakyReLU,
                                        ELU, SiLU, Softplus, Hardtanh, ReLU6, LogSigmoid)
from mini.nn.modules.flatten import Flatten
from mini.nn.modules.container import Sequential, ModuleList, ModuleDict
from mini.nn.modules.loss import (MSELoss, L1Loss, NLLLoss, CrossEntropyLoss, SmoothL1Loss,
                                  HuberLoss, BCELoss, BCEWithLogitsLoss)
from mini.nn.modules.conv import Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d
from mini.nn.modules.normalization import BatchNorm1d, BatchNorm2d, LayerNorm
from mini.nn.modules.dropout import Dropout
from mini.nn.modules.sparse import Embedding

__all__ = ["Identity", "Linear", "ReLU", "Sigmoid", "Tanh", "GELU", "Softmax", "LogSoftmax",
           "LeakyReLU", "ELU", "SiLU", "Softplus", "Hardtanh", "ReLU6", "LogSigmoid",
           "Flatten", "Sequential", "ModuleList", "ModuleDict", "MSELoss", "L1Loss", "NLLLoss",
           "CrossEntropyLoss", "SmoothL1Loss", "HuberLoss", "BCELoss", "BCEWithLogitsLoss",
           "Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "BatchNorm1d",
           "BatchNorm2d", "LayerNorm", "Dropout", "Embedding"]
