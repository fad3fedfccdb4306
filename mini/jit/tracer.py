"""Recording a trace: run a function once, eagerly, and write down every op it ran.

The recording rides on mini's op observer (``mini.autograd.function.set_op_observer``):
while a function is traced, every op it calls reaches :func:`record_op` (exercise
``01.record_op``) with its name, what to call, its arguments and a ``run()`` that computes
it.  ``record_op`` runs the op and appends a node to the graph.  Values the program reads
into Python (``x.item()``, ``bool(t)``, ``t.numpy()``) are ops too, recorded as *guards*.

Two calls of a traced function may share a graph only when nothing the trace depended on
has changed.  :func:`guard_key` (exercise ``01.guard_key``) is the part of that decision
that looks at the call's arguments; :func:`python_constants` adds the Python numbers the
function reads from its closure, its globals and its module's attributes.
"""
from __future__ import annotations

import types
import warnings
import weakref

import numpy as np

from mini.autograd import function as _function
from mini.autograd.tensor import Tensor
from mini.exercises import exercise
from mini.jit.graph import Graph, Ref, map_refs

__all__ = ["record_op", "guard_key", "capture", "python_constants", "TraceError",
           "TracerWarning", "flatten_tensors"]


class TraceError(RuntimeError):
    """A function cannot be traced as it is (the message says why and what to do)."""


class TracerWarning(UserWarning):
    """A trace went ahead, but something in it is fixed at its value during the trace."""


@exercise("01.record_op")
def record_op(graph, name, op, args, kwargs, run):
    """Record one operation of a traced function into ``graph`` and return its result.

    mini's op observer calls this for every op the traced function runs: ``name`` is the
    op's name ("Add", "Relu", "item"), ``op`` what the program called, ``args`` and
    ``kwargs`` its arguments exactly as passed (tensors may sit inside lists and tuples, as
    in ``cat([a, b])``), and ``run()`` computes the op and returns its result.

    - Call ``run()`` exactly once and return what it returned.
    - Record the op with ``graph.add_node(name, op, args, kwargs, result)``, where every
      tensor in ``args`` and ``kwargs`` (at any depth of lists, tuples and dicts, which keep
      their type) is replaced by its Ref: ``graph.ref_of(t)`` for a tensor the graph knows
      (an input, the result of an earlier node), ``graph.capture(t)`` for one it does not (a
      weight, a tensor from a closure: captured by reference).  Anything else (numbers,
      shapes, axes, dtypes, None) stays as it is.
    - Record every op, also one whose result is a Python value rather than a tensor
      (``item``: a branch such as ``if x.sum() > 0`` reads one): that node is a guard.
    """
    ### BEGIN SOLUTION
    def as_ref(v):
        if isinstance(v, Tensor):
            ref = graph.ref_of(v)
            return ref if ref is not None else graph.capture(v)
        if type(v) in (list, tuple):
            return type(v)(as_ref(x) for x in v)
        if type(v) is dict:
            return {k: as_ref(x) for k, x in v.items()}
        return v

    rargs, rkwargs = as_ref(tuple(args)), as_ref(dict(kwargs))
    result = run()
    graph.add_node(name, op, rargs, rkwargs, result)
    return result
    ### END SOLUTION


@exercise("01.guard_key")
def guard_key(args, kwargs):
    """The cache key of one call of a traced function: two calls may replay the same graph
    only when their keys are equal.  ``args`` is the tuple and ``kwargs`` the dict of the
    call's arguments.

    Return a hashable value that changes when any of these changes:

    - a tensor's shape, dtype, strides, device, or ``requires_grad`` (its values do not
      matter: the graph works for any values);
    - a Python number, bool, string or None: its value *and* its type (``f(x, 2)``,
      ``f(x, 2.0)`` and ``f(x, True)`` are three keys);
    - the structure of the call: the number of positional arguments, the names of the
      keyword arguments, and lists, tuples and dicts (searched at any depth; a list and a
      tuple with the same items are different keys).

    Raise ``TypeError`` naming the argument (``args[1]``, ``kwargs['scale']``) for anything
    else, such as a numpy array or an arbitrary object: the trace cannot guard it.
    """
    ### BEGIN SOLUTION
    def key(v, where):
        if isinstance(v, Tensor):
            return ("tensor", tuple(v.shape), v.dtype.name, tuple(v.stride()), str(v.device),
                    bool(v.requires_grad))
        if v is None or type(v) in (bool, int, float, str):
            return (type(v).__name__, v)
        if type(v) in (list, tuple):
            return (type(v).__name__, tuple(key(x, f"{where}[{i}]") for i, x in enumerate(v)))
        if type(v) is dict:
            return ("dict", tuple((k, key(x, f"{where}[{k!r}]")) for k, x in sorted(v.items())))
        raise TypeError(f"{where} is a {type(v).__name__}: a traced function can only guard "
                        f"tensors, numbers, strings, None, and lists, tuples and dicts of them")

    return (tuple(key(a, f"args[{i}]") for i, a in enumerate(args)),
            tuple((k, key(v, f"kwargs[{k!r}]")) for k, v in sorted(kwargs.items())))
    ### END SOLUTION


