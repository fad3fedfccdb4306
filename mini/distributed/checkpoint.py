"""Distributed checkpoints: every rank writes its shard, rank 0 publishes a manifest
atomically, and any number of ranks can load it (``torch.distributed.checkpoint``'s
``save``/``load``).

    import mini.distributed.checkpoint as dcp
    dcp.save({"model": model.state_dict(), "optim": zero.state_dict(), "step": step},
             checkpoint_id="ckpt/")
    ...                                      # later, with any world size
    sd = {"model": model.state_dict(), "optim": zero.state_dict(), "step": 0}
    dcp.load(sd, checkpoint_id="ckpt/")      # fills sd in place
    model.load_state_dict(sd["model"]); zero.load_state_dict(sd["optim"]); step = sd["step"]

What a state dict may hold (nested dicts; the leaves):

- a **tensor** that is the same on every rank (a model's weights under DDP): rank r writes
  piece ``shard_bounds(numel, p, r)`` of it, so the ranks share the writing;
- a :class:`Shard`, this rank's piece of a flat tensor split over the ranks (ZeRO's
  optimizer state): rank r writes its piece;
- anything else (numbers, strings, lists, None): rank 0's value is saved.

Publication.  A save is a set of files in the ``checkpoint_id`` directory that share a fresh
random token: ``shard-<r>-of-<p>.<token>.mini`` per rank, ``values.<token>.mini``, and the
manifest ``manifest.json`` that lists them.  Only the manifest makes a checkpoint visible,
and it is published last and atomically (temporary file, fsync, ``os.replace``, fsync of
the directory), after every rank has reported that its shard is on disk.  A job killed in
the middle of a save (any rank, at any moment) leaves the previous manifest and every file
it names untouched: files of older saves are deleted only after the new manifest is
published.

Loading reads the manifest, and for each entry of the target state dict gathers the pieces
that overlap what this rank needs: the whole tensor for a replicated tensor, its own range
for a :class:`Shard` (so a checkpoint saved by 4 ranks loads on 2 or 3).  An entry in the
checkpoint that the target lacks is added: a tensor whole, a sharded one as this rank's
``shard_bounds`` piece.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import tempfile

import numpy as np

from mini import serialization
from mini.autograd.tensor import Tensor
from mini.distributed.collectives import all_gather_object, broadcast_object_list
from mini.distributed.process_group import _group
from mini.distributed.ring import shard_bounds

__all__ = ["save", "load", "Shard", "MANIFEST", "CheckpointError"]

MANIFEST = "manifest.json"
FORMAT = "mini-distributed-checkpoint/1"
_OURS = re.compile(r"^(shard-\d+-of-\d+|values)\.([0-9a-f]+)\.mini$")


class CheckpointError(RuntimeError):
    """A distributed checkpoint could not be saved or loaded (the message says why)."""


class Shard:
    """This rank's part ``[offset, offset + tensor.numel())`` of a flat tensor of
    ``global_numel`` elements that is split over the ranks."""

    def __init__(self, tensor: Tensor, offset: int, global_numel: int):
        if tensor.dim() != 1:
            raise ValueError(f"a Shard holds a 1-D piece, got shape {tuple(tensor.shape)}")
        if not 0 <= offset <= offset + tensor.numel() <= global_numel:
            raise ValueError(f"a Shard of {tensor.numel()} elements at offset {offset} does not "
                             f"fit in {global_numel} elements")
        self.tensor, self.offset, self.global_numel = tensor, int(offset), int(global_numel)

    @property
    def stop(self) -> int:
        return self.offset + self.tensor.numel()

    def __repr__(self):
        return f"Shard([{self.offset}, {self.stop}) of {self.global_numel}, {self.tensor.dtype})"


# --------------------------------------------------------------------------- helpers

def _flatten(tree, prefix=()):
    """(path tuple, leaf) for every leaf of nested dicts."""
    if isinstance(tree, dict):
        for k, v in tree.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"state dict keys must be str or int, got {k!r} at "
                                f"{'.'.join(map(str, prefix)) or 'the top'}")
            yield from _flatten(v, prefix + (k,))
    else:
        yield prefix, tree


def _key(path) -> str:
    return json.dumps(list(path))


def _array(t: Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach()._data.to_numpy_view()).reshape(-1)


def publish_atomically(path: str, write) -> None:
    """Write a file with ``write(f)`` so that ``path`` is either its old content or the new
    one, never a mix, even if the process is killed: temporary file in the same directory,
    flush, fsync, ``os.replace``, fsync of the directory."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
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


