"""The complete training state, saved atomically: exercises ``05.save_checkpoint`` and
``05.load_checkpoint``.

To continue a run as if it had never stopped, the next step must see exactly what it would
have seen.  That is more than the weights:

- the model's parameters *and buffers* (BatchNorm's running statistics);
- the optimizer's state (Adam's m and v per parameter, its step count) and options;
- the learning-rate schedule's position;
- the random streams (dropout masks, and anything else drawn from mini's generator);
- the data order and the position in it (which batch comes next);
- the step counter.

Publication must be atomic: a reader (or the restarted job) sees either the previous
checkpoint or the new one, never half a file.  So: write to a temporary file in the same
directory, flush and ``fsync`` it, ``os.replace`` it onto the final name (an atomic rename
within one file system), then ``fsync`` the directory so that the rename itself is durable.
"""
from __future__ import annotations

import os
import tempfile

import mini
from mini import serialization
from mini.exercises import exercise

__all__ = ["save_checkpoint", "load_checkpoint", "CHECKPOINT_KEYS"]

CHECKPOINT_KEYS = ("step", "model", "optimizer", "scheduler", "loader", "rng")


@exercise("05.save_checkpoint")
def save_checkpoint(path, model, optimizer, scheduler=None, loader=None, step=0):
    """Publish the complete training state at ``path``, atomically.

    The file holds one dict with the keys ``"step"`` (int), ``"model"``, ``"optimizer"``,
    ``"scheduler"`` and ``"loader"`` (each object's ``state_dict()``, or None when the
    object is None) and ``"rng"`` (``mini.get_rng_state()``), written with
    ``serialization.save(state, f)``.  Write it to a temporary file in the directory of
    ``path``, flush and fsync it, ``os.replace`` it onto ``path``, then fsync the
    directory.  If anything fails, ``path`` keeps its previous content and the temporary
    file is removed.  Returns None.
    """
    ### BEGIN SOLUTION
    state = {
        "step": int(step),
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "loader": None if loader is None else loader.state_dict(),
        "rng": mini.get_rng_state(),
    }
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            serialization.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    ### END SOLUTION


@exercise("05.load_checkpoint")
def load_checkpoint(path, model, optimizer, scheduler=None, loader=None):
    """Restore what :func:`save_checkpoint` wrote into existing objects (built the same
    way as the saved ones): the model, the optimizer, the scheduler and the loader (when
    given), and mini's random stream.  Returns the saved step (int)."""
    ### BEGIN SOLUTION
    state = serialization.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    if loader is not None:
        loader.load_state_dict(state["loader"])
    mini.set_rng_state(state["rng"])
    return int(state["step"])
    ### END SOLUTION
