"""finalize/transform.py: the renames of shards to their --shard-name-template names check the
names where they happen (not only where the template was checked)."""
from __future__ import annotations

import os

import pytest

from beam_tfrecord.finalize import transform


@pytest.mark.parametrize("final", ["../x.rec", "/abs.rec", "sub/x.rec", "", ".."])
def test_name_shards_never_renames_out_of_the_run_directory(tmp_path, final):
  run = tmp_path / "run"
  run.mkdir()
  (run / "train-00000-of-00002.tfrecord").write_bytes(b"shard 0")
  (run / "train-00001-of-00002.tfrecord").write_bytes(b"shard 1")
  stats = [{"split": "train", "shard": 0, "path": "t-0.rec",
            "staged": "train-00000-of-00002.tfrecord"},
           {"split": "train", "shard": 1,
            "path": str(tmp_path / final.lstrip("/")) if final.startswith("/") else final,
            "staged": "train-00001-of-00002.tfrecord"}]
  with pytest.raises(ValueError):
    transform._name_shards(str(run), stats)
  assert sorted(os.listdir(run)) == ["train-00000-of-00002.tfrecord",
                                     "train-00001-of-00002.tfrecord"]  # nothing moved
  assert sorted(os.listdir(tmp_path)) == ["run"]
