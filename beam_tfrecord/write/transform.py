"""Writing examples: our shard writer (default) and Beam's WriteToTFRecord (option).

The shard writer reads a shard's annotations from the sorted runs of the plan (plan/runs.py)
and the image bytes inside the DoFn that writes the shard, so no image byte is ever shuffled
and memory stays flat (measurements in docs/architecture.md). A shard is written under a
unique hidden name inside the run's staging directory and renamed there when complete; the
finalize step moves complete shards into the output directory and writes manifest.json last.
A retried bundle rewrites the same bytes under the same name, so retries leave neither
duplicates nor gaps; so does an attempt running twice at once (Dataflow's duplicate work),
each through a partial file of its own. The runner keeps one attempt's stats and errors,
and every attempt computes the same ones (tests/write/test_task_retries.py).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Dict, Iterable, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_tfrecord.plan import compare, naming, runs
from beam_tfrecord.plan.previous import Previous
from beam_tfrecord.plan.shard_plan import ShardPlan
from beam_tfrecord.plan.transform import in_global_window
from beam_tfrecord.records.model import ImageAnnotation
from beam_tfrecord.storage import paths, processes, record_files
from beam_tfrecord.storage.processes import InOrder
from beam_tfrecord.storage.layout import kill_point
from beam_tfrecord.write import contents
from beam_tfrecord.write.contents import Tapped
from beam_tfrecord.write.encode import EncodeOptions, convert, fetch_image
from beam_tfrecord.write.shard_writer import (ShardResult, ShardTask,
                                              WriterPool, add_example,
                                              new_stats, processes_for,
                                              write_shard)


@dataclasses.dataclass(frozen=True)
class Indexing:
  """Write each shard's catalog partition (`index`: --append); with `previous` (the earlier
  version, --append), the splits whose plan it kept are written as the plan's segments
  (shard_plan.Segment; write/segments.py)."""
  index: bool = False
  previous: Optional[Previous] = None


def segment_task(task: ShardTask, split_plan, shard: int, previous: Previous,
                 checks: Dict, runs_directory: str) -> None:
  """--append: what the writer of segment `shard` of a split takes: the earlier file it is,
  with that file's check, or none (a new delta shard), and the sorted runs whose changes
  may be its own (those of the partitions its base ranges meet: plan/compare)."""
  segment = split_plan.segments[shard]
  task.segment = (segment.first, segment.end)
  task.delta = segment.delta
  task.changes = segment.changes
  bounds = previous.splits[task.split].bounds
  if segment.previous >= 0:
    task.earlier = previous.earlier_files(task.split)[segment.previous]
    task.check = checks.get((task.split, segment.previous))
    span = task.earlier.span
  else:
    span = compare.span_of(bounds, segment.first, segment.end)
  first, last = compare.partitions_of(span)
  task.change_runs = [paths.child(runs_directory, runs.changes_name(task.split, run))
                      for run in range(first // split_plan.span, last // split_plan.span + 1)]


class _WriteShard(beam.DoFn):
  """(split, shard) -> shard stats; errors to the 'errors' output.

  With processes > 1 (the in-process local runner, which runs this stage on one thread), the
  shards of a bundle are written by a shard_writer.WriterPool and emitted when the bundle
  finishes, in the order they came; otherwise each is written here. With min_images, fewer
  processes are used for a small plan (shard_writer.processes_for)."""

  def __init__(self, staging: str, runs_directory: str, options: EncodeOptions,
               template: str = naming.DEFAULT_SHARD_NAME_TEMPLATE, processes: int = 1,
               min_images: int = 0, remote_images: bool = False,
               indexing: Indexing = Indexing(), contents_directory: Optional[str] = None,
               container: record_files.Container = record_files.Container()):
    self.staging, self.runs = staging, runs_directory
    self.container = container
    self.indexing = indexing
    self.contents_directory = contents_directory
    self.remote_images = remote_images
    self.options = options
    self.template = template
    self.processes, self.min_images = processes, min_images
    self.images = Metrics.counter("beam_tfrecord", "images_written")
    self.rejected = Metrics.counter("beam_tfrecord", "images_rejected")

  def setup(self):
    self._pool = None
    # the steps before the shard plan leave their freed heap in this process: at 20,000
    # images the write stage started 24 MB lower with this (the peak: writers beside it)
    processes.release_freed_memory()

  def start_bundle(self):
    self._pending, self._decided = InOrder(), False
    self._checks = None

  def process(self, element, label_map, plan: ShardPlan, checks=()):
    if isinstance(element, list):  # every shard in one element: one bundle, one pool
      for task in element:
        yield from self.process(task, label_map, plan, checks)
      return
    task = self.task_of(*element, label_map, plan, checks)
    local = not paths.is_remote(self.staging) and not self.remote_images
    if not self._decided:  # once per bundle, from the whole plan
      self._decided = True
      # by default only for local files: a writer reading gs:// imports Beam (3.8 s), and
      # one process with read-ahead threads already waits on many round trips at once
      processes = processes_for(
          self.processes, sum(p.count for p in plan.splits.values()),
          sum(p.num_shards for p in plan.splits.values()), self.min_images
      ) if local or not self.min_images else 1
      self._pool = WriterPool(processes) if processes > 1 else None
    if self._pool is None:
      yield from self._outputs(write_shard(task))
    else:
      if local:  # every core converts: read-ahead threads would only take turns with them
        task.read_ahead = 1
      self._pending.add(self._pool.submit(task))
      # the shards written so far, in order, go on now: a result waiting for the bundle's
      # end holds its stats and errors until then
      yield from self._written(wait=False)

  def task_of(self, split: str, shard: int, label_map, plan: ShardPlan,
              checks=()) -> ShardTask:
    """The ShardTask of (split, shard): its range of the plan's runs, and with indexing what
    it compares with. The same every time it is made, so every attempt writes the same shard."""
    split_plan = plan.splits[split]
    lo, hi = split_plan.shard_range(shard)
    task = ShardTask(self.staging, split, shard, split_plan.num_shards,
                     runs.shard_runs(self.runs, split, split_plan.runs_of(shard)), lo, hi,
                     split_plan.by_records, dict(label_map), self.options, self.template,
                     remote_images=self.remote_images, index=self.indexing.index,
                     contents_directory=self.contents_directory, container=self.container)
    previous = self.indexing.previous
    if previous is not None and split_plan.segments:  # the plan kept the earlier bounds
      if self._checks is None:
        self._checks = {(c.split, c.index): c for c in checks}
      segment_task(task, split_plan, shard, previous, self._checks, self.runs)
    return task

  def _written(self, wait: bool):
    """The outputs of the pending shards, in the order they came: those written already, or
    (wait) all of them. A failed shard fails the bundle, and no shard after it is begun."""
    for result in self._pending.results(wait):
      yield from self._outputs(result)

  def finish_bundle(self):
    try:
      yield from in_global_window(self._written(wait=True))
    finally:
      self.teardown()

  def teardown(self):
    pool, self._pool = getattr(self, "_pool", None), None
    if pool is not None:
      pool.shutdown()

  def _outputs(self, result: ShardResult):
    self.images.inc(result.stats["images"])
    self.rejected.inc(result.stats["rejected"])
    kill_point("write")
    yield result.stats
    for error in result.errors:
      yield beam.pvalue.TaggedOutput("errors", error)
    for batch in contents.batches(result.contents):  # write/leakage.py
      yield beam.pvalue.TaggedOutput("contents", batch)
    for spilled in result.spilled:
      yield beam.pvalue.TaggedOutput("contents", spilled)


class WriteShards(beam.PTransform):
  """PCollection of (split, shard) -> (PCollection[shard stats], PCollection[errors]).

  Side inputs: label_map ({name: id}, singleton) and plan (shard_plan.ShardPlan, singleton).
  Writes STAGING/SPLIT-SSSSS-of-NNNNN.tfrecord from the plan's runs in `runs_directory`, in
  shard order, byte-identical across runs, runners and worker counts. Elements are spread over
  workers first (a Reshuffle) unless the runner is the in-process one (`processes` > 1 or
  `spread` False), which hands them to writer processes instead.
  A stats entry's `path` is the name from `template`, `staged` the staging name if different.
  With `indexing` (--append) each shard also gets its catalog partition
  (storage/catalog.py); with its `previous`, a kept split's shards are the plan's segments:
  earlier files kept whole (stats `kept_from`: the finalize step links them) or rewritten
  with their changes, and new delta shards (write/segments.py), given the side input
  `checks` (plan/transform.CheckEarlierFiles).
  `self.contents`: lists of (hex SHA-256, split, key, uri), one per image written from its
  bytes, a shard's in batches of at most contents.BATCH (write/leakage.FindCopies); with
  `contents_directory` (local disk every worker shares: local runners) the writers spill them
  there instead, and `self.contents` holds (partition, spill file, entries) of each file
  (contents.Collected).
  """

  def __init__(self, staging: str, runs_directory: str, label_map, plan,
               options: EncodeOptions, template: str = naming.DEFAULT_SHARD_NAME_TEMPLATE,
               processes: int = 1, min_images: int = 0, remote_images: bool = False,
               spread: bool = True, indexing: Indexing = Indexing(),
               contents_directory: Optional[str] = None, checks=None,
               container: record_files.Container = record_files.Container()):
    super().__init__()
    self.container = container  # --file-format, --index-files
    self.indexing = indexing
    self.checks = checks  # --append: AsList of the earlier files' compare.FileCheck
    self.contents_directory = contents_directory
    self.staging, self.runs = staging, runs_directory
    self.label_map, self.plan = label_map, plan
    self.options = options
    self.template = template
    self.processes, self.min_images = processes, min_images
    self.remote_images, self.spread = remote_images, spread

  def expand(self, tasks):
    if self.spread:
      tasks = tasks | "Spread" >> beam.Reshuffle()
    else:  # one element (O(shards)): the in-process runner cut the tasks into bundles of
      # one, and each bundle waited for its own shard (20,000 images: 12 shards written one
      # at a time)
      tasks = tasks | "AllShards" >> beam.combiners.ToList()
    written = (tasks
               | "Write" >> beam.ParDo(_WriteShard(
                   self.staging, self.runs, self.options, self.template, self.processes,
                   self.min_images, self.remote_images, self.indexing,
                   self.contents_directory, self.container),
                                       self.label_map, self.plan,
                                       *([self.checks] if self.checks is not None else [])
                                       ).with_outputs(
                                           "errors", "contents", main="stats"))
    self.contents = written.contents
    return written.stats, written.errors


class _Encode(beam.DoFn):

  def __init__(self, options: EncodeOptions):
    self.options = options

  def process(self, ann: ImageAnnotation, label_map):
    tapped = Tapped(functools.partial(fetch_image, ann, self.options))  # read and hashed
    result = convert(ann, label_map, self.options, tapped)
    for error in result.errors:
      yield beam.pvalue.TaggedOutput("errors", error)
    stats = new_stats(ann.split, None, "")
    if result.records is None:
      stats["rejected"] = 1
      yield beam.pvalue.TaggedOutput("stats", stats)
      return
    add_example(stats, result)
    stats["bytes"] = sum(len(r) for r in result.records)
    yield beam.pvalue.TaggedOutput("stats", stats)
    yield beam.pvalue.TaggedOutput("contents", [(tapped.digest, ann.split, ann.key, ann.uri)])
    for record in result.records:
      yield ann.split, record


class WriteWithBeamSink(beam.PTransform):
  """Same contract as WriteShards, through Beam's WriteToTFRecord (one write per split).

  Splits must be known when the graph is built. Image bytes pass through Beam's own sharding
  shuffle here, so prefer this on runners with a cheap distributed shuffle (Dataflow).
  `self.written` is the PCollection of file names written, for ordering the finalize step;
  `self.contents` as WriteShards'.
  """

  def __init__(self, output: str, label_map, splits: Iterable[str],
               num_shards: Optional[int], options: EncodeOptions):
    super().__init__()
    self.output, self.label_map = output, label_map
    self.splits = sorted(splits)
    self.num_shards = num_shards or 0
    self.options = options
    self.written = None

  def expand(self, anns):
    encoded = anns | "Encode" >> beam.ParDo(_Encode(self.options), self.label_map) \
        .with_outputs("stats", "errors", "contents", main="examples")
    self.contents = encoded.contents
    index = {split: i for i, split in enumerate(self.splits)}
    parts = encoded.examples | "BySplit" >> beam.Partition(
        lambda kv, n: index[kv[0]], len(self.splits))
    written = []
    for split, part in zip(self.splits, parts):
      written.append(part
                     | f"Values[{split}]" >> beam.Values()
                     | f"Write[{split}]" >> beam.io.WriteToTFRecord(
                         paths.join(self.output, split), file_name_suffix=".tfrecord",
                         num_shards=self.num_shards, shard_name_template="-SSSSS-of-NNNNN"))
    self.written = tuple(written) | "Written" >> beam.Flatten()
    return encoded.stats, encoded.errors
