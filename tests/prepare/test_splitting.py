"""prepare/splitting.py: --split fractions and the hash that assigns an image to a split: the
same in every process, and through a conversion."""
from __future__ import annotations

import collections
import hashlib
import json
import math

import pytest
from conftest import (check_all_images, check_manifest, record_counts, run_cli,
                      run_python)

from beam_tfrecord.prepare import splitting


def test_parse_split_fractions_valid():
  assert splitting.parse_split_fractions("train=0.8,val=0.2") == {"train": 0.8, "val": 0.2}
  parsed = splitting.parse_split_fractions(" train = 0.7 , val=0.2,test=0.1 ")
  assert list(parsed) == ["train", "val", "test"]  # order kept: it decides the hash ranges
  assert parsed == pytest.approx({"train": 0.7, "val": 0.2, "test": 0.1})
  assert splitting.parse_split_fractions("all=1") == {"all": 1.0}
  assert splitting.parse_split_fractions("train=1.0,val=0") == {"train": 1.0, "val": 0.0}


@pytest.mark.parametrize("text,match", [
    ("train", "NAME=FRACTION"),
    ("=0.5,val=0.5", "NAME=FRACTION"),
    ("train=0.8,", "NAME=FRACTION"),
    ("train=abc,val=0.5", "bad fraction"),
    ("train=1.5,val=-0.5", "within"),
    ("train=nan", "within"),
    ("train=0.5,train=0.5", "twice"),
    ("train=0.5,val=0.4", "sum to 1"),
    ("train=0.6,val=0.6", "sum to 1"),
    ("", "NAME=FRACTION"),
])
def test_parse_split_fractions_errors(text, match):
  with pytest.raises(ValueError, match=match):
    splitting.parse_split_fractions(text)


@pytest.mark.parametrize("text", ["../escape=1.0", "a/b=1.0"])
def test_parse_split_fractions_rejects_names_that_are_not_file_names(text):
  with pytest.raises(ValueError):
    splitting.parse_split_fractions(text)


def test_hash_unit_range_and_stability():
  values = [splitting.hash_unit(f"img_{i}.jpg") for i in range(1000)]
  assert all(0.0 <= v < 1.0 for v in values)
  # defined by the key's SHA-256, so the same on every machine and Python process
  digest = hashlib.sha256("grå.jpg".encode("utf-8")).digest()
  assert splitting.hash_unit("grå.jpg") == int.from_bytes(digest[:8], "big") / 2.0**64


def test_split_for_key_close_to_fractions_on_10k_keys():
  fractions = {"train": 0.8, "val": 0.1, "test": 0.1}
  keys = [f"images/{i:06d}.jpg" for i in range(10_000)]
  counts = collections.Counter(splitting.split_for_key(k, fractions) for k in keys)
  assert set(counts) == set(fractions)
  for name, fraction in fractions.items():
    sigma = math.sqrt(fraction * (1 - fraction) / len(keys))
    assert abs(counts[name] / len(keys) - fraction) < 4 * sigma, counts
  # deterministic: same answer again, and independent of the order keys are seen in
  assert [splitting.split_for_key(k, fractions) for k in reversed(keys)] == \
      [splitting.split_for_key(k, fractions) for k in keys][::-1]


def test_split_for_key_degenerate_fractions():
  keys = [str(i) for i in range(500)]
  assert {splitting.split_for_key(k, {"train": 1.0, "val": 0.0}) for k in keys} == {"train"}
  assert {splitting.split_for_key(k, {"train": 0.0, "val": 1.0}) for k in keys} == {"val"}


def test_split_for_key_same_in_other_processes():
  """Split assignment may not depend on Python's per-process hash seed."""
  keys = [f"k{i}" for i in range(300)] + ["grå.jpg", "a/b/c.png"]
  fractions = {"train": 0.6, "val": 0.3, "test": 0.1}
  here = [splitting.split_for_key(k, fractions) for k in keys]
  code = ("import json, sys; from beam_tfrecord.prepare import splitting; "
          "keys, fr = json.loads(sys.argv[1]); "
          "print(json.dumps([splitting.split_for_key(k, fr) for k in keys]))")
  for seed in ("0", "1234"):
    result = run_python(["-c", code, json.dumps([keys, fractions])], PYTHONHASHSEED=seed)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == here


@pytest.mark.e2e
def test_split_fractions_are_deterministic(shared, dataset):
  """--split assigns by a hash of the key (overriding VOC's ImageSets); --num-shards above the
  number of images is capped at one example per shard."""
  fractions = splitting.parse_split_fractions("train=0.8,val=0.2")
  out = shared.output("split", lambda o: run_cli(
      "convert", "--format=voc", *dataset.inputs("voc"), f"--output={o}",
      "--split=train=0.8,val=0.2", "--num-shards=100", "--runner=FnApiRunner"))

  def split_of(im):
    return splitting.split_for_key(im.file_name, fractions)

  check_all_images(out, dataset, "voc", dataset.sorted_name_ids(), split_of=split_of)
  check_manifest(out, dataset, "voc", dataset.sorted_name_ids(), split_of=split_of)
  counts = collections.Counter(split_of(im) for im in dataset.images)
  assert set(counts) == {"train", "val"}
  assert any(split_of(im) != im.split for im in dataset.images)  # ImageSets really ignored
  for split, n in counts.items():
    assert len(out.shard_files[split]) == n
    assert record_counts(out, split) == [1] * n
