"""Writing examples: our shard writer (default) and Beam's WriteToTFRecord (option).

The shard writer groups only ImageAnnotation records by (split, shard) and reads the image
bytes inside the DoFn that writes the shard, so no image byte is ever shuffled and memory stays
flat (measurements in DESIGN.md). A shard is written under a unique hidden name inside the
run's staging directory and renamed there when complete; the finalize step moves complete
shards into the output directory and writes manifest.json last. A retried bundle rewrites
the same bytes under the same name, so retries leave neither duplicates nor gaps.
"""
from __future__ import annotations

import uuid
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

import apache_beam as beam
from apache_beam.io.tfrecordio import _TFRecordUtil  # TFRecord framing with CRC32C
from apache_beam.metrics import Metrics

from beam_tfrecord import paths, progress, sharding
from beam_tfrecord.encode import Converted, EncodeOptions, convert, fetch
from beam_tfrecord.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.output import kill_point
from beam_tfrecord.prefetch import prefetch
from beam_tfrecord.sharding import ShardPlan

# Read-ahead of the shard writer (beam_tfrecord.prefetch): threads, and a cap on the bytes
# fetched but not yet written.
REMOTE_READ_AHEAD = 16
LOCAL_READ_AHEAD = 2
READ_AHEAD_BYTES = 64 * 1024 * 1024

# images: images written (a schema may write several records, `examples`, per image, or none);
# rejected: images of this shard/split turned down while writing. images + rejected must add
# up to the planned count (the finalize step checks, so a runner that loses records fails).
STAT_COUNTS = ("examples", "objects", "bytes", "clipped", "reoriented", "rejected", "images")


def new_stats(split: str, shard: Optional[int], path: str) -> Dict:
  stats = {"split": split, "shard": shard, "path": path, "classes": {}}
  stats.update({k: 0 for k in STAT_COUNTS})
  return stats


def add_example(stats: Dict, result: Converted) -> None:
  stats["images"] += 1
  stats["examples"] += len(result.records)
  stats["objects"] += len(result.labels)
  stats["clipped"] += result.clipped
  stats["reoriented"] += int(result.reoriented)
  for label in result.labels:
    stats["classes"][label] = stats["classes"].get(label, 0) + 1


def merge_stats(items: Iterable[Dict]) -> Dict:
  """Associative merge of stats dicts of one (split, shard); usable as a CombineFn."""
  items = list(items)
  merged = dict(items[0], classes={})
  for key in STAT_COUNTS:
    merged[key] = sum(i[key] for i in items)
  for item in items:
    for name, n in item["classes"].items():
      merged["classes"][name] = merged["classes"].get(name, 0) + n
  merged["classes"] = dict(sorted(merged["classes"].items()))
  return merged


def pick_one(uri: str, anns: Iterable[ImageAnnotation]
             ) -> Tuple[ImageAnnotation, List[ErrorRecord]]:
  """One example per image file: of several annotations of `uri`, the smallest by (source,
  source id, split, key) is used and the others are reported."""
  anns = sorted(anns, key=lambda a: (a.source, a.source_id, a.split or "", a.key))
  return anns[0], [ErrorRecord(
      source=dup.source, stage="parse", reason="duplicate_image", key=dup.key, level="warning",
      message=f"{uri} is annotated again (source id {dup.source_id!r}); the annotation "
      f"from {anns[0].source} (source id {anns[0].source_id!r}) is used") for dup in anns[1:]]


def unique_files(anns: Iterable[ImageAnnotation], errors: List[ErrorRecord]
                 ) -> List[ImageAnnotation]:
  """One annotation per file, in (key, uri) order; the others go to `errors`. The plan routes
  every annotation of a file to the shard of the one that wins (ShardPlan.route)."""
  by_uri: Dict[str, List[ImageAnnotation]] = {}
  for ann in anns:
    by_uri.setdefault(ann.uri, []).append(ann)
  kept = []
  for uri, group in by_uri.items():
    if len(group) == 1:
      kept.append(group[0])
    else:
      winner, dups = pick_one(uri, group)
      kept.append(winner)
      errors.extend(dups)
  return sorted(kept, key=lambda a: (a.key, a.uri))


def read_ahead_workers(uri: str) -> int:
  """Threads reading a shard's images ahead: object stores wait on round trips, local files
  on little (measured in benchmarks/README.md)."""
  return REMOTE_READ_AHEAD if paths.is_remote(uri) else LOCAL_READ_AHEAD


