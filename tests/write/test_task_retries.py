"""Retried and duplicated shard tasks (issue 30, item 10).

A runner may run one shard task again after it completed (Dataflow re-runs a failed bundle) or
twice at once (a duplicate work item). Here the real shard writer (shard_writer.write_shard;
write_indexed_shard with indexing, as --plan-from, --incremental and --append run it) writes one
task, made by the write DoFn (_WriteShard.task_of) from a real plan (the plan stage's own
_SortRuns and _PlanFn, called without a runner, on real generated images), twice in a row,
twice at once on two threads (both partial files complete before either is renamed), and twice
at once in two writer processes (shard_writer.WriterPool, as a local run writes).

A runner keeps the outputs (stats, errors) of one attempt and drops the others' (Beam's model:
an attempt's outputs are committed with its bundle); every attempt's files stay. So what must
hold is: one shard file is left, with the right records; every attempt returns the same stats
and errors, whichever the runner keeps, and they describe that file; the finalize step's
manifest entry then counts the shard once. tests/e2e/test_retried_tasks.py runs the pipeline.
"""
from __future__ import annotations

import collections
import os
import threading
from pathlib import Path

import bad_data as bd
import pytest
from conftest import check_record, expected_for, read_shard, source_id_for

from beam_tfrecord.finalize.manifest import lost_records, split_entries
from beam_tfrecord.plan import naming, shard_plan
from beam_tfrecord.plan.transform import _PlanFn, _SortRuns
from beam_tfrecord.records import packed
from beam_tfrecord.records.model import Box, ImageAnnotation, ObjectAnnotation
from beam_tfrecord.storage import catalog, record_files
from beam_tfrecord.write import shard_writer
from beam_tfrecord.write.encode import EncodeOptions
from beam_tfrecord.write.transform import Indexing, _WriteShard

pytestmark = pytest.mark.e2e  # TensorFlow reads the shards back; writer processes start

SPLIT = "train"
BAD = {"cut.jpg": "truncated_image", "empty.jpg": "empty_file"}  # rejected by the writer
WRONG_SIZE = 1  # this sample image's annotation claims a wrong width: a size_mismatch warning


def _annotations(ds):
  """What a COCO source makes of the sample (key: the file name under the image root), one
  split, plus two images the writer rejects."""
  source = str(ds.root / "instances.json")
  anns = []
  for i, im in enumerate(ds.images):
    anns.append(ImageAnnotation(
        key=im.file_name, uri=str(ds.image_dir / im.file_name), source_id=str(im.image_id),
        source=source, split=SPLIT, width=im.width + (7 if i == WRONG_SIZE else 0),
        height=im.height, size_bytes=os.path.getsize(ds.image_dir / im.file_name),
        objects=tuple(ObjectAnnotation(label, Box(x0, y0, x1, y1))
                      for label, x0, y0, x1, y1 in im.boxes)))
  (ds.image_dir / "cut.jpg").write_bytes(bd.truncated_tail(bd.jpeg((64, 48))))
  (ds.image_dir / "empty.jpg").write_bytes(b"")
  for n, name in enumerate(sorted(BAD)):
    anns.append(ImageAnnotation(
        key=name, uri=str(ds.image_dir / name), source_id=str(900 + n), source=source,
        split=SPLIT, size_bytes=os.path.getsize(ds.image_dir / name),
        objects=(ObjectAnnotation("cat", Box(1, 1, 10, 10)),)))
  return anns


def _plan(anns, runs_dir: str):
  """The plan stage without a runner: partitions sorted into runs (_SortRuns), the plan made
  from their counts (_PlanFn), one shard."""
  by_partition = collections.defaultdict(list)
  for ann in anns:
    image = packed.pack(ann)
    by_partition[shard_plan.partition_of(image[packed.HASH])].append(image)
  sort, combine = _SortRuns(runs_dir, from_files=False), _PlanFn(num_shards=1, shard_size_mb=None)
  acc = combine.create_accumulator()
  for element in sorted(by_partition.items()):
    for counts in sort.process(element):
      acc = combine.add_input(acc, counts)
  return combine.extract_output(acc)


@pytest.fixture(params=[False, True], ids=["plain", "indexed"])
def job(request, small_dataset, tmp_path):
  """(task, plan, staging, dataset): the one shard of SPLIT, as the write DoFn makes it."""
  staging, runs_dir = tmp_path / "run", tmp_path / "runs"
  staging.mkdir()
  runs_dir.mkdir()
  anns = _annotations(small_dataset)
  plan = _plan(anns, str(runs_dir))
  label_map = {name: i for i, name in enumerate(small_dataset.class_names(), start=1)}
  writer = _WriteShard(str(staging), str(runs_dir), EncodeOptions(),
                       indexing=Indexing(index=request.param))
  assert plan.tasks() == [(SPLIT, 0)]
  return writer.task_of(SPLIT, 0, label_map, plan), plan, staging, small_dataset


