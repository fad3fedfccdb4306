"""The backward pass: reverse topological order, then one vector-Jacobian product per node.

``backward(tensors)`` seeds each output with its gradient (1 for a scalar), walks the
graph from the outputs towards the leaves so that a node runs only after every node
that feeds it a gradient has run, sums the gradients that reach a node along several
paths, and adds the result into the ``.grad`` of each leaf.  Saved tensors are freed
after use unless ``retain_graph=True``.
"""
from __future__ import annotations

from mini.autograd import grad_mode
from mini.autograd.function import AccumulateGrad, Node
from mini.exercises import exercise
from mini.utils import profiler as _profiler


def _graphlib_order(roots):
    # Stand-in while chapter 02 is unreleased: the standard library sorts the graph.
    import graphlib
    deps, stack, seen = {}, [r for r in roots if r is not None], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        children = [c for c, _ in n.next_functions if c is not None]
        deps[n] = children
        stack.extend(children)
    return list(reversed(list(graphlib.TopologicalSorter(deps).static_order())))


@exercise("02.toposort", fallback=_graphlib_order)
def topological_order(roots: list[Node]) -> list[Node]:
    """Every node reachable from ``roots`` (following ``node.next_functions``), each listed
    before all the nodes it sends gradients to: the reverse topological order of the
    forward graph, so a node runs only when every gradient flowing into it is complete.

    Iterative, not recursive: a chain of 10,000 operations must not hit Python's
    recursion limit.  ``None`` entries in ``next_functions`` are skipped.
    """
    ### BEGIN SOLUTION
    order: list[Node] = []
    visited: set[int] = set()
    for root in roots:
        if root is None or id(root) in visited:
            continue
        visited.add(id(root))
        stack = [(root, iter(root.next_functions))]
        while stack:
            node, children = stack[-1]
            for child, _ in children:
                if child is not None and id(child) not in visited:
                    visited.add(id(child))
                    stack.append((child, iter(child.next_functions)))
                    break
            else:
                stack.pop()
                order.append(node)  # post-order: after everything it depends on
    order.reverse()
    return order
    ### END SOLUTION


@exercise("02.seed_gradient")
def seed_gradient(output, gradient):
    """The gradient that starts the backward pass at ``output``.

    ``gradient`` is what the caller passed to ``output.backward(gradient)``.  When it is
    None, the output must be a scalar (one element) and the seed is 1 (``d out / d out``),
    with the output's shape, dtype and device (``mini.ones_like``).  A non-scalar output
    without a gradient, or a gradient of the wrong shape, raises ``RuntimeError``.
    """
    ### BEGIN SOLUTION
    from mini.ops.creation import ones_like
    if gradient is None:
        if output.numel() != 1:
            raise RuntimeError(f"grad can be implicitly created only for scalar outputs; got "
                               f"a tensor of shape {tuple(output.shape)}: pass a gradient of "
                               f"that shape, e.g. y.backward(mini.ones_like(y))")
        return ones_like(output)
    if tuple(gradient.shape) != tuple(output.shape):
        raise RuntimeError(f"Mismatch in shape: gradient has a shape of {tuple(gradient.shape)} "
                           f"and output has a shape of {tuple(output.shape)}")
    return gradient
    ### END SOLUTION


@exercise("02.backward")
def propagate(order, grads: dict, run_node, retain_graph: bool) -> None:
    """Run the backward pass over ``order`` (nodes in reverse topological order).

    ``grads`` maps ``id(node)`` to the gradient flowing into that node; the seeds are already
    in it.  For each node in order: take its gradient out of ``grads`` (skip the node if no
    gradient reached it); ``run_node(node, grad)`` returns one gradient (or None) per edge
    in ``node.next_functions``; free the node's saved tensors with ``node.release()`` unless
    ``retain_graph``; then *add* each gradient into ``grads`` under its child's id — a
    tensor used by several operations receives one gradient from each, and they sum.
    """
    ### BEGIN SOLUTION
    for node in order:
        grad = grads.pop(id(node), None)
        if grad is None:
            continue
        grad_inputs = run_node(node, grad)
        if not retain_graph:
            node.release()
        for (child, _), g in zip(node.next_functions, grad_inputs):
            if child is None or g is None:
                continue
            key = id(child)
            grads[key] = g if key not in grads else grads[key] + g
    ### END SOLUTION


