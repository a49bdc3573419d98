"""plan/transform._SortRuns with worker processes (the in-process runner's sort of spilled
runs, runs.sort_spilled_run in storage/processes.Pool): the same run files, counts and
duplicate errors, in the same order, as the sort on the runner's thread; small runs stay
on that thread."""
from __future__ import annotations

import filecmp
import os

import apache_beam as beam
from apache_beam.utils.windowed_value import WindowedValue

from beam_tfrecord.plan import transform as plan_transform
from beam_tfrecord.plan.shard_plan import LOCAL_RUN_SPAN
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import ImageAnnotation
from beam_tfrecord.storage import processes


def _batches(n: int = 6000):
  """Packed images in batches of 1,000: two splits, a file annotated twice in one split (a
  duplicate_image warning) and one in both splits (in_two_splits)."""
  images = []
  for i in range(n):
    split = "train" if i % 5 else "val"
    ann = ImageAnnotation(key=f"d{i % 13}/img-{i}.jpg", uri=f"/data/d{i % 13}/img-{i}.jpg",
                          source_id=str(i), source="a.json", split=split, size_bytes=100 + i)
    images.append(packed.pack(ann))
    if i % 500 == 0:
      images.append(packed.pack(ann.replace(source_id=f"again-{i}")))
    if i % 777 == 0:
      images.append(packed.pack(ann.replace(split="val" if split == "train" else "train")))
  return [images[k:k + 1000] for k in range(0, len(images), 1000)]


def _unwrapped(values):
  for v in values:
    if isinstance(v, beam.pvalue.TaggedOutput):
      v = beam.pvalue.TaggedOutput(v.tag, v.value.value if isinstance(v.value, WindowedValue)
                                   else v.value)
      yield (v.tag, repr(v.value))
    else:
      yield ("counts", repr(v.value if isinstance(v, WindowedValue) else v))


def _sorted_runs(tmp_path, name: str, count: int):
  """(outputs in order, run directory) of _SpillPartitions then _SortRuns with `count`
  processes, each DoFn through its bundle methods as a runner calls them."""
  spill_dir, runs_dir = tmp_path / name / "spill", tmp_path / name / "runs"
  spill_dir.mkdir(parents=True)
  runs_dir.mkdir()
  spill = plan_transform._SpillPartitions(str(spill_dir), LOCAL_RUN_SPAN)
  spill.start_bundle()
  for batch in _batches():
    list(spill.process(batch) or ())
  grouped = {}
  for value in spill.finish_bundle():
    run, path = value.value
    grouped.setdefault(run, []).append(path)
  sort = plan_transform._SortRuns(str(runs_dir), from_files=True, processes=count)
  sort.setup()
  sort.start_bundle()
  out = []
  for element in sorted(grouped.items()):
    out += _unwrapped(sort.process(element))
  out += _unwrapped(sort.finish_bundle())
  return out, runs_dir


def test_sorting_runs_in_processes_gives_the_threads_runs(tmp_path, monkeypatch):
  monkeypatch.setattr(plan_transform, "POOL_MIN_RUN_BYTES", 0)
  started, start = [], processes._start
  monkeypatch.setattr(processes, "_start", lambda f: started.append(f) or start(f))
  here, here_runs = _sorted_runs(tmp_path, "one", 1)
  assert started == []
  pooled, pooled_runs = _sorted_runs(tmp_path, "two", 2)
  assert started == ["beam_tfrecord.plan.runs:sort_spilled_run"] * 2
  assert pooled == here
  reasons = [text for tag, text in here if tag == "errors"]
  assert any("duplicate_image" in r for r in reasons) and any("in_two_splits" in r
                                                              for r in reasons)
  names = sorted(os.listdir(here_runs))
  assert names and sorted(os.listdir(pooled_runs)) == names
  assert all(filecmp.cmp(here_runs / n, pooled_runs / n, shallow=False) for n in names)


def test_small_runs_are_sorted_on_the_runners_thread(tmp_path, monkeypatch):
  started = []
  monkeypatch.setattr(processes, "_start", lambda f: started.append(f))
  out, _ = _sorted_runs(tmp_path, "small", 2)  # each run far below POOL_MIN_RUN_BYTES
  assert started == [] and any(tag == "counts" for tag, _ in out)
