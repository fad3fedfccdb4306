"""``mini.distributed``: processes that train together, with ``torch.distributed``'s names,
on MPI (mpi4py; the ``mpich`` wheel from PyPI brings MPI and ``mpiexec``, no system MPI
needed; Open MPI or a cluster's MPI work the same way).

Launching.  Every rank is a process started by ``mpiexec``; the script is the same on all::

    mpiexec -n 4 python train.py          # 4 ranks on this machine

    # train.py
    import mini.distributed as dist
    dist.init_process_group(backend="mpi")
    rank, world = dist.get_rank(), dist.get_world_size()

``python train.py`` without ``mpiexec`` is a world of one rank, so the same script runs alone.

Across machines, list them in a host file (one host per line, ``host:slots``) and give it to
``mpiexec``; every machine needs the same Python environment at the same path and must
reach the others over the network without a password (ssh keys)::

    # hosts.txt
    node1:2
    node2:2

    mpiexec -f hosts.txt -n 4 python train.py       # MPICH (the wheel's mpiexec)
    mpirun --hostfile hosts.txt -np 4 python train.py   # Open MPI ("node1 slots=2" lines)

Operations.  ``send``/``recv``/``isend``/``irecv`` (``Work.wait()``), ``all_reduce``,
``broadcast``, ``all_gather``, ``reduce_scatter``, ``barrier`` with ``ReduceOp``, in place on
contiguous tensors (numpy arrays work too); :func:`ring_allreduce` is the ring algorithm
that chapter 06 builds from ``send`` and ``recv``.  Every blocking operation has a timeout
(``init_process_group(timeout=datetime.timedelta(seconds=30))``), and a rank that fails
(raises, times out, or dies) makes every other rank stop with an error that names it: see
:mod:`mini.distributed.watchdog`.  :func:`record_communication` logs every message (op,
bytes, peer, start/end, which hook issued it): :mod:`mini.distributed.events`.

From a notebook cell or a test, :func:`mini.distributed.launch.run` runs a function on p
ranks with ``mpiexec`` and returns what each rank returned.

Above this layer: ``mini.nn.parallel.DistributedDataParallel``,
``mini.utils.data.DistributedSampler``, :class:`mini.distributed.optim.ZeroRedundancyOptimizer`
and :mod:`mini.distributed.checkpoint`.
"""
from mini.distributed.process_group import (DEFAULT_TIMEOUT, ProcessGroup, Work,
                                            destroy_process_group, get_backend, get_rank,
                                            get_world_size, init_process_group, is_available,
                                            is_initialized, is_mpi_available, sub_world)
from mini.distributed.collectives import (ReduceOp, all_gather, all_gather_into_tensor,
                                          all_gather_object, all_reduce, barrier, broadcast,
                                          broadcast_object_list, irecv, isend, recv,
                                          reduce_scatter, reduce_scatter_tensor, send)
from mini.distributed.events import CommEvent, CommLog, record_communication
from mini.distributed.ring import ring_allreduce, shard_bounds
from mini.distributed.watchdog import DistributedError, DistributedTimeoutError, PeerFailure

__all__ = [
    "init_process_group", "destroy_process_group", "is_initialized", "is_available",
    "is_mpi_available", "get_rank", "get_world_size", "get_backend", "ProcessGroup", "Work",
    "DEFAULT_TIMEOUT", "sub_world", "ReduceOp", "send", "recv", "isend", "irecv", "broadcast", "all_reduce",
    "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
    "barrier", "broadcast_object_list", "all_gather_object", "ring_allreduce", "shard_bounds",
    "record_communication", "CommLog", "CommEvent", "DistributedError", "PeerFailure",
    "DistributedTimeoutError",
]