# --------------------------------------------------------------------------- the recording

class _Recorder:
    """The op observer installed while a function is traced."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.results: list = []          # weak references to every tensor a node made

    def __call__(self, name, op, args, kwargs, run):
        result = record_op(self.graph, name, op, args, kwargs, run)
        if isinstance(result, Tensor):
            self.results.append(weakref.ref(result))
        return result


def flatten_tensors(obj, out: list | None = None) -> list:
    """Every tensor in ``obj`` (tuples, lists and dicts searched), depth first."""
    out = [] if out is None else out
    if isinstance(obj, Tensor):
        out.append(obj)
    elif type(obj) in (list, tuple):
        for x in obj:
            flatten_tensors(x, out)
    elif type(obj) is dict:
        for x in obj.values():
            flatten_tensors(x, out)
    return out


def capture(fn, args, kwargs=None) -> tuple[Graph, object, list]:
    """Run ``fn(*args, **kwargs)`` once with the recorder installed.

    Returns ``(graph, result, escaped)``: the recorded graph (its outputs set), what ``fn``
    returned, and the names of ops whose result tensors are still alive but were not
    returned (they left the function some other way: a list, an attribute, a global).
    """
    kwargs = {} if kwargs is None else kwargs
    graph = Graph()
    for t in flatten_tensors((args, kwargs)):
        if graph.ref_of(t) is None:
            graph.add_input(t)
    recorder = _Recorder(graph)
    previous = _function.set_op_observer(recorder)
    try:
        result = fn(*args, **kwargs)
    finally:
        _function.set_op_observer(previous)
    outputs = [(graph.ref_of(t) or graph.capture(t)) for t in flatten_tensors(result)]
    returned = {id(t) for t in flatten_tensors(result)}
    for t in flatten_tensors(result):      # views keep their base alive: not an escape
        base = t._base
        while base is not None:
            returned.add(id(base))
            base = base._base
    graph.finish(outputs)
    return graph, result, _escaped(recorder, returned, args, kwargs, graph)


def _escaped(recorder: _Recorder, returned: set, args, kwargs, graph: Graph) -> list:
    """Tensors made during the trace that are still alive and were not returned."""
    def alive():
        out = []
        for i, ref in enumerate(recorder.results):
            t = ref()
            if t is not None and id(t) not in returned and not _input_alias(t, args, kwargs, graph):
                out.append(_producer(t, i))
        return out
    found = alive()
    if found:              # maybe only reference cycles not collected yet: look again after gc
        import gc
        gc.collect()
        found = alive()
    return found


def _input_alias(t, args, kwargs, graph: Graph) -> bool:
    """An in-place op's result is the tensor it wrote to (an input, a captured tensor):
    alive because its owner holds it."""
    return any(t is x for x in flatten_tensors((args, kwargs))) or \
        any(t is c for c in graph.captured)


def _producer(t, k: int) -> str:
    return f"a {t.dtype.name}{list(t.shape)} tensor (result #{k} of the trace)"


# --------------------------------------------------------------------------- Python constants

_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)


def python_constants(fn, max_depth: int = 3) -> tuple:
    """The Python values ``fn`` reads from outside its arguments that a trace would bake in:
    numbers, strings and flags, and small lists, tuples and dicts of them, and the scalar
    attributes of plain objects (a config object), found in the globals and closure cells
    ``fn``'s code names (and those of the functions it calls, ``max_depth`` deep); for a
    module or a bound method of one, every scalar attribute and the ``training`` flag of each
    submodule.  A trace bakes such values in, so they are part of the guards: a change makes
    the next call trace again.  (What the function reaches some other way, through a
    function of a library or a deeper object, is not seen.)"""
    found: dict = {}
    _collect(fn, found, max_depth, set(), "")
    return tuple(sorted(found.items()))


_FREEZE_LIMIT = 64      # items of a container read in full; a larger one is not guarded


def _frozen(v, depth: int = 2):
    """A hashable snapshot of ``v`` if it is a value a trace bakes in (else None): a scalar,
    or a small list, tuple, dict or set of such values (``depth`` levels of containers)."""
    if isinstance(v, _SCALARS):
        return (type(v).__name__, v)
    if depth <= 0 or type(v) not in (list, tuple, dict, set, frozenset) or len(v) > _FREEZE_LIMIT:
        return None
    if type(v) is dict:
        items = []
        for k, x in v.items():
            fx = _frozen(x, depth - 1)
            if fx is None or not isinstance(k, _SCALARS):
                return None
            items.append((repr(k), fx))
        return ("dict", tuple(sorted(items)))
    parts = tuple(_frozen(x, depth - 1) for x in (sorted(v, key=repr) if type(v) in (set, frozenset) else v))
    return None if any(p is None for p in parts) else (type(v).__name__, parts)


def _is_constant(v) -> bool:
    return _frozen(v) is not None


def _plain_object(v) -> bool:
    """An instance of a user class (a config, a namespace): its attributes may be read."""
    return (hasattr(v, "__dict__") and not isinstance(v, (type, types.ModuleType,
                                                          types.FunctionType, types.MethodType))
            and not _is_module(v) and not isinstance(v, Tensor) and _user_code(type(v)))


def _note(found: dict, label: str, v) -> bool:
    """Record ``v`` under ``label`` if it is a constant (or a plain object's scalar
    attributes); True when something was recorded."""
    fv = _frozen(v)
    if fv is not None:
        found[label] = fv
        return True
    if _plain_object(v):
        for k, x in vars(v).items():
            fx = _frozen(x)
            if fx is not None and not k.startswith("__"):
                found[f"{label}.{k}"] = fx
        return True
    return False


def _collect(obj, found: dict, depth: int, seen: set, prefix: str) -> None:
    if depth < 0 or id(obj) in seen:
        return
    seen.add(id(obj))
    from mini.nn.module import Module
    if isinstance(obj, Module):
        for name, mod in obj.named_modules(prefix=prefix.rstrip(".")):
            label = name + "." if name else ""
            found[f"{label}training"] = ("bool", mod.training)
            for k, v in vars(mod).items():
                if not k.startswith("_"):
                    fv = _frozen(v)
                    if fv is not None:
                        found[f"{label}{k}"] = fv
        _collect(type(obj).forward, found, depth - 1, seen, prefix)
        return
    if isinstance(obj, types.MethodType):
        if _is_module(obj.__self__):
            _collect(obj.__self__, found, depth, seen, prefix)
        else:
            _object_attributes(obj.__self__, found)
        _collect(obj.__func__, found, depth, seen, prefix)
        return
    if not isinstance(obj, types.FunctionType):
        return
    code = obj.__code__
    globs = obj.__globals__
    for name in set(_code_names(code)):
        if name in globs:
            v = globs[name]
            if isinstance(v, types.FunctionType):
                if _user_code(v):
                    _collect(v, found, depth - 1, seen, prefix)
            elif not _note(found, f"{obj.__module__}.{name}", v) and _is_module(v):
                _collect(v, found, depth - 1, seen, f"{name}.")
    for name, cell in zip(code.co_freevars, obj.__closure__ or ()):
        try:
            v = cell.cell_contents
        except ValueError:           # an empty cell (a name assigned later)
            continue
        if isinstance(v, types.FunctionType):
            if _user_code(v):
                _collect(v, found, depth - 1, seen, prefix)
        elif not _note(found, f"{obj.__qualname__}.<closure>.{name}", v) and _is_module(v):
            _collect(v, found, depth - 1, seen, f"{name}.")


def _object_attributes(obj, found: dict) -> None:
    for k, v in getattr(obj, "__dict__", {}).items():
        fv = _frozen(v)
        if not k.startswith("_") and fv is not None:
            found[f"self.{k}"] = fv


def _is_module(obj) -> bool:
    from mini.nn.module import Module
    return isinstance(obj, Module)


def _code_names(code):
    yield from code.co_names
    for c in code.co_consts:           # lambdas and comprehensions inside the function
        if isinstance(c, types.CodeType):
            yield from _code_names(c)


def _user_code(fn) -> bool:
    """Functions (and classes) of the program, not of mini, numpy or the standard library."""
    mod = getattr(fn, "__module__", "") or ""
    if mod.startswith(("mini.", "numpy")) or mod in ("mini", "builtins"):
        return False
    return mod.split(".")[0] not in _STDLIB


_STDLIB = frozenset(getattr(__import__("sys"), "stdlib_module_names", ()))


def warn_once(registry: set, key, message: str) -> None:
    if key not in registry:
        registry.add(key)
        warnings.warn(message, TracerWarning, stacklevel=4)


def map_outputs(structure, fn):
    """``structure`` (what a traced function returned) with each tensor replaced by
    ``fn(tensor)``."""
    if isinstance(structure, Tensor):
        return fn(structure)
    if type(structure) in (list, tuple):
        return type(structure)(map_outputs(x, fn) for x in structure)
    if type(structure) is dict:
        return {k: map_outputs(v, fn) for k, v in structure.items()}
    return structure


__all__ += ["warn_once", "map_outputs", "Ref", "map_refs"]
