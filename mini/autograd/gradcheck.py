"""``gradcheck``: compare autograd's gradients with central finite differences in float64.

For inputs x (float64, requires_grad) and a function f, each column of the numerical
Jacobian is (f(x + eps·e_j) - f(x - eps·e_j)) / (2·eps), whose error shrinks like eps²
(a one-sided difference only like eps).  Each row of the analytical Jacobian is one
backward pass with a one-hot output gradient.  They must agree within atol + rtol·|numerical|.
"""
from __future__ import annotations

import numpy as np

from mini.ndarray.dtypes import float64
from mini.exercises import exercise


class GradcheckError(RuntimeError):
    pass


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,) if not isinstance(x, list) else tuple(x)


@exercise("02.central_difference")
def central_difference(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Numerical Jacobian of ``f`` at ``x`` by central differences, in float64.

    ``f`` maps a 1-D float64 array (shape (n,)) to a 1-D array (shape (m,)).  Return an
    (n, m) float64 array whose row j is (f(x + eps·e_j) - f(x - eps·e_j)) / (2·eps).
    ``x`` may be float32: the differences are still taken in float64.  ``eps`` is optional.
    Don't modify ``x``.  Central, not one-sided: the error then shrinks like eps², not eps.
    """
    ### BEGIN SOLUTION
    x = np.array(x, dtype=np.float64)
    rows = []
    for j in range(x.size):
        step = np.zeros_like(x)
        step[j] = eps
        plus = np.asarray(f(x + step), dtype=np.float64)
        minus = np.asarray(f(x - step), dtype=np.float64)
        rows.append((plus - minus) / (2 * eps))
    width = rows[0].size if rows else np.asarray(f(x)).size
    return np.array(rows, dtype=np.float64).reshape(x.size, width)
    ### END SOLUTION


def numerical_jacobian(fn, inputs, eps: float = 1e-6):
    """For each differentiable input, an array of shape (input.numel(), output.numel())."""
    from mini.autograd.tensor import Tensor
    jacobians = []
    # fn runs with grad mode as the caller has it: fn may itself differentiate (gradgradcheck).
    # The perturbations go through a numpy view, so they are never recorded.
    for t in inputs:
        if not (isinstance(t, Tensor) and t.requires_grad):
            continue
        view = t._data.to_numpy_view()  # writes go into t's own buffer
        original = view.copy()

        def f(x_flat, view=view):
            view[...] = x_flat.reshape(view.shape)
            return _flat_output(fn(*inputs))

        try:
            jacobians.append(central_difference(f, original.reshape(-1).astype(np.float64), eps))
        finally:
            view[...] = original
    return jacobians


def _flat_output(out) -> np.ndarray:
    outs = _as_tuple(out)
    return np.concatenate([np.asarray(o.detach()._data.numpy(), dtype=np.float64).reshape(-1)
                           for o in outs]) if outs else np.zeros(0)


def analytical_jacobian(fn, inputs):
    from mini.autograd.engine import grad
    from mini.autograd.tensor import Tensor
    diff_inputs = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    outs = [o for o in _as_tuple(fn(*inputs))]
    sizes = [o.numel() for o in outs]
    total = sum(sizes)
    jacs = [np.zeros((t.numel(), total)) for t in diff_inputs]
    col = 0
    for k, o in enumerate(outs):
        for j in range(sizes[k]):
            seed = np.zeros(sizes[k])
            seed[j] = 1.0
            g_out = Tensor(seed.reshape(o.shape), dtype=o.dtype, device=o.device)
            if not o.requires_grad:
                col += 1
                continue
            grads = grad([o], diff_inputs, [g_out], retain_graph=True, allow_unused=True)
            for i, g in enumerate(grads):
                if g is not None:
                    jacs[i][:, col] = g._data.numpy().reshape(-1)
            col += 1
    return jacs


def gradcheck(fn, inputs, eps: float = 1e-6, atol: float = 1e-5, rtol: float = 1e-3,
              raise_exception: bool = True) -> bool:
    """True if autograd's Jacobian of ``fn`` at ``inputs`` matches central differences.

    Every floating-point input that requires grad must be float64: in float32 the rounding
    error of f(x ± eps) (about 1e-7·|f|/eps) swamps the derivative.
    """
    from mini.autograd.tensor import Tensor
    inputs = _as_tuple(inputs)
    diff = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError("gradcheck: no input requires grad, so there is nothing to check")
    for i, t in enumerate(diff):
        if t.dtype != float64:
            raise ValueError(f"gradcheck: input {i} is {t.dtype.name}; use float64 inputs "
                             f"(t.double()), float32 rounding swamps central differences")
    numerical = numerical_jacobian(fn, inputs, eps)
    analytical = analytical_jacobian(fn, inputs)
    for i, (n, a) in enumerate(zip(numerical, analytical)):
        if not np.allclose(a, n, atol=atol, rtol=rtol):
            bad = np.unravel_index(np.argmax(np.abs(a - n) - rtol * np.abs(n)), a.shape)
            msg = (f"Jacobian mismatch for input {i} (shape {tuple(diff[i].shape)}): at "
                   f"(input element {bad[0]}, output element {bad[1]}) numerical "
                   f"{n[bad]:.6g} vs analytical {a[bad]:.6g}\nnumerical:\n{n}\nanalytical:\n{a}")
            if raise_exception:
                raise GradcheckError(msg)
            return False
    return True
