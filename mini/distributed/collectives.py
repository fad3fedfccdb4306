"""Point-to-point and collective operations, with ``torch.distributed``'s names and semantics.

Tensors are written in place (``recv``, ``broadcast``, ``all_reduce``, ...), must be
contiguous, and may also be numpy arrays (C-contiguous).  Each operation is an MPI
non-blocking request; the blocking forms wait for it (see :func:`wait_all` for timeouts and
failure handling), the ``async_op=True`` forms and ``isend``/``irecv`` return a
:class:`~mini.distributed.process_group.Work` to ``wait()`` on.  Every operation reports an
event to :func:`mini.distributed.record_communication` logs.
"""
from __future__ import annotations

import enum
import pickle

import numpy as np

from mini.distributed import events as _events
from mini.distributed.process_group import Work, _group, wait_all

__all__ = ["ReduceOp", "send", "recv", "isend", "irecv", "broadcast", "all_reduce",
           "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
           "barrier", "broadcast_object_list", "all_gather_object"]


class ReduceOp(enum.Enum):
    """How ``all_reduce`` and ``reduce_scatter`` combine the ranks' values."""
    SUM = "sum"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    AVG = "avg"          # the sum divided by the world size (floating-point tensors)
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


def _mpi_op(op: ReduceOp):
    from mpi4py import MPI
    if not isinstance(op, ReduceOp):
        raise TypeError(f"op must be a mini.distributed.ReduceOp (e.g. ReduceOp.SUM), got {op!r}")
    return {ReduceOp.SUM: MPI.SUM, ReduceOp.AVG: MPI.SUM, ReduceOp.PRODUCT: MPI.PROD,
            ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX, ReduceOp.BAND: MPI.BAND,
            ReduceOp.BOR: MPI.BOR, ReduceOp.BXOR: MPI.BXOR}[op]


# --------------------------------------------------------------------------- buffers

def _buffer(t, what: str) -> np.ndarray:
    """The memory of ``t`` as a C-contiguous numpy array (shared, not copied)."""
    from mini.autograd.tensor import Tensor
    if isinstance(t, Tensor):
        nd = t._data
        if not nd.is_compact():
            raise ValueError(f"{what}: the tensor must be contiguous (shape {tuple(t.shape)}, "
                             f"strides {t.stride()}); pass t.contiguous(), and copy the result "
                             f"back if you need it in t")
        if nd.size == 0:
            return np.empty(nd.shape, dtype=nd.storage.data.dtype)
        return nd.to_numpy_view()
    if isinstance(t, np.ndarray):
        if not t.flags.c_contiguous:
            raise ValueError(f"{what}: the numpy array must be C-contiguous "
                             f"(np.ascontiguousarray)")
        return t
    raise TypeError(f"{what} expects a mini.Tensor (or a numpy array), got {type(t).__name__}")


def _written(t) -> None:
    """Bump the version counter of a tensor written in place (autograd checks it)."""
    from mini.autograd.tensor import Tensor
    if isinstance(t, Tensor):
        t._data.storage.version += 1


def _check_peer(peer: int, pg, what: str, name: str) -> int:
    if not isinstance(peer, (int, np.integer)) or isinstance(peer, bool):
        raise TypeError(f"{what}: {name} must be an int rank, got {type(peer).__name__}")
    if not 0 <= int(peer) < pg.size():
        raise ValueError(f"{what}: {name}={peer} is not a rank of this world of {pg.size()} "
                         f"(ranks 0..{pg.size() - 1})")
    return int(peer)


def _check_blocks(what: str, whole: np.ndarray, block: np.ndarray, pg) -> None:
    """``whole`` must hold world_size blocks of ``block``'s size and dtype."""
    if whole.size != block.size * pg.size() or whole.dtype != block.dtype:
        raise ValueError(f"{what}: the larger tensor must hold world_size ({pg.size()}) × "
                         f"{block.size} elements of {block.dtype}; got {whole.size} elements "
                         f"of {whole.dtype}")


def _averaging(op: "ReduceOp", arr: np.ndarray, pg, what: str):
    """What completes a reduction into ``arr``: the division of ``ReduceOp.AVG``."""
    if op is not ReduceOp.AVG:
        return None
    if arr.dtype.kind != "f":
        raise TypeError(f"{what} with ReduceOp.AVG needs a floating-point tensor, got "
                        f"{arr.dtype}")
    return lambda: np.divide(arr, arr.dtype.type(pg.size()), out=arr)


def _event(op, pg, arr, peer=None, tag=None):
    return _events.emit(op, pg.rank(), peer=peer, count=int(arr.size), nbytes=int(arr.nbytes),
                        dtype=str(arr.dtype), tag=tag)


# --------------------------------------------------------------------------- point to point

