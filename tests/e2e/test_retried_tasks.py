"""Retried and duplicated shard tasks in whole conversions (issue 30, item 10).

Dataflow re-runs a failed bundle and may run one work item twice at once; only one attempt's
outputs (a shard's stats, its errors) are kept, every attempt's files stay. Two conversions
show what that leaves, against a clean run of the same input:

- retried: BundleBasedDirectRunner retries a failed bundle (up to 4 times; the FnApiRunner
  does not retry, and its --direct_runner_bundle_repeat replays every stage, Finalize's swap
  too). Here the first bundle of the write stage fails after a shard was written whole,
  renamed into place and its stats and errors were emitted, so the retry writes it again.
- duplicated: no local runner runs one bundle twice at once, so the shard writer the write
  DoFn calls runs each task on two threads at once (both partial files written before either
  is renamed) and the DoFn emits one attempt's result, as the runner would keep one.

Each leaves the clean run's shards byte for byte, each error once, and the manifest's counts.
tests/write/test_task_retries.py runs one task twice, in a row and at once, without Beam.

The step after them, Finalize, is retried too (BundleBasedDirectRunner): after its swap into
the output was done, and when it failed part way through the swap. The retry finds the
output already this run's (or finishes the swap) instead of swapping in a manifest without
the shards the first attempt had moved, which deleted them from the output.
"""
from __future__ import annotations

import collections
import glob
import os
import shutil
import threading

import bad_data as bd
import pytest

from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.write import shard_writer
from beam_tfrecord.write import transform

GOOD = 6
WRONG_SIZE = "img_01.jpg"  # annotated 7 pixels wider than it is: a size_mismatch warning
EXPECTED_ERRORS = collections.Counter([("truncated_image", "cut.jpg"),
                                       ("size_mismatch", WRONG_SIZE)])


def _dataset(root: str) -> dict:
  """GOOD JPEGs with one or two boxes (cat, dog), one cut short (rejected by the writer)."""
  images = os.path.join(root, "images")
  coco = bd.Coco(images, [(1, "cat"), (2, "dog")])
  boxes = {}
  for i in range(GOOD):
    name, size = f"img_{i:02d}.jpg", (64 + i, 48)
    coco.image(i + 1, name, bd.jpeg(size, color=(30 * i, 90, 200)),
               size[0] + (7 if name == WRONG_SIZE else 0), size[1])
    boxes[name] = [("cat" if j == 0 else "dog", [4 + j, 4, 20, 16]) for j in range(1 + i % 2)]
    for label, bbox in boxes[name]:
      coco.ann(i + 1, 1 if label == "cat" else 2, bbox)
  coco.image(99, "cut.jpg", bd.truncated_tail(bd.jpeg((64, 48))), 64, 48)
  coco.ann(99, 1, [1, 1, 10, 10])
  return {"json": coco.write(os.path.join(root, "instances.json")), "images": images,
          "boxes": boxes}


def _convert(ds: dict, output: str, *extra: str) -> bd.Run:
  return bd.convert(["--format", "coco", "--input", ds["json"], "--images", ds["images"],
                     "--output", output, "--num-shards", "2", *extra])


def _files(output: str) -> dict:
  return {os.path.basename(p): open(p, "rb").read()
          for p in glob.glob(os.path.join(output, "*")) if os.path.isfile(p)}


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
  return _dataset(str(tmp_path_factory.mktemp("retries_data")))


@pytest.fixture(scope="module")
def clean(ds, tmp_path_factory):
  output = str(tmp_path_factory.mktemp("clean") / "out")
  return _convert(ds, output, "--writer-processes", "1")


@pytest.fixture(scope="module")
def retried(ds, tmp_path_factory):
  """The write stage's first bundle fails once, after a shard's outputs were emitted."""
  output = str(tmp_path_factory.mktemp("retried") / "out")
  emit = transform._WriteShard._outputs
  seen = {"attempts": 0, "failed": False}

  def emit_then_fail_once(self, result):
    seen["attempts"] += 1
    yield from emit(self, result)
    if not seen["failed"]:
      seen["failed"] = True
      raise RuntimeError("injected: the bundle fails after its shard was written and emitted")
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(transform._WriteShard, "_outputs", emit_then_fail_once)
    run = _convert(ds, output, "--runner=BundleBasedDirectRunner")
  return {"run": run, "seen": seen}


