"""Parameter discovery: exercise ``05.parameters``.

A Module never keeps a list of its parameters by hand.  Assigning ``self.fc = Linear(...)``
or ``self.w = Parameter(...)`` goes through ``Module.__setattr__``, which files the value
in ``module._parameters`` (name -> Parameter, or None for a placeholder such as
``bias=False``) or ``module._modules`` (name -> child Module).  Finding every parameter is
then a walk over that tree, in registration order, with dotted names
(``blocks.0.conv1.weight``) and each shared parameter reported once.

``Module.named_parameters()`` and ``Module.parameters()`` call this slot, so every optimizer
built from ``model.parameters()`` gets what the student's walk finds.  Before chapter 05 is
released, the slot falls back to Module's generic member walk (the one that also finds
buffers), so earlier chapters' models and optimizers work.
"""
from __future__ import annotations

from mini.exercises import exercise

__all__ = ["named_parameters"]


def _generic_walk(module, prefix=""):
    # the stand-in while chapter 05 is unreleased: Module's walk over any kind of member
    return list(module._named_members(lambda m: m._parameters.items(), prefix))


@exercise("05.parameters", fallback=_generic_walk)
def named_parameters(module, prefix=""):
    """A list of ``(dotted_name, parameter)`` for ``module`` and all its descendants:
    the module's own ``_parameters`` first (skip None entries), then each child of
    ``_modules`` in order (skip None children), recursively, names joined with ``"."``
    after ``prefix``.  A parameter object met twice (shared between layers) is listed only
    the first time; so is a module met twice."""
    ### BEGIN SOLUTION
    out, seen_params, seen_modules = [], set(), set()

    def walk(mod, pre):
        if id(mod) in seen_modules:
            return
        seen_modules.add(id(mod))
        for name, p in mod._parameters.items():
            if p is None or id(p) in seen_params:
                continue
            seen_params.add(id(p))
            out.append((pre + ("." if pre else "") + name, p))
        for name, child in mod._modules.items():
            if child is not None:
                walk(child, pre + ("." if pre else "") + name)

    walk(module, prefix)
    return out
    ### END SOLUTION