def isend(tensor, dst: int, group=None, tag: int = 0) -> Work:
    """Start sending ``tensor`` to rank ``dst``; returns a Work (``wait()`` before you
    change the tensor)."""
    pg = _group(group)
    dst = _check_peer(dst, pg, "isend", "dst")
    arr = _buffer(tensor, "isend")
    ev = _event("isend", pg, arr, peer=dst, tag=tag)
    req = pg.comm.Isend(arr, dest=dst, tag=tag)
    return Work([req], f"isend(dst={dst}, {arr.nbytes} bytes, tag={tag})", pg, event=ev)


def irecv(tensor, src: int | None = None, group=None, tag: int = 0) -> Work:
    """Start receiving into ``tensor`` from rank ``src`` (None: any rank)."""
    from mpi4py import MPI
    pg = _group(group)
    source = MPI.ANY_SOURCE if src is None else _check_peer(src, pg, "irecv", "src")
    arr = _buffer(tensor, "irecv")
    ev = _event("irecv", pg, arr, peer=src, tag=tag)
    req = pg.comm.Irecv(arr, source=source, tag=tag)
    return Work([req], f"irecv(src={'any' if src is None else src}, {arr.nbytes} bytes, "
                       f"tag={tag})", pg, event=ev, finish=lambda: _written(tensor))


def send(tensor, dst: int, group=None, tag: int = 0) -> None:
    """Send ``tensor`` to rank ``dst`` and wait until its buffer may be reused."""
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src: int | None = None, group=None, tag: int = 0) -> int:
    """Receive into ``tensor`` (same number of elements and dtype as the message) from rank
    ``src`` (None: any rank).  Returns the sender's rank."""
    from mpi4py import MPI
    pg = _group(group)
    source = MPI.ANY_SOURCE if src is None else _check_peer(src, pg, "recv", "src")
    arr = _buffer(tensor, "recv")
    ev = _event("recv", pg, arr, peer=src, tag=tag)
    status = MPI.Status()
    req = pg.comm.Irecv(arr, source=source, tag=tag)
    wait_all([req], f"recv(src={'any' if src is None else src}, {arr.nbytes} bytes, tag={tag})",
             pg, statuses=[status])
    _written(tensor)
    _events.complete(ev)
    sender = status.Get_source()
    if ev is not None and ev.peer is None:
        ev.peer = sender
    return sender


# --------------------------------------------------------------------------- collectives

def _collective(op_name, pg, arr, requests_fn, tensor_written, async_op, finish=None,
                peer=None, what=None):
    ev = _event(op_name, pg, arr, peer=peer)
    req = requests_fn()

    def done():
        if finish is not None:
            finish()
        for t in tensor_written:
            _written(t)

    work = Work([req], what or f"{op_name}({arr.nbytes} bytes)", pg, event=ev, finish=done)
    if async_op:
        return work
    work.wait()
    return None


def broadcast(tensor, src: int, group=None, async_op: bool = False):
    """Copy ``tensor`` of rank ``src`` into ``tensor`` on every rank."""
    pg = _group(group)
    src = _check_peer(src, pg, "broadcast", "src")
    arr = _buffer(tensor, "broadcast")
    written = [tensor] if pg.rank() != src else []
    return _collective("broadcast", pg, arr, lambda: pg.comm.Ibcast(arr, root=src), written,
                       async_op, peer=src,
                       what=f"broadcast(src={src}, {arr.nbytes} bytes)")


def all_reduce(tensor, op: ReduceOp = ReduceOp.SUM, group=None, async_op: bool = False):
    """Combine ``tensor`` over all ranks (``op``, default the sum), in place on every rank.

    This is MPI's own ``MPI_Allreduce``; the ring algorithm that chapter 06 builds from
    ``send`` and ``recv`` is :func:`mini.distributed.ring_allreduce`."""
    from mpi4py import MPI
    pg = _group(group)
    mpi_op = _mpi_op(op)
    arr = _buffer(tensor, "all_reduce")
    return _collective("all_reduce", pg, arr,
                       lambda: pg.comm.Iallreduce(MPI.IN_PLACE, arr, op=mpi_op), [tensor],
                       async_op, finish=_averaging(op, arr, pg, "all_reduce"),
                       what=f"all_reduce({op.name}, {arr.nbytes} bytes)")


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    """``output_tensor`` (world_size × the input's elements) receives every rank's input,
    rank 0's first."""
    pg = _group(group)
    src = _buffer(input_tensor, "all_gather_into_tensor (input)")
    out = _buffer(output_tensor, "all_gather_into_tensor (output)")
    _check_blocks("all_gather_into_tensor (output)", out, src, pg)
    return _collective("all_gather", pg, src, lambda: pg.comm.Iallgather(src, out),
                       [output_tensor], async_op,
                       what=f"all_gather({src.nbytes} bytes per rank)")


