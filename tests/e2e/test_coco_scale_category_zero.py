"""Category id 0 in use without --label-map, found by the workers (the launcher reads only the
head of an annotation file, coco.LAUNCH_HEAD_BYTES): the run still fails with exit 2 and one
line naming the file and what to do, and an earlier output stays byte-identical. Both joins:
the in-process runner's _JoinFile, and the per-section tasks (any other mode)."""
from __future__ import annotations

import hashlib
import json
import os

import bad_data as bd
import layouts
import pytest

from beam_tfrecord.errors import EXIT_USAGE
from beam_tfrecord.sources import coco

PADDING = 2_000  # images without a file, long names: ~530 kB of JSON before the use of 0
HEAD = 64 << 10  # the launcher's head, made smaller than its 4 MB (the same code reads it)


@pytest.fixture(autouse=True)
def small_head(monkeypatch):
  """The launcher reads HEAD bytes: a file past it need not be 4 MB to be past it."""
  from beam_tfrecord.sources import declared
  from beam_tfrecord.sources.coco import head
  for module in (head, declared, coco):
    monkeypatch.setattr(module, "LAUNCH_HEAD_BYTES", HEAD)


def _padded(tmp_path, use_zero: bool) -> str:
  """A COCO file larger than the launcher's head: 2 real images, PADDING images whose files
  do not exist (rejected before writing), then the annotations, the last one of category 0
  when `use_zero`, and the categories (0 among them)."""
  root = tmp_path / "images"
  ann = bd.Coco(str(root), [(0, "cells"), (1, "rbc")])
  ann.image(1, "a.jpg", bd.jpeg((64, 48)), width=64, height=48)
  ann.image(2, "b.jpg", bd.jpeg((64, 48)), width=64, height=48)
  for i in range(PADDING):
    ann.image(10 + i, f"padding/{'long-name-' * 18}{i:06d}.jpg", width=64, height=48)
  ann.ann(1, 1, [1, 2, 10, 10])
  ann.ann(2, 0 if use_zero else 1, [3, 4, 10, 10])
  path = str(tmp_path / f"instances-{use_zero}.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump(ann.document(), f)  # compact: indent would make it slow to write, not deeper
  assert os.path.getsize(path) > 4 * HEAD
  with open(path, "rb") as f:  # the use is past the head: only a worker can see it
    assert b'"category_id": 0' not in f.read(4 * HEAD)
  return path


def _snapshot(output: str) -> dict:
  """{relative path: sha256} of everything in `output` but failed runs' report folders."""
  found = {}
  for folder, dirs, names in os.walk(output):
    dirs[:] = [d for d in dirs if not d.startswith(".beam-tfrecord-run-")]
    for name in names:
      path = os.path.join(folder, name)
      with open(path, "rb") as f:
        found[os.path.relpath(path, output)] = hashlib.sha256(f.read()).hexdigest()
  return found


@pytest.mark.parametrize("local", [True, False], ids=["join_in_worker", "per_section_tasks"])
def test_category_zero_used_past_the_head_fails_the_run_and_keeps_the_output(
    tmp_path, capsys, monkeypatch, local):
  """Local runners join the file in one worker; others (forced here: build(local=False))
  parse it per section and meet the images and objects in a CoGroupByKey."""
  import functools

  from beam_tfrecord import pipeline
  monkeypatch.setattr(pipeline, "build", functools.partial(pipeline.build, local=local))
  mode = []
  output, images = str(tmp_path / "out"), str(tmp_path / "images")
  earlier = _padded(tmp_path, use_zero=False)
  run = bd.convert(["--format", "coco", "--input", earlier, "--images", images,
                    "--output", output], capsys)
  assert run.code == 0, run.stderr[-2000:]
  assert {e["reason"] for e in run.errors} >= {"background_category"}  # defined, unused
  assert len(run.examples) == 2
  before = _snapshot(output)
  assert "manifest.json" in before and any(n.endswith(".tfrecord") for n in before)

  bad = _padded(tmp_path, use_zero=True)
  run = bd.convert(["--format", "coco", "--input", bad, "--images", images, "--output", output,
                    "--overwrite", *mode], capsys)
  assert run.code == EXIT_USAGE
  last = run.stderr.strip().splitlines()[-1]
  assert last == (f"beam-tfrecord: {bad}: annotations use category id 0, which the TF OD API "
                  "reserves for background; give --label-map with an id >= 1 for that "
                  f"category's name; the earlier output in {output} is unchanged; this run's "
                  f"report (manifest, errors): {run.output}"), last
  assert "Traceback" not in run.stderr
  assert _snapshot(output) == before
  assert run.manifest["outcome"] == "usage" and run.manifest["status"].startswith(
      "failed: annotations use category id 0")
  [error] = [e for e in run.errors if e["reason"] == coco.CATEGORY_ZERO_USED]
  assert (error["key"], error["level"], error["source"]) == (
      bad, "file", f"{bad}#annotations[1]")
  assert not [e for e in run.errors if e["reason"] == "background_category"]

  label_map = layouts.write_label_map(tmp_path / "map.pbtxt", {"cells": 2, "rbc": 1})
  run = bd.convert(["--format", "coco", "--input", bad, "--images", images, "--output", output,
                    "--overwrite", "--label-map", str(label_map), *mode], capsys)
  assert run.code == 0, run.stderr[-2000:]
  by_name = {e["filename"]: e for e in run.examples}
  assert sorted(by_name) == ["a.jpg", "b.jpg"]
  assert by_name["b.jpg"]["image/object/class/label"] == [2]
  assert by_name["a.jpg"]["image/object/class/label"] == [1]