def _agree(ok: bool, message: str, pg, what: str) -> None:
    """Every rank learns whether every rank succeeded; if not, all raise, naming the ranks."""
    outcomes = [None] * pg.size()
    all_gather_object(outcomes, None if ok else message)
    failed = [(r, m) for r, m in enumerate(outcomes) if m is not None]
    if failed:
        detail = "; ".join(f"rank {r}: {m}" for r, m in failed)
        raise CheckpointError(f"{what} failed ({detail}); the previous checkpoint, if any, is "
                              f"still the published one")


# --------------------------------------------------------------------------- save

def save(state_dict: dict, checkpoint_id, process_group=None) -> None:
    """Save ``state_dict`` into the directory ``checkpoint_id`` (every rank calls this)."""
    pg = _group(process_group)
    rank, world = pg.rank(), pg.size()
    directory = os.fspath(checkpoint_id)
    token = [secrets.token_hex(8) if rank == 0 else None]
    broadcast_object_list(token, src=0)
    token = token[0]
    pieces, entries, values = {}, {}, {}
    for path, leaf in _flatten(state_dict):
        key = _key(path)
        if isinstance(leaf, Shard):
            arr = _array(leaf.tensor)
            pieces[key] = (leaf.offset, arr)
            entries[key] = {"kind": "shard", "numel": leaf.global_numel, "dtype": str(arr.dtype)}
        elif isinstance(leaf, Tensor):
            arr = _array(leaf)
            start, stop = shard_bounds(arr.size, world, rank)
            pieces[key] = (start, arr[start:stop])
            entries[key] = {"kind": "tensor", "shape": list(leaf.shape), "dtype": str(arr.dtype)}
        else:
            values[key] = leaf
    shard_file = f"shard-{rank:05d}-of-{world:05d}.{token}.mini"
    error = None
    try:
        if rank == 0:
            os.makedirs(directory, exist_ok=True)
        _agree(True, "", pg, "creating the checkpoint directory")
        publish_atomically(os.path.join(directory, shard_file),
                           lambda f: serialization.save(
                               {k: (start, arr) for k, (start, arr) in pieces.items()}, f))
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 -- every rank must hear about it
        error = f"{type(e).__name__}: {e}"
    _agree(error is None, error or "", pg, "writing the shards")
    # every shard is on disk: describe where each piece lives, then publish
    layout = [None] * world
    all_gather_object(layout, {k: [start, start + arr.size] for k, (start, arr) in pieces.items()})
    error = None
    if rank == 0:
        try:
            manifest = {"format": FORMAT, "world_size": world, "token": token,
                        "values_file": f"values.{token}.mini", "entries": {}}
            for key, entry in entries.items():
                entry = dict(entry)
                entry["pieces"] = [[f"shard-{r:05d}-of-{world:05d}.{token}.mini", *layout[r][key]]
                                   for r in range(world) if key in layout[r]]
                manifest["entries"][key] = entry
            publish_atomically(os.path.join(directory, manifest["values_file"]),
                               lambda f: serialization.save(values, f))
            text = json.dumps(manifest, indent=1).encode()
            publish_atomically(os.path.join(directory, MANIFEST), lambda f: f.write(text))
            _collect_garbage(directory, token)
        except Exception as e:  # noqa: BLE001
            error = f"{type(e).__name__}: {e}"
    _agree(error is None, error or "", pg, "publishing the manifest")


