"""Utilities above the framework core: ``mini.utils.data`` (datasets and loaders),
``mini.utils.profiler`` (what a step costs), ``mini.utils.cpp_extension`` (student C++),
``mini.utils.train_state`` (the complete training state, saved atomically).  Activation
checkpointing (``utils.checkpoint``) arrives with chapter 06.  Submodules load on first use."""
import importlib as _importlib


def __getattr__(name):
    try:
        return _importlib.import_module(f"mini.utils.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"mini.utils.{name}":
            raise AttributeError(f"module 'mini.utils' has no attribute {name!r}") from None
        raise
