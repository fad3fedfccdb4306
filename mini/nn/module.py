"""Module: the base class of every layer and model.

Assigning a :class:`Parameter`, a buffer or another Module as an attribute registers it
(``__setattr__``), which is what lets ``model.parameters()`` walk the whole tree, ``train()``
and ``eval()`` reach every layer, ``to()`` move every tensor and ``state_dict()`` name every
tensor with a dotted path such as ``blocks.0.conv1.weight``.
"""
from __future__ import annotations

import itertools
from collections import OrderedDict, namedtuple
from typing import Iterator

from mini.autograd import grad_mode
from mini.autograd.function import Function, RemovableHandle
from mini.autograd.tensor import Tensor
from mini.backends import get_backend
from mini.ndarray import as_dtype
from mini.nn import discovery as _discovery
from mini.nn.parameter import Buffer, Parameter

__all__ = ["Module"]


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys it expected and did not find, and the keys it
    found and did not expect."""

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class _Hook:
    """One registered hook (a distinct object, so a handle removes exactly its own)."""
    __slots__ = ("fn", "with_kwargs")

    def __init__(self, fn, with_kwargs=False):
        self.fn, self.with_kwargs = fn, with_kwargs


def _addindent(s: str, n: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _check_name(kind: str, name) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')
    if "." in name:
        raise KeyError(f'{kind} name can\'t contain ".", got: {name}')


class Module:
    """Base class of layers and models: subclass it, assign layers and parameters in
    ``__init__`` and write ``forward``.  Call the module (``model(x)``), not ``forward``,
    so that hooks run."""

    training: bool
    _version = 1

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments: "
                            f"{args} {kwargs}")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = {}
        d["_forward_pre_hooks"] = []
        d["_forward_hooks"] = []
        d["_backward_hooks"] = []

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function')

    # --- registration ------------------------------------------------------------------
    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or a ``None`` placeholder, like ``bias=False``) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name("parameter", name)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is None:
            self._parameters[name] = None
            return
        if not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (mini.nn.Parameter or None required)")
        if param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             f"parameters must be created explicitly. To express '{name}' as a "
                             f"function of another Tensor, compute the value in the forward() "
                             f"method.")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a tensor that is module state but not a parameter (e.g. running statistics).
        Persistent buffers are part of ``state_dict()``; buffers move with ``to()``."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name("buffer", name)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (mini.Tensor or None required)")
        if isinstance(tensor, Buffer):
            tensor = Tensor._wrap(tensor._data)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        """Add a child module under ``name`` (what ``self.name = module`` does)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        _check_name("module", name)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name: str, value) -> None:
        d = self.__dict__
        params = d.get("_parameters")

        def remove_from(*dicts):
            for dct in dicts:
                if name in dct:
                    del dct[name]

        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            remove_from(d, self._buffers, self._modules)
            self._non_persistent_buffers_set.discard(name)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                f"(mini.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            modules = d.get("_modules")
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            remove_from(d, self._parameters, self._buffers)
            self._non_persistent_buffers_set.discard(name)
            modules[name] = value
        elif d.get("_modules") is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (mini.nn.Module or None expected)")
            d["_modules"][name] = value
        elif isinstance(value, Buffer):
            if d.get("_buffers") is None:
                raise AttributeError("cannot assign buffer before Module.__init__() call")
            remove_from(d, self._parameters, self._modules)
            self.register_buffer(name, value, value.persistent)
        elif d.get("_buffers") is not None and name in d["_buffers"]:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                f"(mini.Tensor or None expected)")
            d["_buffers"][name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        # Only called when normal lookup fails: look in the registries.
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            reg = d.get(registry)
            if reg is not None and name in reg:
                return reg[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if name in self._parameters:
            del self._parameters[name]
        elif name in self._buffers:
            del self._buffers[name]
            self._non_persistent_buffers_set.discard(name)
        elif name in self._modules:
            del self._modules[name]
        else:
            object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    def __setstate__(self, state):
        self.__dict__.update(state)

    # --- walking the tree --------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        """``(dotted name, module)`` for this module (name ``prefix``) and every descendant,
        each module once."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            sub = prefix + ("." if prefix else "") + name
            yield from module.named_modules(memo, sub, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, get_members, prefix="", recurse=True, remove_duplicate=True):
        seen = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for mod_prefix, module in modules:
            for name, value in get_members(module):
                if value is None:
                    continue
                if remove_duplicate:
                    if id(value) in seen:
                        continue
                    seen.add(id(value))
                yield mod_prefix + ("." if mod_prefix else "") + name, value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, parameter)`` pairs; a parameter shared by two layers comes once.

        The walk over the module tree is the ``05.parameters`` exercise
        (:func:`mini.nn.discovery.named_parameters`), so an optimizer built from
        ``model.parameters()`` gets the parameters a student's walk finds."""
        if recurse and remove_duplicate:
            return iter(_discovery.named_parameters(self, prefix))
        return self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                   remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter of this module and (with ``recurse``) its descendants, frozen ones
        included, each once: what you hand to an optimizer."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                   remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target: str) -> "Module":
        """The descendant at a dotted path: ``model.get_submodule("blocks.0.conv1")``."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if item not in mod._modules or mod._modules[item] is None:
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{mod._get_name()} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target: str) -> Tensor:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"{mod._get_name()} has no buffer `{name}`")
        return mod._buffers[name]

    def apply(self, fn) -> "Module":
        """Call ``fn(m)`` on every descendant (children first) and then on this module."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # --- modes and gradients -----------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set the ``training`` flag of this module and every descendant.  This selects the
        behaviour of layers such as Dropout and BatchNorm; it does not touch grad mode."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self) -> "Module":
        """``train(False)``.  Autograd keeps recording: use ``mini.no_grad()`` for that."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        """Freeze (``False``) or unfreeze every parameter.  Frozen parameters stay in
        ``parameters()``; they just get no gradient."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of every parameter (to None, or to zeros in place)."""
        for p in self.parameters():
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

    # --- calling -------------------------------------------------------------------------
    def register_forward_pre_hook(self, hook, *, prepend: bool = False,
                                  with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args)`` runs before ``forward``; a non-None return value replaces
        the positional arguments (a single value is wrapped in a tuple).  With
        ``with_kwargs=True`` it is ``hook(module, args, kwargs)`` and may return
        ``(args, kwargs)``."""
        return self._add_hook(self._forward_pre_hooks, _Hook(hook, with_kwargs), prepend)

    def register_forward_hook(self, hook, *, prepend: bool = False,
                              with_kwargs: bool = False) -> RemovableHandle:
        """``hook(module, args, output)`` runs after ``forward``; a non-None return value
        replaces the output.  With ``with_kwargs=True``: ``hook(module, args, kwargs, output)``."""
        return self._add_hook(self._forward_hooks, _Hook(hook, with_kwargs), prepend)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` runs when the gradients with respect to
        the module's tensor inputs have been computed (``grad_input`` holds None for inputs
        that need no gradient); a non-None return value (a tuple) replaces ``grad_input``."""
        return self._add_hook(self._backward_hooks, _Hook(hook), prepend)

    @staticmethod
    def _add_hook(hooks: list, entry: _Hook, prepend: bool) -> RemovableHandle:
        if prepend:
            hooks.insert(0, entry)
        else:
            hooks.append(entry)
        return RemovableHandle(hooks, entry)

    def __call__(self, *args, **kwargs):
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks):
            return self.forward(*args, **kwargs)
        for h in list(self._forward_pre_hooks):
            if h.with_kwargs:
                res = h.fn(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError("forward pre-hook registered with with_kwargs=True "
                                           f"must return None or (args, kwargs), got {res!r}")
                    args, kwargs = res
            else:
                res = h.fn(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        bw = _BackwardHookState(self) if self._backward_hooks and grad_mode.is_grad_enabled() \
            else None
        if bw is not None:
            args = bw.wrap_inputs(args)
        result = self.forward(*args, **kwargs)
        for h in list(self._forward_hooks):
            res = h.fn(self, args, kwargs, result) if h.with_kwargs else h.fn(self, args, result)
            if res is not None:
                result = res
        if bw is not None:
            result = bw.wrap_outputs(result)
        return result

    # --- device and dtype ----------------------------------------------------------------
    def _apply(self, fn) -> "Module":
        for module in self.children():
            module._apply(fn)
        with grad_mode.no_grad():
            for key, p in self._parameters.items():
                if p is None:
                    continue
                new = fn(p)
                if new is not p:
                    p.data = new  # the Parameter object stays: optimizers keep finding it
                if p.grad is not None:
                    g = fn(p.grad)
                    if g is not p.grad:
                        p.grad.data = g
            for key, b in self._buffers.items():
                if b is not None:
                    self._buffers[key] = fn(b)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """``module.to(device)``, ``.to(dtype)``, ``.to(device, dtype)`` or ``.to(tensor)``:
        move and/or cast every parameter and buffer in place (only floating-point tensors
        change dtype).  Returns the module itself."""
        device = kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        kwargs.pop("non_blocking", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif isinstance(a, str) or hasattr(a, "kernels_name"):
                device = a
            elif a is not None:
                dtype = a
        if dtype is not None:
            dtype = as_dtype(dtype)
            if not dtype.is_floating_point:
                raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got "
                                f"desired dtype={dtype}")
        if device is not None:
            device = get_backend(device)

        def convert(t):
            d = dtype if (dtype is not None and t.dtype.is_floating_point) else None
            if d is not None and d == t.dtype:
                d = None
            dev = device if (device is not None and device != t.device) else None
            if d is None and dev is None:
                return t
            return t.to(dev, d) if dev is not None else t.to(dtype=d)

        return self._apply(convert)

    def float(self) -> "Module":
        return self.to(dtype="float32")

    def double(self) -> "Module":
        return self.to(dtype="float64")

    def cpu(self) -> "Module":
        return self.to("cpu")

    def cuda(self, device=None) -> "Module":
        return self.to("cuda" if device is None else f"cuda:{device}")

    # --- state_dict ------------------------------------------------------------------------
    def _save_to_state_dict(self, destination, prefix: str, keep_vars: bool) -> None:
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()

    def state_dict(self, *, destination=None, prefix: str = "", keep_vars: bool = False):
        """An OrderedDict from dotted names (``blocks.0.conv1.weight``) to the parameters and
        persistent buffers, detached (they share memory with the module's tensors)."""
        if destination is None:
            destination = OrderedDict()
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=prefix + name + ".",
                                  keep_vars=keep_vars)
        return destination

    def _load_from_state_dict(self, state_dict, prefix, missing_keys, unexpected_keys,
                              error_msgs, assign: bool = False) -> None:
        persistent = {k: v for k, v in self._buffers.items()
                      if k not in self._non_persistent_buffers_set}
        local = {k: v for k, v in itertools.chain(self._parameters.items(), persistent.items())
                 if v is not None}
        for name, param in local.items():
            key = prefix + name
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                error_msgs.append(f'While copying the parameter named "{key}", expected a '
                                  f'Tensor from checkpoint but received {type(value).__name__}')
                continue
            if tuple(value.shape) != tuple(param.shape):
                error_msgs.append(f"size mismatch for {key}: copying a param with shape "
                                  f"{value.shape} from checkpoint, the shape in current model "
                                  f"is {param.shape}.")
                continue
            try:
                with grad_mode.no_grad():
                    if assign:
                        if name in self._parameters:
                            new = value if isinstance(value, Parameter) else \
                                Parameter(value, requires_grad=param.requires_grad)
                            self._parameters[name] = new
                        else:
                            self._buffers[name] = value
                    else:
                        param.copy_(value)
            except Exception as e:  # noqa: BLE001 - reported with the key, like PyTorch
                error_msgs.append(f'While copying the parameter named "{key}", whose '
                                  f'dimensions in the model are {param.shape} and whose '
                                  f'dimensions in the checkpoint are {value.shape}, an '
                                  f'exception occurred: {e!r}.')
        for key in state_dict:
            if key.startswith(prefix):
                head = key[len(prefix):].split(".", 1)[0]
                if head not in self._modules and head not in local:
                    unexpected_keys.append(key)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy the tensors of ``state_dict`` into this module's existing parameters and
        buffers, in place and without recording a graph.

        With ``strict`` (the default) keys missing from ``state_dict`` or not expected by the
        module raise a RuntimeError listing both; a shape mismatch always raises, naming the
        key and both shapes.  Returns ``(missing_keys, unexpected_keys)``.
        """
        if not hasattr(state_dict, "keys") or not hasattr(state_dict, "__getitem__"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, unexpected, errors = [], [], []

        def load(module, prefix):
            module._load_from_state_dict(state_dict, prefix, missing, unexpected, errors, assign)
            for name, child in module._modules.items():
                if child is not None:
                    load(child, prefix + name + ".")

        load(self, "")
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                self._get_name(), "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    # --- printing ----------------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """The text inside this module's parentheses in ``repr`` (e.g.
        ``in_features=2, out_features=3, bias=True``); override it in a layer."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({key}): " + _addindent(repr(module), 2)
                       for key, module in self._modules.items()]
        lines = extra_lines + child_lines
        main = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                main += extra_lines[0]
            else:
                main += "\n  " + "\n  ".join(lines) + "\n"
        return main + ")"