@exercise("02.accumulate_grad")
def accumulate_grad(leaf, grad) -> None:
    """Add ``grad`` into ``leaf.grad`` (None means no gradient yet).  Gradients accumulate
    across backward calls until someone zeroes them (``optimizer.zero_grad()``)."""
    ### BEGIN SOLUTION
    if leaf.grad is None:
        leaf.grad = grad
    else:
        leaf.grad = leaf.grad + grad
    ### END SOLUTION


def _seed_gradients(tensors, grad_tensors):
    from mini.autograd.tensor import Tensor
    seeds = []
    for i, t in enumerate(tensors):
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               f"have a grad_fn")
        g = None if grad_tensors is None else grad_tensors[i]
        if g is not None and not isinstance(g, Tensor):
            g = Tensor(g, dtype=t.dtype, device=t.device)
        g = seed_gradient(t, g)
        node = t.grad_fn if t.grad_fn is not None else t._accumulate_node()
        seeds.append((node, g))
    return seeds


def run_backward(seeds, retain_graph: bool, create_graph: bool, capture=None,
                 accumulate: bool = True) -> dict:
    """Propagate ``seeds`` [(node, grad)] through the graph.

    ``capture`` maps id(node) -> key: the gradient flowing into those nodes is returned
    in a dict under that key.  With ``accumulate=False`` leaves' ``.grad`` is untouched.
    """
    grads: dict[int, object] = {}
    for node, g in seeds:
        grads[id(node)] = g if id(node) not in grads else grads[id(node)] + g
    captured: dict = {}

    def run_node(node, g):
        for hook in node._pre_hooks:
            out = hook(g)
            if out is not None:
                g = out
        retained = getattr(node, "_retained", None)
        if retained is not None and retained() is not None:
            t = retained()
            g_kept = g.clone() if create_graph else g.detach().clone()
            t.grad = g_kept if t.grad is None else t.grad + g_kept
        if capture is not None and id(node) in capture:
            key = capture[id(node)]
            captured[key] = g if key not in captured else captured[key] + g
        if isinstance(node, AccumulateGrad):
            if accumulate:
                node.accumulate(g, create_graph)
            for hook in node._hooks:
                hook(node.variable)
            return ()
        if needed is not None and id(node) not in needed:
            # autograd.grad: no input is reached through this node, so its gradients are
            # never used; skip its backward rule.
            return (None,) * len(node.next_functions)
        if _profiler._ACTIVE:
            with _profiler.record(node.name(), "backward"):
                grad_inputs = node.apply_backward(g)
        else:
            grad_inputs = node.apply_backward(g)
        for hook in node._hooks:
            hook(grad_inputs, (g,))
        _check_gradients(node, grad_inputs)
        return grad_inputs

    order = topological_order([node for node, _ in seeds])
    needed = _nodes_leading_to(order, capture) if capture is not None and not accumulate \
        else None
    with grad_mode.set_grad_enabled(create_graph):
        propagate(order, grads, run_node, retain_graph)
    return captured


def _nodes_leading_to(order, capture) -> set:
    """The ids of the nodes of ``order`` from which some captured node can be reached.

    ``order`` lists every node before the nodes it sends gradients to, so walking it
    backwards meets each node after all of its children: one pass over the edges decides
    every node (linear in the size of the graph; a search from each node would be
    quadratic along a chain)."""
    needed: set[int] = set()
    for node in reversed(order):
        if id(node) in capture:
            needed.add(id(node))
            continue
        for child, _ in node.next_functions:
            if child is not None and id(child) in needed:
                needed.add(id(node))
                break
    return needed