class _WriteShard(beam.DoFn):
  """((split, shard), [ImageAnnotation]) -> shard stats; errors to the 'errors' output."""

  def __init__(self, staging: str, options: EncodeOptions,
               template: str = sharding.DEFAULT_SHARD_NAME_TEMPLATE):
    self.staging = staging
    self.options = options
    self.template = template
    self.images = Metrics.counter("beam_tfrecord", "images_written")
    self.rejected = Metrics.counter("beam_tfrecord", "images_rejected")

  def process(self, element, label_map: Mapping[str, int], plan: ShardPlan):
    from apache_beam.io.filesystems import FileSystems
    (split, shard), anns = element
    name = sharding.shard_name(split, shard, plan.splits[split].num_shards)
    final = paths.join(self.staging, name)
    partial = paths.join(self.staging, f".part-{uuid.uuid4().hex}-{name}")
    stats = new_stats(split, shard, name)
    errors: List[ErrorRecord] = []
    done = progress.ShardCounter(self.staging, name)
    anns = unique_files(anns, errors)
    workers = read_ahead_workers(anns[0].uri) if anns else 0
    limit = self.options.max_image_bytes  # larger files are rejected from a stat, unread
    ahead = prefetch(anns, lambda a: fetch(a.uri, limit),
                     lambda a: min(a.size_bytes or 0, limit), workers, READ_AHEAD_BYTES)
    with FileSystems.create(partial) as f:
      for ann, fetched in ahead:
        result = convert(ann, label_map, self.options, fetched)
        done.tick()
        errors.extend(result.errors)
        if result.records is None:
          self.rejected.inc()
          stats["rejected"] += 1
          continue
        for record in result.records:  # one image's records stay together, in order
          _TFRecordUtil.write_record(f, record)
        self.images.inc()
        add_example(stats, result)
    FileSystems.rename([partial], [final])
    done.close()
    kill_point("write")
    stats["bytes"] = paths.size_of(final)
    # The file's final name (--shard-name-template; {count} is known only now). It keeps its
    # unique staging name until the finalize step moves it there.
    named = sharding.format_shard_name(self.template, split, shard, plan.splits[split].num_shards,
                                       stats["examples"])
    if named != name:
      stats["path"], stats["staged"] = named, name
    stats["classes"] = dict(sorted(stats["classes"].items()))
    yield stats
    for error in errors:
      yield beam.pvalue.TaggedOutput("errors", error)


class WriteShards(beam.PTransform):
  """PCollection[ImageAnnotation] (with split) -> (PCollection[shard stats], PCollection[errors]).

  Side inputs: label_map ({name: id}, singleton) and plan (sharding.ShardPlan, singleton).
  Writes STAGING/SPLIT-SSSSS-of-NNNNN.tfrecord, examples sorted by (key, uri), byte-identical
  across runs. A file annotated more than once is written once (the others are reported):
  the plan sends all its annotations to one shard, so this costs no shuffle of its own.
  A stats entry's `path` is the name from `template`, `staged` the staging name if different.
  """

  def __init__(self, staging: str, label_map, plan, options: EncodeOptions,
               template: str = sharding.DEFAULT_SHARD_NAME_TEMPLATE):
    super().__init__()
    self.staging, self.label_map, self.plan = staging, label_map, plan
    self.options = options
    self.template = template

  def expand(self, anns):
    written = (anns
               | "KeyByShard" >> beam.Map(
                   lambda a, plan: (plan.route(a.split, a.key, a.uri), a), self.plan)
               .with_output_types(Tuple[Tuple[str, int], ImageAnnotation])
               | "GroupByShard" >> beam.GroupByKey()
               | "Write" >> beam.ParDo(_WriteShard(self.staging, self.options, self.template),
                                       self.label_map, self.plan).with_outputs(
                                           "errors", main="stats"))
    return written.stats, written.errors


class _Encode(beam.DoFn):

  def __init__(self, options: EncodeOptions):
    self.options = options

  def process(self, ann: ImageAnnotation, label_map):
    result = convert(ann, label_map, self.options)
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
    for record in result.records:
      yield ann.split, record


class WriteWithBeamSink(beam.PTransform):
  """Same contract as WriteShards, through Beam's WriteToTFRecord (one write per split).

  Splits must be known when the graph is built. Image bytes pass through Beam's own sharding
  shuffle here, so prefer this on runners with a cheap distributed shuffle (Dataflow).
  `self.written` is the PCollection of file names written, for ordering the finalize step.
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
        .with_outputs("stats", "errors", main="examples")
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