# --- full backward hooks -------------------------------------------------------------------
class _GradTap(Function):
    """Identity whose backward hands the gradient flowing through it to a callback."""

    @staticmethod
    def forward(ctx, x, callback):
        ctx.callback = callback
        return Tensor._wrap(x._data)  # same data, new tensor: the tap gets its own node

    @staticmethod
    def backward(ctx, g):
        res = ctx.callback(g)
        return (g if res is None else res), None


class _BackwardHookState:
    """One forward call's bookkeeping for ``register_full_backward_hook``: taps on the tensor
    inputs collect ``grad_input``, taps on the tensor outputs collect ``grad_output``."""

    def __init__(self, module: Module):
        self.module = module
        self.n_inputs = 0
        self.input_slots = []        # positions in args of the tapped tensors
        self.grad_inputs = {}
        self.grad_outputs = None
        self.n_outputs = 0
        self.pending_outputs = 0
        self.expected_inputs = 0

    def wrap_inputs(self, args):
        args = list(args)
        self.n_inputs = len(args)
        for i, a in enumerate(args):
            if isinstance(a, Tensor) and a.requires_grad:
                args[i] = _GradTap.apply(a, self._input_callback(i))
                self.input_slots.append(i)
        self.expected_inputs = len(self.input_slots)
        return tuple(args)

    def wrap_outputs(self, result):
        single = isinstance(result, Tensor)
        outs = [result] if single else list(result) if isinstance(result, (tuple, list)) else None
        if outs is None:
            return result
        positions = [i for i, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]
        self.n_outputs = len(outs)
        self.grad_outputs = [None] * len(outs)
        self.pending_outputs = len(positions)
        for i in positions:
            outs[i] = _GradTap.apply(outs[i], self._output_callback(i))
        if single:
            return outs[0]
        return type(result)(outs)

    def _input_callback(self, i):
        def cb(g):
            self.grad_inputs[i] = g
            if len(self.grad_inputs) == self.expected_inputs:
                return self._fire(i)
            return None
        return cb

    def _output_callback(self, i):
        def cb(g):
            self.grad_outputs[i] = g
            self.pending_outputs -= 1
            if self.pending_outputs == 0 and self.expected_inputs == 0:
                self._fire(None)  # no input needs a gradient: grad_input is all None
            return None
        return cb

    def _fire(self, current):
        grad_input = tuple(self.grad_inputs.get(i) for i in range(self.n_inputs))
        grad_output = tuple(self.grad_outputs or ())
        ret = None
        for h in list(self.module._backward_hooks):
            res = h.fn(self.module, grad_input, grad_output)
            if res is not None:
                if not isinstance(res, tuple) or len(res) != len(grad_input):
                    raise RuntimeError(f"backward hook returned {res!r}; expected a tuple of "
                                       f"{len(grad_input)} gradients")
                grad_input = res
                ret = res
        if ret is not None and current is not None:
            return grad_input[current]
        return None
