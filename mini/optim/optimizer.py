"""Optimizer: the base class of mini's optimizers, with PyTorch's interface.

An optimizer holds *parameter groups* (``optimizer.param_groups``: dicts with a ``params``
list and that group's options such as ``lr``) and per-parameter *state*
(``optimizer.state[p]``, e.g. SGD's momentum buffer).  ``state_dict()`` refers to parameters
by their position across the groups (0, 1, 2, ...), so it can be loaded into a new optimizer
built over a new copy of the model.
"""
from __future__ import annotations

import copy
from collections import defaultdict
from mini.autograd import grad_mode
from mini.autograd.tensor import Tensor

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    """Marks an option that has no default (it must be given, for every group)."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


class Optimizer:
    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got a Tensor")
        if isinstance(params, dict):
            raise TypeError("params argument given to the optimizer should be an iterable of "
                            "Tensors or dicts, but got a dict (wrap param groups in a list)")
        param_groups = list(params)
        if not param_groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters with its own options (missing options take the
        optimizer's defaults)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs; "
                            "use a list")
        else:
            param_group["params"] = list(params)
        for p in param_group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params "
                                f"is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            param_group.setdefault(name, default)
        ids = [id(p) for p in param_group["params"]]
        if len(set(ids)) != len(ids):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        existing = {id(p) for g in self.param_groups for p in g["params"]}
        if existing & set(ids):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all optimized parameters (to None, or to zeros in place)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    with grad_mode.no_grad():
                        p.grad.zero_()

    def step(self, closure=None):
        raise NotImplementedError(f"{type(self).__name__} does not implement step()")

    # --- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}``.

        Parameters are numbered in order across the groups.  The state tensors are the
        optimizer's own (not copies), as in PyTorch: save them, or load them into another
        optimizer (``load_state_dict`` copies).
        """
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                if id(p) not in index:
                    index[id(p)] = len(index)
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {index[id(p)]: s for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore state and options saved by ``state_dict()`` of an optimizer over
        parameters of the same shapes, in the same order."""
        groups = self.param_groups
        saved_groups = copy.deepcopy(state_dict["param_groups"])
        if len(groups) != len(saved_groups):
            raise ValueError(f"loaded state dict has a different number of parameter groups "
                             f"({len(saved_groups)}) than the optimizer ({len(groups)})")
        for i, (g, sg) in enumerate(zip(groups, saved_groups)):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(f"loaded state dict contains a parameter group that doesn't "
                                 f"match the size of optimizer's group: group {i} has "
                                 f"{len(sg['params'])} parameters in the state dict and "
                                 f"{len(g['params'])} in the optimizer")
        id_map = {}
        for g, sg in zip(groups, saved_groups):
            for saved_id, p in zip(sg["params"], g["params"]):
                id_map[saved_id] = p

        def cast(param, value, key=None):
            if isinstance(value, Tensor):
                with grad_mode.no_grad():
                    if key != "step" and value.dtype.is_floating_point \
                            and param.dtype.is_floating_point:
                        value = value.to(param.device, param.dtype)
                    elif value.device != param.device:
                        value = value.to(param.device)
                    return value.detach().clone()
            if isinstance(value, dict):
                return {k: cast(param, v, k) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(cast(param, v, key) for v in value)
            return copy.deepcopy(value)

        state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            key = int(k) if isinstance(k, str) and k.isdigit() else k
            if key in id_map:
                param = id_map[key]
                state[param] = cast(param, v)
            else:
                state[key] = copy.deepcopy(v)
        new_groups = []
        for g, sg in zip(groups, saved_groups):
            sg["params"] = g["params"]
            new_groups.append(sg)
        self.state = state
        self.param_groups = new_groups

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(group):
                if key != "params":
                    lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)