@pytest.fixture(scope="module")
def duplicated(ds, tmp_path_factory):
  """Every shard task written by two attempts at once; the DoFn emits the first's result."""
  output = str(tmp_path_factory.mktemp("duplicated") / "out")
  write, rename = shard_writer.write_shard, shard_writer._rename
  barrier = threading.Barrier(2)
  attempts = []

  def rename_together(src, dst):
    barrier.wait(timeout=120)
    rename(src, dst)

  def twice_at_once(task):
    results = [None, None]

    def attempt(i):
      results[i] = write(task)
    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(2)]
    for thread in threads:
      thread.start()
    for thread in threads:
      thread.join()
    assert None not in results, "an attempt failed"
    attempts.append(results)
    return results[0]
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(shard_writer, "_rename", rename_together)
    mp.setattr(transform, "write_shard", twice_at_once)
    run = _convert(ds, output, "--writer-processes", "1")
  return {"run": run, "attempts": attempts}


def _check_against(run: bd.Run, clean: bd.Run, ds: dict) -> None:
  """The clean run's output byte for byte: shards, errors, label map; the manifest's counts;
  every example's values from the input; each error once."""
  assert run.code == clean.code == 0
  got, want = _files(run.output), _files(clean.output)
  assert sorted(got) == sorted(want)
  for name in want:
    if name.endswith((".tfrecord", ".jsonl", ".pbtxt")):
      assert got[name] == want[name], f"{name} differs from the clean run's"
  assert sorted(n for n in got if n.endswith(".tfrecord")) == [
      f"train-{i:05d}-of-00002.tfrecord" for i in range(2)]
  for key in ("splits", "totals", "errors", "shard_plan"):
    assert run.manifest[key] == clean.manifest[key], key
  assert run.manifest["totals"]["images"] == GOOD
  assert collections.Counter((e["reason"], e["key"]) for e in run.errors) == EXPECTED_ERRORS
  assert run.manifest["errors"]["by_reason"] == {"size_mismatch": 1, "truncated_image": 1}
  examples = run.by_filename()  # asserts each image was written once
  assert sorted(examples) == sorted(ds["boxes"])
  for name, boxes in ds["boxes"].items():
    example = examples[name]
    with open(os.path.join(ds["images"], name), "rb") as f:
      assert example["image/encoded"] == f.read(), name
    width = 64 + int(name[4:6])
    assert [t.decode() for t in example["image/object/class/text"]] == [b[0] for b in boxes]
    assert example["image/object/bbox/xmin"] == pytest.approx(
        [b[1][0] / width for b in boxes]), name
    assert example["image/object/bbox/xmax"] == pytest.approx(
        [(b[1][0] + b[1][2]) / width for b in boxes]), name
    assert example["image/object/bbox/ymax"] == pytest.approx(
        [(b[1][1] + b[1][3]) / 48 for b in boxes]), name


def test_a_retried_write_bundle_leaves_one_shard_and_one_copy(retried, clean, ds):
  assert retried["seen"]["failed"]
  assert retried["seen"]["attempts"] > 2  # a shard was written again after its outputs went
  _check_against(retried["run"], clean, ds)


def test_shards_written_twice_at_once_leave_one_shard_and_one_copy(duplicated, clean, ds):
  assert len(duplicated["attempts"]) == 2  # both shard tasks, each by two attempts
  for first, second in duplicated["attempts"]:
    assert (first.stats, first.errors) == (second.stats, second.errors)
  _check_against(duplicated["run"], clean, ds)



@pytest.mark.parametrize("where", ["after its swap", "within its swap"])
def test_a_retried_finalize_leaves_the_output_whole(where, ds, clean, tmp_path):
  """A conversion in place (an earlier output there) whose Finalize fails once, on a runner
  that retries it: after outputs.commit returned, or once every file had moved in (the
  journal and the run directory still there)."""
  failed = []

  def fail_once():
    if not failed:
      failed.append(where)
      raise RuntimeError(f"injected: Finalize fails {where}")
  if where == "after its swap":
    commit = outputs.commit
    name, patched = "commit", lambda *args, **kwargs: (commit(*args, **kwargs), fail_once())
  else:
    name, patched = "kill_point", lambda point: point == "swap-manifest" and fail_once()
  output = str(tmp_path / "out")
  shutil.copytree(clean.output, output)  # the earlier output: the same sources' conversion
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(outputs, name, patched)
    run = _convert(ds, output, "--overwrite", "--runner=BundleBasedDirectRunner")
  assert failed
  _check_against(run, clean, ds)
  assert sorted(run.manifest["files"]) == sorted(_files(run.output))
  assert not [n for n in os.listdir(run.output) if n.startswith(".beam-tfrecord")]
