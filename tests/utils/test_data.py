"""DataLoader (batching, seeded shuffling, resume, workers), datasets, the IDX reader."""
from __future__ import annotations

import gzip
import os

import numpy as np
import pytest

import mini
from mini.utils.data import DataLoader, Dataset, TensorDataset, random_split
from mini.utils.data.datasets import MNIST, digits_split, load_digits, read_idx, write_idx


def _ds(n=10):
    x = mini.tensor(np.arange(n * 2, dtype=np.float32).reshape(n, 2))
    y = mini.tensor(np.arange(n, dtype=np.int64))
    return TensorDataset(x, y)


def _ids(loader):
    return [b[1].numpy().tolist() for b in loader]


def test_batching_drop_last_and_len():
    dl = DataLoader(_ds(10), batch_size=4)
    assert len(dl) == 3
    batches = list(dl)
    assert [tuple(b[0].shape) for b in batches] == [(4, 2), (4, 2), (2, 2)]
    assert batches[0][1].dtype == mini.int64
    dl = DataLoader(_ds(10), batch_size=4, drop_last=True)
    assert len(dl) == 2 and _ids(dl) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_arguments_mini_does_not_implement_raise_instead_of_being_ignored():
    with pytest.raises(NotImplementedError, match="persistent_workers"):
        DataLoader(_ds(), num_workers=2, persistent_workers=True)
    with pytest.raises(ValueError, match="num_workers > 0"):
        DataLoader(_ds(), persistent_workers=True)
    with pytest.raises(NotImplementedError, match="batch_sampler"):
        DataLoader(_ds(), batch_sampler=[[0, 1]])
    with pytest.raises(NotImplementedError, match="pin_memory_device"):
        DataLoader(_ds(), pin_memory=True, pin_memory_device="cuda")
    with pytest.raises(ValueError, match="timeout"):
        DataLoader(_ds(), timeout=-1)
    # accepted, and documented as changing nothing: the same batches as without them
    plain = _ids(DataLoader(_ds(), batch_size=3))
    assert _ids(DataLoader(_ds(), batch_size=3, pin_memory=True, in_order=False)) == plain


def test_shuffle_is_seeded_and_differs_between_epochs():
    a = DataLoader(_ds(20), batch_size=5, shuffle=True, generator=7)
    b = DataLoader(_ds(20), batch_size=5, shuffle=True, generator=7)
    e0, e1 = _ids(a), _ids(a)
    assert e0 == _ids(b) and e1 == _ids(b)
    assert e0 != e1
    assert sorted(sum(e0, [])) == list(range(20))
    mini.manual_seed(1)
    c = _ids(DataLoader(_ds(20), batch_size=5, shuffle=True))
    mini.manual_seed(1)
    assert c == _ids(DataLoader(_ds(20), batch_size=5, shuffle=True))


def test_resume_mid_epoch_gives_the_same_batches():
    full = DataLoader(_ds(23), batch_size=4, shuffle=True, generator=3)
    ref = _ids(full) + _ids(full)          # two epochs
    dl = DataLoader(_ds(23), batch_size=4, shuffle=True, generator=3)
    it = iter(dl)
    seen = [next(it)[1].numpy().tolist() for _ in range(3)]
    state = dl.state_dict()
    assert state["epoch"] == 0 and state["position"] == 3
    resumed = DataLoader(_ds(23), batch_size=4, shuffle=True, generator=99)
    resumed.load_state_dict(state)
    rest = _ids(resumed) + _ids(resumed)
    assert seen + rest == ref
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(_ds(23), batch_size=5).load_state_dict(state)


def test_collate_fn_dicts_numbers_and_custom():
    class D(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.full(3, i, np.float32), "y": i, "w": float(i) / 2, "s": str(i)}

    b = next(iter(DataLoader(D(), batch_size=5)))
    assert tuple(b["x"].shape) == (5, 3) and b["y"].dtype == mini.int64
    assert b["w"].dtype == mini.float64 and b["s"] == ["0", "1", "2", "3", "4"]
    got = list(DataLoader(D(), batch_size=2, collate_fn=lambda s: [d["y"] for d in s]))
    assert got == [[0, 1], [2, 3], [4]]


def _children():
    import multiprocessing as mp
    return [p for p in mp.active_children()]


def test_workers_give_the_same_batches_in_order_and_shut_down():
    ds = _ds(50)
    single = DataLoader(ds, batch_size=4, shuffle=True, generator=5)
    multi = DataLoader(ds, batch_size=4, shuffle=True, generator=5, num_workers=2,
                       prefetch_factor=2)
    assert _ids(multi) == _ids(single)
    assert _children() == []
    it = iter(multi)                       # stop early: workers must still go away
    next(it)
    it.close()
    assert _children() == []


class _Failing(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == 5:
            raise KeyError("sample 5 is broken")
        return np.zeros(2, np.float32)


def test_worker_exception_is_reported_with_its_traceback():
    dl = DataLoader(_Failing(), batch_size=2, num_workers=2)
    with pytest.raises(RuntimeError, match="sample 5 is broken"):
        list(dl)
    assert _children() == []


def test_random_split():
    a, b = random_split(_ds(10), [7, 3], generator=0)
    assert len(a) == 7 and len(b) == 3
    ids = [int(a[i][1].item()) for i in range(7)] + [int(b[i][1].item()) for i in range(3)]
    assert sorted(ids) == list(range(10))


def test_load_digits_and_split():
    x, y = load_digits()
    assert x.shape == (1797, 1, 8, 8) and x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert y.shape == (1797,) and set(np.unique(y)) == set(range(10))
    train, test = digits_split(0.2, seed=0)
    assert len(train) + len(test) == 1797 and len(test) == 359


@pytest.mark.parametrize("gz", [False, True])
def test_idx_reader_and_mnist(tmp_path, gz):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(6, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=6, dtype=np.uint8)
    for name, arr in [("train-images-idx3-ubyte", images), ("train-labels-idx1-ubyte", labels)]:
        path = tmp_path / name
        write_idx(path, arr)
        if gz:
            data = path.read_bytes()
            os.remove(path)
            with gzip.open(str(path) + ".gz", "wb") as f:
                f.write(data)
    raw = (tmp_path / "train-images-idx3-ubyte").read_bytes() if not gz else None
    if raw is not None:  # the header is the standard one: magic 0x00000803, then 6, 28, 28
        assert raw[:16] == bytes([0, 0, 8, 3, 0, 0, 0, 6, 0, 0, 0, 28, 0, 0, 0, 28])
    ds = MNIST(tmp_path, train=True)
    assert len(ds) == 6
    img, lab = ds[2]
    np.testing.assert_allclose(img.numpy(), images[2][None] / 255.0, rtol=1e-6)
    assert int(lab.item()) == labels[2]
    with pytest.raises(FileNotFoundError):
        MNIST(tmp_path, train=False)
    f32 = rng.normal(size=(3, 4)).astype(np.float32)
    write_idx(tmp_path / "f", f32)
    np.testing.assert_array_equal(read_idx(tmp_path / "f"), f32)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes((tmp_path / "f").read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated"):
        read_idx(tmp_path / "short")
