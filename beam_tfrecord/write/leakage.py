"""FindCopies: the written images grouped by their bytes' SHA-256, across and within splits
(write/contents.py says what is reported). One grouping by digest; no list of every digest
anywhere.

The writer hands them over in lists (contents.batches: a Beam element per image cost each
image a few us of the runner's own code), split here into one entry per image.
- Distributed runners: one CombinePerKey keyed by the 32-byte digest. Its largest element is
  one content's copies, bounded: at most contents.MAX_NAMED names per split, the rest counted
  (O(splits x MAX_NAMED) whatever the dataset). The shuffle carries one (digest, split, key,
  uri) per image, ~100-200 bytes (combiner lifting merges copies before it), about a tenth of
  a percent of a dataset of 100 KB images; the digest itself costs nothing more: the writer
  hashes each file as it reads it.
- Local runners (the in-process runner holds what it groups in memory): the digests are
  spilled by their first byte into contents.LOCAL_PARTITIONS partition files on local disk
  (the plan's spill directory), by the shard writers themselves (WriteShards'
  contents_directory) or here, and each partition is read and sorted alone: memory
  O(N / 64) entries.
"""
from __future__ import annotations

import itertools
import marshal
import operator
import os
from typing import List, Optional

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_tfrecord.storage.spill import read_records
from beam_tfrecord.write import contents


class _CopiesFn(beam.CombineFn):
  """(split, key, uri) of one digest -> contents.Copies (bounded: contents.MAX_NAMED names
  per split)."""

  def create_accumulator(self):
    return contents.new()

  def add_input(self, copies, copy):
    return contents.add(copies, tuple(copy))

  def merge_accumulators(self, many):
    return contents.merge(many)

  def extract_output(self, copies):
    return copies


def _reported(digest: bytes, copies: contents.Copies):
  """ErrorRecords, and ('counts', (key, n)) for each kind of extra copy, of one content."""
  if sum(count for count, _ in copies.values()) < 2:
    return
  records, counts = contents.report(digest.hex(), copies)
  yield from records
  for reason, n in counts.items():
    yield beam.pvalue.TaggedOutput("counts", (contents.PREFIX + reason, n))


class _SpillContents(beam.DoFn):
  """Lists of (hex digest, split, key, uri) -> contents.Spilled (partition, spill file,
  entries) at the end of each bundle: the bundle's digests appended to its own files under
  `directory`, by the digest's first byte (contents.Collected, as the shard writers spill
  theirs). Memory: spill.BUFFER_BYTES."""

  def __init__(self, directory: str):
    self.directory = directory

  def start_bundle(self):
    self._found: dict = {}  # {split: contents.Collected}

  def process(self, batch: List[contents.Content]):
    for digest, split, key, uri in batch:
      found = self._found.get(split)
      if found is None:
        found = self._found[split] = contents.Collected(split, self.directory)
      found.add(digest, key, uri)

  def finish_bundle(self):
    for found in self._found.values():
      for spilled in found.spilled():
        yield WindowedValue(spilled, MIN_TIMESTAMP, [GlobalWindow()])


_DIGEST = operator.itemgetter(0)


def _report_partition(element):
  """(partition, [spill file]) -> what _reported yields for each of its contents with
  several copies. The files are left for Finalize's remove_work, as SortRuns leaves its own:
  a bundle retried after a failure downstream reads them again (scratch disk: ~100 bytes an
  image until the run ends)."""
  _, files = element
  # by digest only (a content's Copies do not depend on the order its copies come in), and
  # a content met once, most of them, is passed over without building its Copies
  entries = sorted((marshal.loads(r) for path in sorted(files) for r in read_records(path)),
                   key=_DIGEST)
  for digest, group in itertools.groupby(entries, key=_DIGEST):
    first = next(group)
    second = next(group, None)
    if second is None:
      continue
    copies = contents.new()
    for entry in itertools.chain((first, second), group):
      contents.add(copies, entry[1:])
    yield from _reported(digest, copies)


def contents_directory(spill_directory: str) -> str:
  """Where a local run's contents are spilled, by the shard writers or FindCopies."""
  return os.path.join(spill_directory, "contents")


class FindCopies(beam.PTransform):
  """PCollection of lists of (hex SHA-256, split, key, uri), one entry per written image ->
  (PCollection[ErrorRecord] (warnings), PCollection of (count key, n)): the counts of extra
  copies by kind (contents.PREFIX + reason) and of the images compared (contents.IMAGES),
  for the manifest's `leakage`. `spill_directory`: a local disk every worker shares (local
  runners), else the runner's shuffle. `spilled`: the input is contents.Spilled (partition,
  spill file, entries) of files already spilled under contents_directory(spill_directory)
  (WriteShards' writers spill their own), not lists."""

  def __init__(self, spill_directory: Optional[str] = None, spilled: bool = False):
    super().__init__()
    self.spill_directory, self.spilled = spill_directory, spilled
    if spilled and not spill_directory:
      raise ValueError("spilled contents need the spill directory they are in")

  def expand(self, digests):
    if self.spill_directory:
      if not self.spilled:
        digests = digests | "SpillDigests" >> beam.ParDo(
            _SpillContents(contents_directory(self.spill_directory)))
      count = lambda spilled: spilled[2]  # noqa: E731
    else:
      count = len
    compared = (digests
                | "Compared" >> beam.Map(count)
                | "ComparedSum" >> beam.CombineGlobally(sum)
                | "ComparedKey" >> beam.Map(lambda n: (contents.IMAGES, n)))
    if self.spill_directory:
      found = (digests
               | "ByPartition" >> beam.Map(lambda spilled: (spilled[0], spilled[1]))
               | "GroupSpills" >> beam.GroupByKey()
               | "Report" >> beam.FlatMap(_report_partition).with_outputs(
                   "counts", main="errors"))
    else:
      found = (digests
               | "ByDigest" >> beam.FlatMap(
                   lambda batch: [(bytes.fromhex(c[0]), (c[1], c[2], c[3])) for c in batch])
               | "Copies" >> beam.CombinePerKey(_CopiesFn())
               | "Report" >> beam.FlatMapTuple(_reported).with_outputs(
                   "counts", main="errors"))
    counts = (found.counts, compared) | "LeakageCounts" >> beam.Flatten()
    return found.errors, counts
