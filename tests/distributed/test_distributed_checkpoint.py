"""Distributed checkpoints: saved by 4 ranks, loaded by 2 and 3 with identical results; a
rank killed (SIGKILL) in the middle of a save leaves the previous checkpoint loadable."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import dist_scenarios as S
from dist_harness import run_failing, run_ranks


@pytest.fixture(scope="module")
def saved_by_4(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("dcp") / "ckpt")
    values = run_ranks(S.dcp_save, 4, directory, 3)
    return directory, values


def _equal(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("p", [2, 3])
def test_save_with_4_ranks_load_with_fewer(saved_by_4, p):
    directory, saved = saved_by_4
    manifest = json.loads(open(os.path.join(directory, "manifest.json")).read())
    assert manifest["world_size"] == 4
    shards = sorted(f for f in os.listdir(directory) if f.startswith("shard-"))
    assert [f.split(".")[0] for f in shards] == [f"shard-{r:05d}-of-00004" for r in range(4)]
    loaded = run_ranks(S.dcp_load, p, directory)
    for r in range(p):
        got, want = loaded[r]["loaded"], saved[0]["saved"]
        assert got["step"] == 3 and got["note"] == "saved"
        _equal(got["params"], want["params"])
        assert got["optim"]["step"] == want["optim"]["step"] == 3
        for key in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(got["optim"][key], want["optim"][key])
        # and the run continues exactly as the uninterrupted one did
        _equal(loaded[r]["next"], saved[0]["next"])


@pytest.mark.parametrize("victim, where", [(2, "shard"), (0, "manifest")])
def test_sigkill_during_save_leaves_the_previous_checkpoint(tmp_path, victim, where):
    directory = str(tmp_path / "ckpt")
    res = run_failing(S.dcp_save_killed, 4, directory, victim, where, op_timeout=60.0)
    assert not res.timed_out, res.stderr[-4000:]
    assert res.summary.startswith(f"rank {victim} (pid") and "SIGKILL" in res.summary
    leftovers = sorted(os.listdir(directory))
    assert any(".tmp" in f for f in leftovers), leftovers      # the interrupted save's debris
    loaded = run_ranks(S.dcp_load, 2, directory)
    want = run_ranks(S.plain_adamw_params, 1, 2)[0]               # the state after 2 steps
    for r in range(2):
        assert loaded[r]["loaded"]["step"] == 2
        _equal(loaded[r]["loaded"]["params"], want)
    # the next save succeeds and removes what the interrupted one left behind
    run_ranks(S.dcp_save, 3, directory, 1)
    names = sorted(os.listdir(directory))
    token = json.loads(open(os.path.join(directory, "manifest.json")).read())["token"]
    assert all(n == "manifest.json" or token in n for n in names), names
    assert len(names) == 1 + 3 + 1                               # manifest, 3 shards, values


def test_load_without_a_checkpoint_says_so(tmp_path):
    res = run_failing(S.dcp_load, 1, str(tmp_path / "nothing"))
    assert "FileNotFoundError" in res.summary and "manifest.json is missing" in res.summary
