"""Roofline napkin math (chapter 04): FLOPs, bytes, arithmetic intensity, the ridge point,
the dispatch-overhead law and the traffic saved by fusion.

Conventions (float32, b = 4 bytes per element unless said otherwise):

- a GEMM [M, K] @ [K, N] does ``2·M·K·N`` FLOPs (one multiply and one add per term) and,
  at best, moves ``(M·K + K·N + M·N)·b`` bytes: each operand read once, the result
  written once;
- an elementwise op on n elements reads and writes n elements (``2·n·b`` bytes) and does
  one FLOP per element; a chain of k such ops moves ``2·k·n·b`` unfused and ``2·n·b``
  fused;
- arithmetic intensity (AI) = FLOPs / bytes.  A machine with peak rate P (FLOP/s) and
  memory bandwidth B (bytes/s) attains at most ``min(P, AI·B)``; the *ridge point* P/B is
  the intensity where the two limits meet.  Below it an op is memory-bound.

    >>> gemm_flops(32, 784, 128), gemm_bytes(32, 784, 128)
    (6422528, 518144)
    >>> round(intensity(gemm_flops(32, 784, 128), gemm_bytes(32, 784, 128)), 1)
    12.4
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "gemm_flops", "gemm_bytes", "gemm_intensity", "intensity", "elementwise_flops",
    "elementwise_bytes", "ridge_point", "attainable", "bound", "OpCost", "mlp_step_table",
    "table_totals", "dispatch_ratio", "dispatch_share", "max_speedup", "op_overhead_share",
    "chain_bytes", "add_relu_bytes", "fusion_speedup", "predicted_time",
    "H100_PEAK_FLOPS", "H100_BANDWIDTH", "H100_TENSOR_FP16_FLOPS",
]

#: The seed's accelerator: 67 TFLOP/s (FP32 dense) and 3.35 TB/s of HBM3 -> ridge 20 FLOP/B.
H100_PEAK_FLOPS = 67e12
H100_BANDWIDTH = 3.35e12
#: Its tensor cores on FP16 (dense): 989 TFLOP/s -> ridge about 295 FLOP/B.  Matrix products
#: that run on tensor cores need 15 times more reuse per byte to be compute-bound.
H100_TENSOR_FP16_FLOPS = 989e12


# --------------------------------------------------------------------------- FLOPs and bytes

def gemm_flops(m: int, k: int, n: int) -> int:
    """FLOPs of [m, k] @ [k, n]: ``2·m·k·n``."""
    return 2 * int(m) * int(k) * int(n)


def gemm_bytes(m: int, k: int, n: int, itemsize: int = 4) -> int:
    """Minimum bytes moved by [m, k] @ [k, n]: ``(m·k + k·n + m·n)·itemsize``."""
    return (int(m) * int(k) + int(k) * int(n) + int(m) * int(n)) * int(itemsize)


def intensity(flops: float, nbytes: float) -> float:
    """Arithmetic intensity in FLOP per byte."""
    if nbytes <= 0:
        raise ValueError(f"intensity: bytes must be positive, got {nbytes}")
    return float(flops) / float(nbytes)


def gemm_intensity(m: int, k: int, n: int, itemsize: int = 4) -> float:
    return intensity(gemm_flops(m, k, n), gemm_bytes(m, k, n, itemsize))


def elementwise_flops(n: int, flops_per_element: int = 1) -> int:
    return int(n) * int(flops_per_element)


def elementwise_bytes(n: int, itemsize: int = 4, reads: int = 1, writes: int = 1) -> int:
    """Bytes of an elementwise op that reads ``reads`` arrays and writes ``writes``."""
    return int(n) * int(itemsize) * (int(reads) + int(writes))


# --------------------------------------------------------------------------- the roofline

def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """FLOP per byte where compute and memory limits meet: ``peak / bandwidth``.
    ``ridge_point(67e12, 3.35e12) == 20.0``."""
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    return float(peak_flops) / float(bandwidth)


def attainable(ai: float, peak_flops: float, bandwidth: float) -> float:
    """The roofline: the highest FLOP/s an op of intensity ``ai`` can reach."""
    return min(float(peak_flops), float(ai) * float(bandwidth))


def bound(ai: float, peak_flops: float, bandwidth: float) -> str:
    """``"memory"`` below the ridge point, ``"compute"`` at or above it."""
    return "memory" if ai < ridge_point(peak_flops, bandwidth) else "compute"


def predicted_time(flops: float, nbytes: float, peak_flops: float, bandwidth: float) -> float:
    """Lower bound on an op's time: ``max(flops / peak, bytes / bandwidth)`` seconds."""
    return max(float(flops) / float(peak_flops), float(nbytes) / float(bandwidth))


# --------------------------------------------------------------------------- the MLP table

@dataclass(frozen=True)
class OpCost:
    name: str
    phase: str          # "forward" or "backward"
    flops: int
    bytes: int
    mini_op: str = ""   # what mini's profiler calls the op (for matching counts)

    @property
    def intensity(self) -> float:
        return intensity(self.flops, self.bytes)