def _check(results, task, plan, staging: Path, ds) -> None:
  """One shard left with every record right; each attempt's stats and errors the same and
  true of that file; counted once by the finalize step."""
  name = naming.shard_name(SPLIT, 0, 1)
  index = catalog.index_name(SPLIT, 0, 1)
  assert sorted(n for n in os.listdir(staging) if not n.startswith(".")) == \
      sorted([name] + ([index] if task.index else []))
  assert not [n for n in os.listdir(staging) if n.startswith(".part-")]  # no attempt failed

  committed = results[0]
  for other in results[1:]:  # whichever attempt the runner keeps, it says the same
    assert other.stats == committed.stats
    assert other.errors == committed.errors
  stats = committed.stats
  records = read_shard(staging / name)
  good = ds.images  # the two BAD images are the rejected ones
  assert stats["bytes"] == os.path.getsize(staging / name)
  assert stats["images"] == stats["examples"] == len(records) == len(good)
  assert stats["rejected"] == len(BAD)
  assert stats["objects"] == sum(len(im.boxes) for im in good)
  assert stats["classes"] == dict(sorted(collections.Counter(
      box[0] for im in good for box in im.boxes).items()))
  label_ids = task.label_map
  by_name = {r.values["image/filename"].decode("utf-8"): r for r in records}
  assert sorted(by_name) == sorted(im.file_name for im in good)  # each image once
  for im in good:
    check_record(by_name[im.file_name], expected_for(ds, im, source_id_for("coco", im)),
                 label_ids, voc=False)
  assert collections.Counter((e.reason, e.key) for e in committed.errors) == collections.Counter(
      [(reason, key) for key, reason in BAD.items()] +
      [("size_mismatch", ds.images[WRONG_SIZE].file_name)])
  if task.index:  # the index describes the shard left: every range checked against it
    entries = catalog.read(str(staging / index))
    with record_files.EarlierShard(str(staging / name)) as f:
      for entry in entries:
        assert catalog.checked_range(f, entry) is not None, entry.identity
    assert sum(e.records for e in entries) == len(records)

  # the finalize step's view of the committed attempt: one shard, counted once
  entry = split_entries([stats], [])[SPLIT]
  assert [s.path for s in entry.shards] == [name]
  assert (entry.images, entry.examples, entry.bytes) == (len(good), len(good), stats["bytes"])
  assert lost_records(plan.splits, [stats]) == ""
  # were both attempts' stats ever kept (no Beam runner does), the run would fail, not count
  # the shard twice
  assert lost_records(plan.splits, [stats, stats]) != ""


def test_task_run_twice_in_a_row(job):
  """A retried bundle: the task completed (its shard renamed into place), then runs again."""
  task, plan, staging, ds = job
  first = shard_writer.write_shard(task)
  name = staging / naming.shard_name(SPLIT, 0, 1)
  before = name.read_bytes()
  second = shard_writer.write_shard(task)
  assert name.read_bytes() == before  # the same bytes again under the same name
  _check([second, first], task, plan, staging, ds)


def test_task_run_twice_at_once_on_two_threads(job, monkeypatch):
  """Two attempts at once: each renames only once both have written their whole partial
  file, so they truly overlap; their partial files are two files, never one."""
  task, plan, staging, ds = job
  partials = []
  barrier = threading.Barrier(2, action=lambda: partials.append(collections.Counter(
      n.split("-", 2)[2] for n in os.listdir(staging) if n.startswith(".part-"))))
  rename = shard_writer._rename

  def rename_together(src, dst):
    barrier.wait(timeout=120)
    rename(src, dst)
  monkeypatch.setattr(shard_writer, "_rename", rename_together)
  results = [None, None]

  def attempt(i):
    results[i] = shard_writer.write_shard(task)
  threads = [threading.Thread(target=attempt, args=(i,)) for i in range(2)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert None not in results  # both attempts finished
  # at each rename (the index's, then the shard's), each attempt had its own partial file
  assert partials and all(set(names.values()) == {2} for names in partials), partials
  _check(results, task, plan, staging, ds)


def test_task_run_twice_at_once_in_two_writer_processes(job):
  """The same task handed to two writer processes at once (shard_writer.WriterPool)."""
  task, plan, staging, ds = job
  pool = shard_writer.WriterPool(2)
  try:
    futures = [pool.submit(task), pool.submit(task)]
    results = [f.result(timeout=300) for f in futures]
  finally:
    pool.shutdown()
  _check(results, task, plan, staging, ds)


def test_contents_spilled_by_each_attempt(job, tmp_path):
  """With a contents folder (local runners) each attempt spills its images' digests to files
  of its own (contents.Collected) and hands none back: every attempt's files hold each good
  image's SHA-256 once, whichever attempt the runner keeps."""
  import dataclasses
  import hashlib
  import marshal

  from beam_tfrecord.storage.spill import read_records
  from beam_tfrecord.write import contents
  task, plan, staging, ds = job
  task = dataclasses.replace(task, contents_directory=str(tmp_path / "contents"))
  attempts = [shard_writer.write_shard(task), shard_writer.write_shard(task)]
  expected = sorted(
      (hashlib.sha256((ds.image_dir / im.file_name).read_bytes()).digest(), SPLIT,
       im.file_name, str(ds.image_dir / im.file_name)) for im in ds.images)
  files = set()
  for result in attempts:
    assert result.contents == []
    spilled = [tuple(marshal.loads(r)) for p, path, n in result.spilled
               for r in read_records(path)]
    assert sum(n for _, _, n in result.spilled) == len(spilled)
    assert sorted(spilled) == expected
    assert all(contents.partition_of(r[0]) == p for p, path, _ in result.spilled
               for r in map(marshal.loads, read_records(path)))
    files |= {path for _, path, _ in result.spilled}
  assert len(files) == sum(len(r.spilled) for r in attempts)  # no file shared
  _check(attempts, task, plan, staging, ds)
