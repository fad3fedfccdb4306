"""Optimizers (layer 5 of mini), with PyTorch's names: ``mini.optim.SGD(model.parameters(),
lr=0.1, momentum=0.9)``."""
from mini.optim.optimizer import Optimizer
from mini.optim.sgd import SGD
from mini.optim.adam import Adam, AdamW
from mini.optim import lr_scheduler

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