def all_gather(tensor_list, tensor, group=None, async_op: bool = False):
    """``tensor_list[r]`` receives ``tensor`` of rank r (all of one shape and dtype)."""
    pg = _group(group)
    src = _buffer(tensor, "all_gather (input)")
    outs = [_buffer(t, "all_gather (tensor_list)") for t in tensor_list]
    if len(outs) != pg.size():
        raise ValueError(f"all_gather: tensor_list needs world_size ({pg.size()}) tensors, "
                         f"got {len(outs)}")
    for i, o in enumerate(outs):
        if o.size != src.size or o.dtype != src.dtype:
            raise ValueError(f"all_gather: tensor_list[{i}] has {o.size} elements of {o.dtype}, "
                             f"the input {src.size} of {src.dtype}; they must match")
    gathered = np.empty((pg.size(),) + src.shape, dtype=src.dtype)

    def finish():
        for o, g in zip(outs, gathered):
            o.reshape(-1)[...] = g.reshape(-1)

    return _collective("all_gather", pg, src, lambda: pg.comm.Iallgather(src, gathered),
                       list(tensor_list), async_op, finish=finish,
                       what=f"all_gather({src.nbytes} bytes per rank)")


def reduce_scatter_tensor(output, input, op: ReduceOp = ReduceOp.SUM, group=None,
                          async_op: bool = False):
    """Combine ``input`` (world_size equal blocks) over the ranks; rank r's ``output``
    receives block r of the result."""
    pg = _group(group)
    mpi_op = _mpi_op(op)
    src = _buffer(input, "reduce_scatter_tensor (input)")
    out = _buffer(output, "reduce_scatter_tensor (output)")
    _check_blocks("reduce_scatter_tensor (input)", src, out, pg)
    return _collective("reduce_scatter", pg, src,
                       lambda: pg.comm.Ireduce_scatter_block(src, out, op=mpi_op), [output],
                       async_op, finish=_averaging(op, out, pg, "reduce_scatter"),
                       what=f"reduce_scatter({op.name}, {src.nbytes} bytes)")


def reduce_scatter(output, input_list, op: ReduceOp = ReduceOp.SUM, group=None,
                   async_op: bool = False):
    """``output`` on rank r receives the combination over ranks of ``input_list[r]``."""
    pg = _group(group)
    if len(input_list) != pg.size():
        raise ValueError(f"reduce_scatter: input_list needs world_size ({pg.size()}) tensors, "
                         f"got {len(input_list)}")
    blocks = [_buffer(t, "reduce_scatter (input_list)") for t in input_list]
    flat = np.concatenate([b.reshape(-1) for b in blocks]) if blocks else np.empty(0)
    return reduce_scatter_tensor(output, flat, op, group, async_op)


def barrier(group=None, async_op: bool = False, device_ids=None):
    """Wait until every rank has called ``barrier``."""
    pg = _group(group)
    ev = _events.emit("barrier", pg.rank())
    work = Work([pg.comm.Ibarrier()], "barrier()", pg, event=ev)
    if async_op:
        return work
    work.wait()
    return None


# --------------------------------------------------------------------------- Python objects

def broadcast_object_list(object_list: list, src: int = 0, group=None) -> None:
    """Replace ``object_list``'s items on every rank by rank ``src``'s (pickled)."""
    pg = _group(group)
    src = _check_peer(src, pg, "broadcast_object_list", "src")
    data = pickle.dumps(list(object_list)) if pg.rank() == src else b""
    size = np.array([len(data)], dtype=np.int64)
    broadcast(size, src, group)
    buf = np.frombuffer(bytearray(data), dtype=np.uint8) if pg.rank() == src \
        else np.empty(int(size[0]), dtype=np.uint8)
    broadcast(buf, src, group)
    if pg.rank() != src:
        object_list[:] = pickle.loads(buf.tobytes())


def all_gather_object(object_list: list, obj, group=None) -> None:
    """``object_list[r]`` receives rank r's ``obj`` (pickled)."""
    pg = _group(group)
    if len(object_list) != pg.size():
        raise ValueError(f"all_gather_object: object_list needs world_size ({pg.size()}) "
                         f"entries, got {len(object_list)}")
    data = np.frombuffer(pickle.dumps(obj), dtype=np.uint8)
    sizes = np.zeros(pg.size(), dtype=np.int64)
    all_gather_into_tensor(sizes, np.array([data.size], dtype=np.int64), group)
    width = int(sizes.max()) if sizes.size else 0
    padded = np.zeros(width, dtype=np.uint8)
    padded[:data.size] = data
    out = np.empty(width * pg.size(), dtype=np.uint8)
    all_gather_into_tensor(out, padded, group)
    for r in range(pg.size()):
        object_list[r] = pickle.loads(out[r * width: r * width + int(sizes[r])].tobytes())