def mlp_step_table(batch: int = 32, d_in: int = 784, hidden: int = 128, classes: int = 10,
                   itemsize: int = 4) -> list[OpCost]:
    """The ops of one training step of the two-layer MLP ``d_in -> hidden -> classes``
    (ReLU, cross-entropy; no biases), with their FLOPs and bytes.

    With the defaults (784 -> 128 -> 10, batch 32) this is the seed's roofline table:
    x@W1 6,422,528 FLOP and 518,144 B (AI 12.4), ReLU AI 0.125, h@W2 AI 3.6,
    cross-entropy AI 0.375; the step totals about 13.1 MFLOP and 1.2 MB, and the backward
    pass costs about as much as the forward again (x needs no gradient, so there is no
    x-gradient GEMM): fwd+bwd FLOPs = 2.013 x forward.
    """
    b, d, h, c, s = int(batch), int(d_in), int(hidden), int(classes), int(itemsize)
    bh, bc = b * h, b * c
    idx = 8  # int64 class labels
    return [
        OpCost("x@W1", "forward", gemm_flops(b, d, h), gemm_bytes(b, d, h, s), "MatMul"),
        OpCost("ReLU", "forward", bh, 2 * bh * s, "ReLU"),
        OpCost("h@W2", "forward", gemm_flops(b, h, c), gemm_bytes(b, h, c, s), "MatMul"),
        # log-softmax + pick: about 3 FLOPs per logit, logits read and written once
        OpCost("cross-entropy", "forward", 3 * bc, 2 * bc * s, "CrossEntropy"),
        # softmax - onehot, scaled by 1/B: 2 FLOPs per logit; read probs + labels, write grad
        OpCost("cross-entropy bwd", "backward", 2 * bc, 2 * bc * s + b * idx, "CrossEntropy"),
        OpCost("dW2 = h^T@g", "backward", gemm_flops(h, b, c), gemm_bytes(h, b, c, s), "MatMul"),
        OpCost("dh = g@W2^T", "backward", gemm_flops(b, c, h), gemm_bytes(b, c, h, s), "MatMul"),
        # mask the gradient: 1 op per element; read grad and saved output, write grad
        OpCost("ReLU bwd", "backward", bh, 3 * bh * s, "ReLU"),
        OpCost("dW1 = x^T@g", "backward", gemm_flops(d, b, h), gemm_bytes(d, b, h, s), "MatMul"),
    ]


def table_totals(table: list[OpCost]) -> dict:
    """``{"flops", "bytes", "forward_flops", "backward_flops", "intensity", "bwd_over_fwd"}``."""
    fwd = sum(o.flops for o in table if o.phase == "forward")
    bwd = sum(o.flops for o in table if o.phase == "backward")
    nbytes = sum(o.bytes for o in table)
    return {"flops": fwd + bwd, "bytes": nbytes, "forward_flops": fwd, "backward_flops": bwd,
            "intensity": (fwd + bwd) / nbytes, "step_over_forward": (fwd + bwd) / fwd}


# --------------------------------------------------------------------------- dispatch law

def dispatch_ratio(n_ops: int, t_dispatch: float, t_compute: float, t_memory: float = 0.0) -> float:
    """The dispatch law: ``R = N·t_d / (T_c + T_m)``.  R > 1: the step is overhead-bound.
    ``dispatch_ratio(6, 15e-6, 2.6e-6) == 34.6...``."""
    work = float(t_compute) + float(t_memory)
    if work <= 0:
        raise ValueError("dispatch_ratio: compute + memory time must be positive")
    return int(n_ops) * float(t_dispatch) / work


def dispatch_share(r: float) -> float:
    """Fraction of the step spent dispatching: ``R / (1 + R)``."""
    return float(r) / (1.0 + float(r))


def max_speedup(r: float) -> float:
    """What removing all dispatch could gain: ``1 + R``."""
    return 1.0 + float(r)


def op_overhead_share(t_kernel: float, t_python: float = 10e-6, t_launch: float = 5e-6) -> float:
    """Share of one op's time that is dispatch: 15 us of overhead around a 1 us kernel is
    15/16 = 94 %; around a 100 us kernel 15/115 = 13 %."""
    over = float(t_python) + float(t_launch)
    return over / (over + float(t_kernel))


# --------------------------------------------------------------------------- fusion

def chain_bytes(n: int, k: int, itemsize: int = 4, fused: bool = False) -> int:
    """Traffic of a chain of k one-input elementwise ops on n elements: each op reads and
    writes n elements, ``2·k·n·b`` unfused; fused, the chain reads once and writes once,
    ``2·n·b``.  add+relu (k = 2) is 4·n·b -> 2·n·b."""
    return 2 * (1 if fused else int(k)) * int(n) * int(itemsize)


def add_relu_bytes(n: int, itemsize: int = 4, fused: bool = False,
                   write_allocate: bool = False) -> int:
    """Traffic of ``relu(a + b)`` with two input arrays: unfused the add reads a, b and
    writes t (3·n·b) and the relu reads t and writes out (2·n·b): 5·n·b; fused: 3·n·b.

    ``write_allocate``: a CPU's ordinary store to a line that is not in the cache first
    reads the line from memory (write-allocate), so every written byte also crosses the
    memory bus once inbound: 7·n·b unfused (two writes), 4·n·b fused (one write)."""
    reads, writes = (2, 1) if fused else (3, 2)
    return (reads + writes * (2 if write_allocate else 1)) * int(n) * int(itemsize)


def fusion_speedup(k: int) -> float:
    """Predicted speedup of fusing a memory-bound k-op chain: traffic ratio, k."""
    return float(k)
