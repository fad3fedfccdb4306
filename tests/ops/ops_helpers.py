"""The catalogue of operation cases shared by the gradcheck tests and the PyTorch
differential tests.

Each case is written once as ``fn(lib, *xs)`` where ``lib`` is ``mini`` or ``torch``:
mini speaks PyTorch's API, so the very same expression runs on both.  Inputs are drawn
from a named domain that keeps every op away from its kinks and singularities
(log/sqrt positive, relu/abs away from 0, maximum away from ties).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# --- input domains ------------------------------------------------------------------------


def _normal(rng, shape):
    return rng.standard_normal(shape)


def _positive(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


def _away_from_zero(rng, shape):
    return rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 2.0, shape)


def _grid(rng, shape):
    # multiples of 0.25: together with _offgrid, two inputs are never within 0.125
    return rng.integers(-8, 9, shape) * 0.25


def _offgrid(rng, shape):
    return (rng.integers(-8, 8, shape) + 0.5) * 0.25


def _distinct(rng, shape):
    # a random permutation of well separated values: no ties for max/argmax
    n = int(np.prod(shape)) if shape else 1
    return (rng.permutation(n) * 0.37 - n * 0.15).reshape(shape)


DOMAINS = {"any": _normal, "pos": _positive, "away": _away_from_zero, "grid": _grid,
           "offgrid": _offgrid, "distinct": _distinct}


@dataclass
class Case:
    id: str
    fn: Callable          # fn(lib, *tensors) -> tensor, or a tuple (values, indices) etc.
    inputs: list          # [(shape, domain)]
    differentiable: bool = True
    torch: bool = True    # False where PyTorch has no such call (negative slice steps)
    marks: list = field(default_factory=list)

    def arrays(self, seed: int = 0, dtype=np.float64):
        rng = np.random.default_rng(seed)
        return [DOMAINS[d](rng, shape).astype(dtype) for shape, d in self.inputs]


def _gelu(lib, x):
    return lib.nn.functional.gelu(x) if lib.__name__ == "torch" else lib.gelu(x)


UNARY = [
    ("neg", lambda lib, x: -x, "any"),
    ("exp", lambda lib, x: lib.exp(x), "any"),
    ("log", lambda lib, x: lib.log(x), "pos"),
    ("sqrt", lambda lib, x: lib.sqrt(x), "pos"),
    ("sin", lambda lib, x: lib.sin(x), "any"),
    ("cos", lambda lib, x: x.cos(), "any"),
    ("tanh", lambda lib, x: lib.tanh(x), "any"),
    ("sigmoid", lambda lib, x: lib.sigmoid(x), "any"),
    ("relu", lambda lib, x: lib.relu(x), "away"),
    ("gelu", _gelu, "any"),
    ("abs", lambda lib, x: lib.abs(x), "away"),
    ("abs_operator", lambda lib, x: abs(x), "away"),
    ("pow_scalar_exponent", lambda lib, x: x ** 3, "any"),
    ("pow_fractional_exponent", lambda lib, x: x ** 1.5, "pos"),
    ("pow_negative_exponent", lambda lib, x: x ** -2, "pos"),
    ("rpow_scalar_base", lambda lib, x: 2.0 ** x, "any"),
    ("add_scalar", lambda lib, x: x + 2.5, "any"),
    ("radd_scalar", lambda lib, x: 2.5 + x, "any"),
    ("rsub_scalar", lambda lib, x: 2.5 - x, "any"),
    ("sub_scalar", lambda lib, x: x - 2.5, "any"),
    ("mul_scalar", lambda lib, x: x * -1.5, "any"),
    ("rmul_scalar", lambda lib, x: 3 * x, "any"),
    ("div_scalar", lambda lib, x: x / 4.0, "any"),
    ("rdiv_scalar", lambda lib, x: 2.0 / x, "away"),
    ("maximum_scalar_like_relu", lambda lib, x: lib.maximum(x, lib.zeros_like(x)), "away"),
]

UNARY_SHAPES = [(), (5,), (2, 3), (2, 1, 3)]

BINARY = [
    ("add", lambda lib, a, b: a + b, "any", "any"),
    ("sub", lambda lib, a, b: a - b, "any", "any"),
    ("mul", lambda lib, a, b: a * b, "any", "any"),
    ("div", lambda lib, a, b: a / b, "any", "away"),
    ("pow", lambda lib, a, b: a ** b, "pos", "any"),
    ("maximum", lambda lib, a, b: lib.maximum(a, b), "grid", "offgrid"),
    ("add_fn", lambda lib, a, b: lib.add(a, b), "any", "any"),
    ("mul_fn", lambda lib, a, b: lib.mul(a, b), "any", "any"),
    ("pow_fn", lambda lib, a, b: lib.pow(a, b), "pos", "any"),
]

BROADCAST_SHAPES = [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (3, 4)), ((2, 1, 4), (3, 1)),
                    ((), (2, 3)), ((3, 1), (1, 4)), ((2, 3), ())]


def unary_cases():
    out = []
    for name, fn, dom in UNARY:
        for shape in UNARY_SHAPES:
            out.append(Case(f"{name}-{shape}", fn, [(shape, dom)]))
    return out


def binary_cases():
    out = []
    for name, fn, da, db in BINARY:
        for sa, sb in BROADCAST_SHAPES:
            out.append(Case(f"{name}-{sa}-{sb}", fn, [(sa, da), (sb, db)]))
    return out


REDUCTIONS = [
    Case("sum_all", lambda lib, x: x.sum(), [((3, 4), "any")]),
    Case("sum_dim", lambda lib, x: x.sum(dim=1), [((3, 4), "any")]),
    Case("sum_neg_dim_keepdim", lambda lib, x: x.sum(dim=-1, keepdim=True), [((2, 3, 4), "any")]),
    Case("sum_dims_tuple", lambda lib, x: x.sum(dim=(0, 2)), [((2, 3, 4), "any")]),
    Case("sum_dims_tuple_keepdim", lambda lib, x: x.sum(dim=(0, 2), keepdim=True), [((2, 3, 4), "any")]),
    Case("sum_fn", lambda lib, x: lib.sum(x, 0), [((3, 4), "any")]),
    Case("sum_0d", lambda lib, x: x.sum(), [((), "any")]),
    Case("mean_all", lambda lib, x: x.mean(), [((3, 4), "any")]),
    Case("mean_dim", lambda lib, x: x.mean(dim=0), [((3, 4), "any")]),
    Case("mean_dims_keepdim", lambda lib, x: x.mean(dim=(1, 2), keepdim=True), [((2, 3, 4), "any")]),
    Case("mean_fn", lambda lib, x: lib.mean(x, dim=-1), [((2, 3, 4), "any")]),
    Case("max_all", lambda lib, x: x.max(), [((3, 4), "distinct")]),
    Case("max_dim_values", lambda lib, x: x.max(dim=1).values, [((3, 4), "distinct")]),
    Case("max_dim_keepdim_values", lambda lib, x: x.max(dim=0, keepdim=True).values, [((3, 4), "distinct")]),
    Case("max_dim_tuple0", lambda lib, x: x.max(dim=-1)[0], [((2, 3, 4), "distinct")]),
    Case("max_fn_dim", lambda lib, x: lib.max(x, 1).values, [((2, 3, 4), "distinct")]),
    Case("amax_dims", lambda lib, x: x.amax(dim=(0, 2)), [((2, 3, 4), "distinct")]),
    Case("amax_dims_keepdim", lambda lib, x: lib.amax(x, dim=(0, 1), keepdim=True), [((2, 3, 4), "distinct")]),
    Case("logsumexp_dim", lambda lib, x: lib.logsumexp(x, dim=1), [((3, 4), "any")]),
    Case("logsumexp_keepdim", lambda lib, x: x.logsumexp(dim=-1, keepdim=True), [((2, 3, 4), "any")]),
    Case("logsumexp_dims", lambda lib, x: lib.logsumexp(x, dim=(0, 2)), [((2, 3, 4), "any")]),
    Case("logsumexp_large_values", lambda lib, x: lib.logsumexp(x * 400.0, dim=1), [((3, 4), "any")]),
]

SHAPE_OPS = [
    Case("reshape", lambda lib, x: x.reshape(4, 3), [((2, 6), "any")]),
    Case("reshape_minus_one", lambda lib, x: x.reshape(-1, 2), [((3, 4), "any")]),
    Case("reshape_of_transpose_copies", lambda lib, x: x.transpose(0, 1).reshape(-1), [((3, 4), "any")]),
    Case("reshape_fn_tuple", lambda lib, x: lib.reshape(x, (2, 2, 3)), [((3, 4), "any")]),
    Case("view", lambda lib, x: x.view(2, 2, 3), [((3, 4), "any")]),
    Case("view_minus_one", lambda lib, x: x.view(-1), [((3, 4), "any")]),
    Case("permute", lambda lib, x: x.permute(2, 0, 1), [((2, 3, 4), "any")]),
    Case("permute_tuple", lambda lib, x: x.permute((1, 2, 0)), [((2, 3, 4), "any")]),
    Case("transpose", lambda lib, x: x.transpose(0, 2), [((2, 3, 4), "any")]),
    Case("transpose_neg", lambda lib, x: lib.transpose(x, -1, -2), [((2, 3, 4), "any")]),
    Case("T", lambda lib, x: x.T, [((3, 4), "any")]),
    Case("expand", lambda lib, x: x.expand(2, 3, 4), [((3, 1), "any")]),
    Case("expand_minus_one", lambda lib, x: x.expand(5, -1), [((1, 4), "any")]),
    Case("broadcast_to", lambda lib, x: lib.broadcast_to(x, (2, 3, 4)), [((4,), "any")]),
    Case("squeeze_all", lambda lib, x: x.squeeze(), [((1, 3, 1, 2), "any")]),
    Case("squeeze_dim", lambda lib, x: x.squeeze(2), [((1, 3, 1, 2), "any")]),
    Case("unsqueeze", lambda lib, x: x.unsqueeze(1), [((3, 2), "any")]),
    Case("unsqueeze_neg", lambda lib, x: lib.unsqueeze(x, -1), [((3, 2), "any")]),
    Case("flatten", lambda lib, x: x.flatten(), [((2, 3, 2), "any")]),
    Case("flatten_start", lambda lib, x: lib.flatten(x, 1), [((2, 3, 2), "any")]),
    Case("contiguous_of_transpose", lambda lib, x: x.transpose(0, 1).contiguous() * 1.0, [((3, 4), "any")]),
    Case("clone", lambda lib, x: x.clone(), [((3, 4), "any")]),
    Case("cat_dim0", lambda lib, a, b: lib.cat([a, b]), [((2, 3), "any"), ((4, 3), "any")]),
    Case("cat_dim1_three", lambda lib, a, b, c: lib.cat([a, b, c], dim=1),
         [((2, 1), "any"), ((2, 3), "any"), ((2, 2), "any")]),
    Case("cat_neg_dim", lambda lib, a, b: lib.cat((a, b), dim=-1), [((2, 3, 1), "any"), ((2, 3, 2), "any")]),
    Case("cat_same_tensor_twice", lambda lib, a: lib.cat([a, a * 2.0], 0), [((2, 3), "any")]),
    Case("stack", lambda lib, a, b: lib.stack([a, b]), [((2, 3), "any"), ((2, 3), "any")]),
    Case("stack_dim1", lambda lib, a, b: lib.stack([a, b], dim=1), [((2, 3), "any"), ((2, 3), "any")]),
    Case("stack_neg_dim", lambda lib, a, b, c: lib.stack([a, b, c], dim=-1),
         [((2, 3), "any"), ((2, 3), "any"), ((2, 3), "any")]),
]

GETITEM = [
    Case("getitem_int", lambda lib, x: x[1], [((3, 4), "any")]),
    Case("getitem_negative_int", lambda lib, x: x[-1, -2], [((3, 4), "any")]),
    Case("getitem_slices_with_steps", lambda lib, x: x[1:, ::2], [((3, 5), "any")]),
    Case("getitem_out_of_range_slice", lambda lib, x: x[-10:10, 1:100], [((3, 4), "any")]),
    Case("getitem_none_ellipsis", lambda lib, x: x[None, ..., 1], [((2, 3, 4), "any")]),
    Case("getitem_negative_step", lambda lib, x: x[::-1, 3:0:-2], [((3, 5), "any")], torch=False),
    Case("getitem_int_array", lambda lib, x: x[lib.tensor([2, 0, 2])], [((3, 4), "any")]),
    Case("getitem_int_list_negative", lambda lib, x: x[[-1, 0, 0]], [((3, 4), "any")]),
    Case("getitem_int_array_second_axis", lambda lib, x: x[:, lib.tensor([3, 1, 1, 0])], [((3, 4), "any")]),
    Case("getitem_two_int_arrays", lambda lib, x: x[lib.tensor([0, 2, 2]), lib.tensor([1, 3, 1])],
         [((3, 4), "any")]),
    Case("getitem_bool_mask", lambda lib, x: x[x > 0], [((3, 4), "away")]),
    Case("getitem_of_getitem", lambda lib, x: x[1:][:, -1], [((3, 4), "any")]),
]

MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)),
                 ((5, 2, 3), (3, 4)), ((2, 3), (5, 3, 4)), ((2, 1, 2, 3), (4, 3, 2)),
                 ((5, 2, 3), (5, 3, 4)), ((3,), (2, 3, 4)), ((2, 2, 3), (3,)), ((1, 2, 3), (4, 3, 1))]


def matmul_cases():
    out = [Case(f"matmul-{sa}-{sb}", lambda lib, a, b: a @ b, [(sa, "any"), (sb, "any")])
           for sa, sb in MATMUL_SHAPES]
    out.append(Case("matmul_fn_of_transpose", lambda lib, a, b: lib.matmul(a.transpose(-1, -2), b),
                    [((2, 3, 2), "any"), ((3, 4), "any")]))
    return out


COMPOSITE = [
    Case("mlp", lambda lib, x, w1, w2: (lib.tanh(x @ w1) @ w2).sigmoid().mean(), [((4, 3), "any"), ((3, 5), "any"), ((5, 2), "any")]),
    Case("softmax_by_hand", lambda lib, x: (x - lib.logsumexp(x, dim=1, keepdim=True)).exp(),
         [((3, 4), "any")]),
    Case("x_used_three_times", lambda lib, x: x * x.sin() + x.exp() / (x * x + 1.0), [((2, 3), "any")]),
    Case("var_like", lambda lib, x: ((x - x.mean(dim=0, keepdim=True)) ** 2).mean(dim=0), [((4, 3), "any")]),
]


def all_cases():
    return unary_cases() + binary_cases() + REDUCTIONS + SHAPE_OPS + GETITEM + matmul_cases() + COMPOSITE


NON_DIFFERENTIABLE = [
    Case("argmax_dim", lambda lib, x: x.argmax(dim=1), [((3, 4), "distinct")], differentiable=False),
    Case("argmax_all", lambda lib, x: x.argmax(), [((3, 4), "distinct")], differentiable=False),
    Case("argmax_keepdim", lambda lib, x: lib.argmax(x, dim=0, keepdim=True), [((3, 4), "distinct")],
         differentiable=False),
    Case("max_indices", lambda lib, x: x.max(dim=1).indices, [((2, 3, 4), "distinct")],
         differentiable=False),
    Case("max_indices_keepdim", lambda lib, x: lib.max(x, dim=-1, keepdim=True)[1], [((2, 3, 4), "distinct")],
         differentiable=False),
    Case("comparisons", lambda lib, a, b: (a > b), [((3, 4), "grid"), ((4,), "offgrid")],
         differentiable=False),
]

