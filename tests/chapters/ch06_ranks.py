"""Code that the chapter 06 tests run on MPI ranks.  The ranks import this module by name,
so it imports only numpy and mini (a test module would pull pytest and the notebook
tooling into every rank)."""
from __future__ import annotations

from mini.napkin import scaling

PSI = [1000, 233]     # Ψ = 1233 over 2 ranks: shards of 617 and 616


def measurements():
    return {"allreduce": scaling.measure_allreduce([1 << 10, 1 << 16], repeats=1),
            "steps": scaling.timed_steps(0.01, slow_rank=1, slowdown=4.0, steps=3),
            "plain": scaling.measure_training_memory(PSI, zero=False),
            "zero": scaling.measure_training_memory(PSI, zero=True)}


def ring_that_never_sends(tensor, group=None):
    """Every rank waits to receive first: nobody sends."""
    import mini.distributed as dist
    if dist.get_world_size() > 1:
        dist.recv(tensor.view(-1)[:1], (dist.get_rank() - 1) % dist.get_world_size())
