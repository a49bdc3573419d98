"""The shard plan's transforms: partition the shard order, sort each partition into runs, plan
from the runs' counts (plan/shard_plan.py), and list the shards to write.

Nothing here holds more than one partition of images (about N / 1024) in one place, and the
plan is O(splits x partitions): see docs/architecture.md, "Scale rules".
"""
from __future__ import annotations

import concurrent.futures
import marshal
import os
import uuid
from typing import Dict, Iterable, List, Optional, Tuple

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_tfrecord.storage import progress
from beam_tfrecord.plan import compare, naming, runs, shard_plan
from beam_tfrecord.plan.previous import Previous
from beam_tfrecord.records import packed
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.processes import InOrder, Pool
from beam_tfrecord.storage.spill import Spill


class _SpillPartitions(beam.DoFn):
  """[packed.Packed] -> (partition, spill file): the images of a bundle's batches appended,
  by partition, to files of their own under `directory` (local disk); one element per file at
  the end of the bundle. Memory: spill.BUFFER_BYTES of buffered annotations."""

  def __init__(self, directory: str, span: int):
    self.directory, self.span = directory, span

  def start_bundle(self):
    self._spill = Spill(shard_plan.PARTITIONS // self.span,
                        paths.join(self.directory, uuid.uuid4().hex))
    os.makedirs(self._spill.directory, exist_ok=True)

  def process(self, batch: List[packed.Packed]):
    add, span, partition_of, dumps = (self._spill.add, self.span, shard_plan.partition_of,
                                      marshal.dumps)
    for image in batch:
      add(partition_of(image[packed.HASH]) // span, dumps(image))

  def finish_bundle(self):
    self._spill.flush()
    for p in sorted(self._spill.written):
      yield WindowedValue((p, self._spill.path(p)), MIN_TIMESTAMP, [GlobalWindow()])


def in_global_window(values: Iterable) -> Iterable:
  """Outputs for finish_bundle, which must give windowed values: each value, or a
  TaggedOutput's value, in the global window (the pipeline has no other)."""
  for value in values:
    if isinstance(value, beam.pvalue.TaggedOutput):
      yield beam.pvalue.TaggedOutput(value.tag, WindowedValue(
          value.value, MIN_TIMESTAMP, [GlobalWindow()]))
    else:
      yield WindowedValue(value, MIN_TIMESTAMP, [GlobalWindow()])


# a spilled run this large (~1,700 images) is sorted in a worker process when the runner
# offers them; a smaller one costs less than handing it over
POOL_MIN_RUN_BYTES = 256 << 10


def _done(result) -> "concurrent.futures.Future":
  future: concurrent.futures.Future = concurrent.futures.Future()
  future.set_result(result)
  return future


class _SortRuns(beam.DoFn):
  """(run, [packed.Packed] or [spill file]) -> ((split, partition), (images, records,
  bytes)), and ErrorRecords ('errors'): the images of a run's partitions (`span` of them)
  sorted, one per file and split (shard_plan.sort_partition), written as one run per split
  into `directory` (runs.sort_run). Memory: `span` partitions. With `processes` > 1 (the
  in-process runner, which runs this step on one thread), the spilled runs of a bundle are
  sorted by worker processes (storage/processes), their counts given in the runs' order.
  With `earlier` (--append: {split: (bounds, EarlierFiles)} of the earlier version), the
  side inputs label_map and checks (compare.FileCheck) say what the runs compare with;
  unchanged images keep their records only while the label map is `label_map_before`."""

  def __init__(self, directory: str, from_files: bool, span: int = 1,
               earlier: Optional[Dict[str, Tuple]] = None,
               label_map_before: Optional[Dict[str, int]] = None, processes: int = 1):
    self.directory, self.from_files, self.span = directory, from_files, span
    self.earlier = earlier or {}
    self.label_map_before = label_map_before
    self.processes = processes if from_files else 1
    self._contexts = None  # the side inputs' values are the same in every bundle

  def setup(self):
    self._pool = None

  def start_bundle(self):
    self._pending = InOrder()

  def _compare_with(self, label_map, checks) -> Dict[str, compare.CompareSplit]:
    if self._contexts is None:
      reuse = label_map is not None and self.label_map_before is not None and \
          dict(label_map) == self.label_map_before
      found = compare.checks_by_split(checks or ())
      self._contexts = {split: compare.CompareSplit(bounds, files, found.get(split, {}), reuse)
                        for split, (bounds, files) in self.earlier.items()}
    return self._contexts

  def process(self, element, label_map=None, checks=()):
    run, items = element
    items = [i for i in items if i is not None]  # --append: every run comes (_every_run)
    earlier = self._compare_with(label_map, checks)
    if not self.from_files:
      yield from self._outputs(runs.sort_run(self.directory, run, items, earlier, self.span))
      return
    task = runs.SpilledRun(self.directory, run, tuple(sorted(items)), earlier, self.span)
    if self.processes <= 1:  # nothing is ever pending then
      yield from self._outputs(runs.sort_spilled_run(task))
      return
    if self.processes > 1 and sum(map(os.path.getsize, task.files)) >= POOL_MIN_RUN_BYTES:
      if self._pool is None:
        self._pool = Pool(self.processes, "beam_tfrecord.plan.runs:sort_spilled_run",
                          what=lambda t: f"the sort of run {t.run}")
      self._pending.add(self._pool.submit(task))
    else:  # not worth a process (a test's run, a small dataset): here, in its turn
      self._pending.add(_done(runs.sort_spilled_run(task)))
    for result in self._pending.results(wait=False):
      yield from self._outputs(result)
    # the spill files are left for Finalize's remove_work (.work/): a bundle retried after a
    # failure downstream reads them again (deleting them here made every retry of this step
    # fail). Scratch disk: the packed entries, ~150 bytes an image, until the run ends.

  def finish_bundle(self):
    try:
      for result in self._pending.results(wait=True):
        yield from in_global_window(self._outputs(result))
    finally:
      self.teardown()

  def teardown(self):
    pool, self._pool = getattr(self, "_pool", None), None
    if pool is not None:
      pool.shutdown()

  @staticmethod
  def _outputs(result):
    counts, errors = result
    yield from counts
    for error in errors:
      yield beam.pvalue.TaggedOutput("errors", error)


class SortRuns(beam.PTransform):
  """PCollection[List[packed.Packed]] (batches) -> (PCollection of ((split, partition),
  (images, records, bytes)), PCollection[ErrorRecord]).

  Each image goes to its partition of the shard order (shard_plan.partition_of); each
  partition is sorted on one worker and written as one run file per split into `directory`.
  With `spill_directory` (a local disk every worker of a local runner shares), the partitions
  are gathered through files there, which keeps a local run's memory flat (the in-process
  runner holds a grouped PCollection whole); otherwise by a GroupByKey, the runner's shuffle.
  Largest element: one partition, about N / 1024 images; with the spill, a run file holds
  shard_plan.LOCAL_RUN_SPAN partitions (N / 64: local runs only).

  With `previous` (the earlier version, --append) and the side inputs `label_map` and
  `checks` (CheckEarlierFiles), its splits' runs are compared with its catalog
  (plan/compare): they hold only what changed, every run is sorted (a run with no image may
  hold removed rows), and the counts also say, for each earlier bound, how many images of its
  partition sort before it, and what changed per earlier file and base range (O(shards)).
  """

  def __init__(self, directory: str, spill_directory: Optional[str] = None,
               previous: Optional[Previous] = None, processes: int = 1,
               label_map=None, checks=None, reuse: bool = True):
    super().__init__()
    self.reuse = reuse  # False: the settings that shape records changed (every image anew)
    self.directory, self.spill_directory = directory, spill_directory
    self.processes = processes  # worker processes that sort spilled runs (_SortRuns)
    self.span = shard_plan.LOCAL_RUN_SPAN if spill_directory else 1
    self.previous = previous
    self.side_inputs = (label_map, checks) if previous is not None else ()

  def expand(self, images):
    if self.spill_directory:
      keyed = images | "Spill" >> beam.ParDo(_SpillPartitions(self.spill_directory, self.span))
    else:
      keyed = images | "ByPartition" >> beam.FlatMap(
          lambda batch: [(shard_plan.partition_of(p[packed.HASH]), p) for p in batch])
    earlier = None
    if self.previous is not None:  # every run, so that removed rows are found everywhere
      every = images.pipeline | "EveryRun" >> beam.Create(
          [(run, None) for run in range(shard_plan.PARTITIONS // self.span)])
      keyed = (keyed, every) | "AndEveryRun" >> beam.Flatten()
      earlier = {split: (p.bounds, self.previous.earlier_files(split))
                 for split, p in self.previous.splits.items()}
    grouped = keyed | ("GroupSpills" if self.spill_directory else "GroupByPartition") >> \
        beam.GroupByKey()
    sorted_ = grouped | "Sort" >> beam.ParDo(
        _SortRuns(self.directory, bool(self.spill_directory), self.span, earlier,
                  self.previous.label_map if self.previous is not None and self.reuse
                  else None, self.processes), *self.side_inputs).with_outputs("errors", main="counts")
    return sorted_.counts, sorted_.errors


class CheckEarlierFiles(beam.PTransform):
  """root -> (PCollection[compare.FileCheck], PCollection[ErrorRecord]): each shard file of
  the earlier version (--append) and its catalog partition checked once (compare.check_file).
  Spread over workers one file an element; on the in-process runner (`processes` > 1: it runs
  a step on one thread) all files in one element, checked by worker processes. Largest
  element: the list of files, O(shards), or one file's check (its damaged rows, at most
  compare.MAX_BAD_ROWS); memory: one catalog partition a worker."""

  def __init__(self, previous: Previous, processes: int = 1):
    super().__init__()
    self.previous, self.processes = previous, processes

  def expand(self, root):
    files = [(split, f) for split in sorted(self.previous.splits)
             for f in self.previous.earlier_files(split)]
    if self.processes > 1:
      tasks = root | "EarlierFiles" >> beam.Create([files])
    else:
      tasks = (root
               | "EarlierFiles" >> beam.Create([[f] for f in files])
               | "Spread" >> beam.Reshuffle())
    checked = tasks | "Check" >> beam.ParDo(_CheckFiles(self.processes)).with_outputs(
        "errors", main="checks")
    return checked.checks, checked.errors


# earlier files of this many rows in all are checked by worker processes when the runner
# offers them (each may need every record's range read: ~10 us a row); fewer, here
POOL_MIN_CHECK_ROWS = 20_000


class _CheckFiles(beam.DoFn):
  """[(split, compare.EarlierFile)] -> their compare.FileChecks, and ErrorRecords
  ('errors'); with `processes` > 1 checked by that many worker processes."""

  def __init__(self, processes: int):
    self.processes = processes

  def process(self, files):
    if self.processes > 1 and len(files) > 1 and \
        sum(max(f.rows, 0) for _, f in files) >= POOL_MIN_CHECK_ROWS:
      pool = Pool(min(self.processes, len(files)), "beam_tfrecord.plan.compare:check_task",
                  what=lambda t: f"the check of {t[1].shard}")
      try:
        results = [future.result() for future in [pool.submit(f) for f in files]]
      finally:
        pool.shutdown()
    else:
      results = [compare.check_task(f) for f in files]
    for check, errors in results:
      yield check
      for error in errors:
        yield beam.pvalue.TaggedOutput("errors", error)


class _PlanFn(beam.CombineFn):
  """((split, partition), (images, records, bytes)) -> shard_plan.ShardPlan; the accumulator
  is O(splits x partitions)."""

  def __init__(self, num_shards: Optional[int], shard_size_mb: Optional[float],
               records_per_shard: Optional[int] = None, span: int = 1,
               previous: Optional[Dict[str, shard_plan.PreviousSplit]] = None,
               append: bool = False):
    self.num_shards, self.shard_size_mb = num_shards, shard_size_mb
    self.records_per_shard, self.span = records_per_shard, span
    self.previous, self.append = previous, append

  def create_accumulator(self) -> shard_plan.PlanCounts:
    return {}

  def add_input(self, acc, element):
    return shard_plan.add_counts(acc, *element)

  def merge_accumulators(self, accs):
    accs = iter(accs)
    merged = next(accs)
    for acc in accs:
      for key, counts in acc.items():
        shard_plan.add_counts(merged, key, counts)
    return merged

  def extract_output(self, acc) -> shard_plan.ShardPlan:
    return shard_plan.make_plan(acc, self.num_shards, self.shard_size_mb, self.records_per_shard,
                                self.span, self.previous, self.append)


class PlanShards(beam.PTransform):
  """PCollection of run counts ((split, partition), (images, records, bytes)) -> PCollection
  of one shard_plan.ShardPlan.

  The plan also records each split's planned image count in the run directory for the
  progress line (progress.py), and checks the names of all shards together
  (--shard-name-template) before any is written, since the writer waits for the plan: a
  clash raises, failing the run with nothing written.
  """

  def __init__(self, num_shards: Optional[int], shard_size_mb: Optional[float], staging: str,
               records_per_shard: Optional[int] = None,
               template: str = naming.DEFAULT_SHARD_NAME_TEMPLATE, span: int = 1,
               previous: Optional[Dict[str, shard_plan.PreviousSplit]] = None,
               append: bool = False):
    super().__init__()
    self.combine = _PlanFn(num_shards, shard_size_mb, records_per_shard, span, previous,
                           append)
    self.staging, self.template = staging, template

  def expand(self, counts):
    staging, template = self.staging, self.template

    def planned(plan: shard_plan.ShardPlan) -> shard_plan.ShardPlan:
      for split, split_plan in plan.splits.items():
        progress.record_planned(staging, split, split_plan.count)
      if template != naming.DEFAULT_SHARD_NAME_TEMPLATE:
        naming.shard_names(list(plan.splits.values()), template)
      return plan

    return (counts
            | "Combine" >> beam.CombineGlobally(self.combine)
            | "Planned" >> beam.Map(planned))


def shard_tasks(_, plan: shard_plan.ShardPlan, skip: bool = False) -> Iterable[Tuple[str, int]]:
  """(split, shard) of every shard to write; none when the run is skipped (--if-changed)."""
  return [] if skip else plan.tasks()