#: The chapter-02 exercises whose code computes the gradients of an operation's node (the
#: VJP, then sum_to for an input that was broadcast), to name them when a gradient is wrong.
_RULE_SLOTS = {"Add": ("02.add_vjp", "02.unbroadcast"), "Mul": ("02.mul_vjp", "02.unbroadcast"),
               "Div": ("02.div_vjp", "02.unbroadcast"), "Pow": ("02.pow_vjp", "02.unbroadcast"),
               "Exp": ("02.exp_vjp",), "Log": ("02.log_vjp",), "Relu": ("02.relu_vjp",),
               "Sum": ("02.sum_vjp",), "Mean": ("02.mean_vjp", "02.sum_vjp"),
               "Reshape": ("02.reshape_vjp",), "Permute": ("02.permute_vjp",),
               "MatMul": ("02.matmul_vjp", "02.unbroadcast")}


def _your_rules(node) -> str:
    """" (computed by your 02.mul_vjp and 02.unbroadcast: ...)" for a node whose gradient
    comes from exercises that run a student's code, else ""."""
    from mini.exercises import runs_reference
    function = getattr(node, "_function", None)
    slots = _RULE_SLOTS.get(getattr(function, "__name__", ""), ())
    yours = [s for s in slots if not runs_reference(s)]
    if not yours:
        return ""
    if len(yours) == 1:
        return (f". This gradient is computed by your {yours[0]}: fix that exercise first (its "
                f"test cell shows what is wrong)")
    return (f". This gradient is computed by your {' and '.join(yours)}: run their test cells "
            f"and fix the one that fails first")


def _check_gradients(node, grad_inputs) -> None:
    if len(grad_inputs) != len(node.next_functions):
        raise RuntimeError(f"{node.name()} returned {len(grad_inputs)} gradients for "
                           f"{len(node.next_functions)} inputs{_your_rules(node)}")
    for i, (gi, (shape, dtype)) in enumerate(zip(grad_inputs, node._input_meta)):
        if gi is not None and tuple(gi.shape) != tuple(shape):
            raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index "
                               f"{i} - got {list(gi.shape)} but expected shape compatible "
                               f"with {list(shape)}{_your_rules(node)}")


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False,
             inputs=None) -> None:
    """``mini.autograd.backward``: accumulate gradients of ``tensors`` into leaves' ``.grad``."""
    from mini.autograd.tensor import Tensor
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    if isinstance(grad_tensors, Tensor):
        grad_tensors = [grad_tensors]
    if retain_graph is None:
        retain_graph = create_graph
    seeds = _seed_gradients(list(tensors), grad_tensors)
    if inputs is not None:
        if isinstance(inputs, Tensor):
            inputs = [inputs]
        grads = grad(tensors, inputs, grad_tensors, retain_graph=retain_graph,
                     create_graph=create_graph, allow_unused=True)
        for t, g in zip(inputs, grads):
            if g is not None:
                t.grad = (g if create_graph else g.detach()) if t.grad is None else t.grad + g
        return
    run_backward(seeds, retain_graph, create_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         allow_unused: bool = False):
    """``mini.autograd.grad``: the gradients of ``outputs`` with respect to ``inputs``,
    returned as a tuple, without touching any ``.grad``.  With ``create_graph=True`` the
    returned gradients have a graph of their own, so they can be differentiated again."""
    from mini.autograd.tensor import Tensor
    single = isinstance(inputs, Tensor)
    if single:
        inputs = [inputs]
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    if isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs]
    if retain_graph is None:
        retain_graph = create_graph
    capture = {}
    for i, t in enumerate(inputs):
        if not t.requires_grad:
            raise RuntimeError(f"input {i} of autograd.grad does not require grad")
        node = t.grad_fn if t.grad_fn is not None else t._accumulate_node()
        capture[id(node)] = i
    seeds = _seed_gradients(list(outputs), grad_outputs)
    captured = run_backward(seeds, retain_graph, create_graph, capture=capture, accumulate=False)
    result = []
    for i, t in enumerate(inputs):
        g = captured.get(i)
        if g is None and not allow_unused:
            raise RuntimeError(f"One of the differentiated Tensors (input {i}) appears to not "
                               f"have been used in the graph. Set allow_unused=True if this is "
                               f"the desired behavior.")
        if g is not None and not create_graph:
            g = g.detach()
        result.append(g)
    return tuple(result)
