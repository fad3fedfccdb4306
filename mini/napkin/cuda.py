"""The cost models of chapter 04's CUDA part, as plain functions.

Everything here is napkin math about a GPU the emulator does not time: it counts (global
loads, 32-byte sectors, bytes copied), and these formulas turn counts into predictions.

- **Transfers** take ``latency + bytes / bandwidth``.  A 4 MB tensor (a 1000 x 1000 float32
  activation) crosses a PCIe Gen5 x16 link (64 GB/s) in 62.5 us, NVLink 4.0 (450 GB/s per
  direction) in 8.9 us, and moves inside HBM3 (3.35 TB/s) in 1.2 us: the HBM/PCIe gap is 52x.
- **Overlap.**  A pipeline of ``batches`` steps, each a copy then a kernel, costs the sum of
  both per batch when they run one after the other, and once they overlap (copy of batch
  i + 1 during the kernel of batch i, on two streams) ``t_copy + t_kernel + (batches - 1) *
  max(t_copy, t_kernel)``: the longer stage sets the pace, not the sum.
- **Occupancy.**  An SM holds a limited number of threads, blocks, registers and bytes of
  shared memory; the blocks resident at once are the smallest of the four quotients.
- **Global reads of a matrix product** [M, K] @ [K, N]: a thread per output that reads its
  row of A and column of B from global memory reads ``2·M·N·K`` floats; with T x T tiles
  in shared memory every element loaded is used T times: ``M·K·ceil(N/T) + K·N·ceil(M/T)``,
  which is ``2·M·N·K/T`` when T divides the sizes.
- **Coalescing.**  Global memory is read in 32-byte sectors.  When the 32 threads of a warp
  read 32 floats ``stride`` elements apart, the request touches ``min(32, 4·stride)``
  sectors (from an aligned start): 4 for neighbours (128 useful bytes in 128 fetched), 32 for
  a column walk (128 useful bytes in 1024 fetched).

    >>> round(transfer_time(4e6, LINKS["PCIe Gen5 x16"]) * 1e6, 1)
    62.5
    >>> pipeline_time(3.0, 2.0, 4), pipeline_time(3.0, 2.0, 4, overlap=False)
    (14.0, 20.0)
    >>> blocks_per_sm(256, registers=64, shared_bytes=48 * 1024)
    4
    >>> matmul_global_reads(64, 64, 64), matmul_global_reads(64, 64, 64, tile=16)
    (524288, 32768)
    >>> sectors_per_request(1), sectors_per_request(2), sectors_per_request(64)
    (4, 8, 32)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GpuSpec", "H100", "LINKS", "transfer_time", "pipeline_time", "blocks_per_sm",
           "occupancy", "matmul_global_reads", "sectors_per_request", "bytes_per_flop",
           "SECTOR_BYTES", "WARP_SIZE"]

WARP_SIZE = 32
SECTOR_BYTES = 32


@dataclass(frozen=True)
class GpuSpec:
    """The numbers of one GPU that napkin math needs (per SM unless said otherwise)."""
    name: str
    sms: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int          # 32-bit registers
    shared_bytes_per_sm: int
    max_threads_per_block: int
    hbm_bandwidth: float           # bytes/s
    fp32_flops: float              # FLOP/s (dense)


#: NVIDIA H100 SXM (compute capability 9.0): 132 SMs, 2048 threads, 32 blocks, 64 K
#: registers and 228 KB of shared memory per SM; the seed's 3.35 TB/s and 67 TFLOP/s.
H100 = GpuSpec("H100 SXM", sms=132, max_threads_per_sm=2048, max_blocks_per_sm=32,
               registers_per_sm=65536, shared_bytes_per_sm=228 * 1024, max_threads_per_block=1024,
               hbm_bandwidth=3.35e12, fp32_flops=67e12)

#: Bandwidths of the seed's table 7, in bytes/s (PCIe and NVLink: one direction).
LINKS = {"PCIe Gen5 x16": 64e9, "NVLink 4.0": 450e9, "HBM3": 3.35e12}


def transfer_time(nbytes: float, bandwidth: float, latency: float = 0.0) -> float:
    """Seconds to move ``nbytes`` over a link of ``bandwidth`` bytes/s: ``latency +
    nbytes / bandwidth``."""
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    return latency + nbytes / bandwidth


def pipeline_time(t_copy: float, t_compute: float, batches: int, overlap: bool = True) -> float:
    """Time for ``batches`` batches that each need a copy (``t_copy``) and then a kernel
    (``t_compute``).  Without overlap every batch pays both; with overlap (two streams, copy
    of the next batch during the kernel of this one) the first copy and the last kernel are
    exposed and every other step costs the longer of the two stages."""
    if batches < 0:
        raise ValueError(f"batches must be >= 0, got {batches}")
    if batches == 0:
        return 0.0
    if not overlap:
        return batches * (t_copy + t_compute)
    return t_copy + t_compute + (batches - 1) * max(t_copy, t_compute)


def blocks_per_sm(threads: int, registers: int = 32, shared_bytes: int = 0, gpu: GpuSpec = H100) -> int:
    """Blocks of ``threads`` threads that fit on one SM at once, each thread using
    ``registers`` registers and each block ``shared_bytes`` of shared memory: the smallest
    of the thread, block, register and shared-memory limits (0 when one block does not fit).

    Real GPUs also round registers up per warp and reserve 1 KB of shared memory per block,
    so NVIDIA's occupancy calculator can give fewer blocks than this napkin count."""
    if threads < 1 or threads > gpu.max_threads_per_block:
        raise ValueError(f"a block has 1 to {gpu.max_threads_per_block} threads, got {threads}")
    limits = [gpu.max_blocks_per_sm, gpu.max_threads_per_sm // threads]
    if registers:
        limits.append(gpu.registers_per_sm // (registers * threads))
    if shared_bytes:
        limits.append(gpu.shared_bytes_per_sm // shared_bytes)
    return max(0, min(limits))


def occupancy(threads: int, registers: int = 32, shared_bytes: int = 0, gpu: GpuSpec = H100) -> float:
    """Resident threads over the SM's maximum (1.0: every thread slot busy)."""
    return blocks_per_sm(threads, registers, shared_bytes, gpu) * threads / gpu.max_threads_per_sm


def matmul_global_reads(m: int, n: int, k: int, tile: int | None = None) -> int:
    """Floats a matrix-product kernel reads from global memory for [m, k] @ [k, n]: one
    thread per output reading a row of A and a column of B (``tile=None``), or T x T tiles
    staged in shared memory (each block loads the in-bounds part of its tiles once)."""
    if tile is None:
        return 2 * m * n * k
    return m * k * math.ceil(n / tile) + k * n * math.ceil(m / tile)


def sectors_per_request(stride: int, itemsize: int = 4, lanes: int = WARP_SIZE) -> int:
    """32-byte sectors one warp-wide load touches when lane i reads element ``i * stride``
    of an array whose start is sector-aligned."""
    return len({(lane * stride * itemsize) // SECTOR_BYTES for lane in range(lanes)})


def bytes_per_flop(nbytes: float, flops: float) -> float:
    """The bytes an operation moves per FLOP it does (the inverse of its intensity)."""
    return nbytes / flops if flops else math.inf