def _collect_garbage(directory: str, token: str) -> None:
    """Remove files of earlier saves (and temporary files of interrupted ones)."""
    for name in os.listdir(directory):
        m = _OURS.match(name)
        interrupted = name.startswith(".") and name.endswith(".tmp") and \
            name[1:].startswith((MANIFEST + ".", "shard-", "values."))
        stale = (m is not None and m.group(2) != token) or interrupted
        if stale:
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


# --------------------------------------------------------------------------- load

def read_manifest(checkpoint_id) -> dict:
    path = os.path.join(os.fspath(checkpoint_id), MANIFEST)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no distributed checkpoint at {os.fspath(checkpoint_id)!r}: "
                                f"{MANIFEST} is missing (nothing was ever published there)")
    with open(path) as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a {FORMAT} manifest")
    return manifest


class _Reader:
    """Opens each shard file at most once."""

    def __init__(self, directory):
        self.directory, self.files = directory, {}

    def piece(self, name: str, key: str):
        if name not in self.files:
            path = os.path.join(self.directory, name)
            try:
                self.files[name] = serialization.load(path)
            except FileNotFoundError:
                raise CheckpointError(f"{path} is listed in the manifest but missing: the "
                                      f"checkpoint directory was changed by hand") from None
        return self.files[name][key][1]

    def gather(self, entry: dict, key: str, start: int, stop: int) -> np.ndarray:
        out = np.empty(stop - start, dtype=np.dtype(entry["dtype"]))
        covered = 0
        for name, a, b in entry["pieces"]:
            lo, hi = max(a, start), min(b, stop)
            if lo < hi:
                out[lo - start:hi - start] = self.piece(name, key)[lo - a:hi - a]
                covered += hi - lo
        if covered != stop - start:
            raise CheckpointError(f"the checkpoint's pieces of {key} cover {covered} of the "
                                  f"{stop - start} elements [{start}, {stop})")
        return out


def _numel(entry: dict) -> int:
    if entry["kind"] == "shard":
        return int(entry["numel"])
    n = 1
    for d in entry["shape"]:
        n *= int(d)
    return n


def _set_path(tree: dict, path, value) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def _copy_into(t: Tensor, values: np.ndarray, key: str) -> None:
    if t.numel() != values.size:
        raise CheckpointError(f"{key}: the checkpoint has {values.size} elements, the target "
                              f"tensor {t.numel()} (shape {tuple(t.shape)})")
    view = t._data.to_numpy_view()
    view[...] = values.reshape(view.shape).astype(view.dtype, copy=False)
    t._data.storage.version += 1


def load(state_dict: dict, checkpoint_id, process_group=None) -> None:
    """Fill ``state_dict`` in place from the checkpoint (every rank calls this; any world
    size).  Tensors are overwritten in place, :class:`Shard` tensors with this rank's range,
    other values replaced; entries the target lacks are added."""
    pg = _group(process_group)
    directory = os.fspath(checkpoint_id)
    manifest = read_manifest(directory)
    reader = _Reader(directory)
    values = serialization.load(os.path.join(directory, manifest["values_file"]))
    wanted = dict(_flatten(state_dict))
    for key, entry in manifest["entries"].items():
        path = tuple(json.loads(key))
        target = wanted.get(path)
        if isinstance(target, Shard):
            _copy_into(target.tensor, reader.gather(entry, key, target.offset, target.stop), key)
        elif isinstance(target, Tensor):
            _copy_into(target, reader.gather(entry, key, 0, _numel(entry)), key)
        elif entry["kind"] == "shard":
            start, stop = shard_bounds(entry["numel"], pg.size(), pg.rank())
            arr = reader.gather(entry, key, start, stop)
            _set_path(state_dict, path, Shard(Tensor(arr), start, entry["numel"]))
        else:
            arr = reader.gather(entry, key, 0, _numel(entry))
            _set_path(state_dict, path, Tensor(arr.reshape(entry["shape"])))
    for key, value in values.items():
        _set_path(state_dict, tuple(json.loads(key)), value)
