"""Writing examples: our shard writer (default) and Beam's WriteToTFRecord (option).

The shard writer groups only ImageAnnotation records by (split, shard) and reads the image
bytes inside the DoFn that writes the shard, so no image byte is ever shuffled and memory stays
flat (measurements in DESIGN.md). Each shard is written to a hidden temporary name and renamed
when complete, so a retried or killed bundle never leaves a file that looks finished.
"""
from __future__ import annotations

import collections
import posixpath
import uuid
from typing import Dict, Iterable, List, Mapping, Optional

import apache_beam as beam
from apache_beam.io.tfrecordio import _TFRecordUtil  # TFRecord framing with CRC32C
from apache_beam.metrics import Metrics

from beam_tfrecord import paths, sharding
from beam_tfrecord.encode import convert
from beam_tfrecord.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.sharding import SplitPlan

TMP_PREFIX = ".tmp-"


def _stats(split: str, shard: Optional[int], path: str) -> Dict:
  return {"split": split, "shard": shard, "path": path, "examples": 0, "objects": 0,
          "bytes": 0, "clipped": 0, "classes": collections.Counter()}


class _WriteShard(beam.DoFn):
  """((split, shard), [ImageAnnotation]) -> shard stats; errors to the 'errors' output."""

  def __init__(self, output: str, bbox_policy: str):
    self.output = output
    self.bbox_policy = bbox_policy
    self.images = Metrics.counter("beam_tfrecord", "images_written")
    self.rejected = Metrics.counter("beam_tfrecord", "images_rejected")

  def process(self, element, label_map: Mapping[str, int], plans: Mapping[str, SplitPlan]):
    from apache_beam.io.filesystems import FileSystems
    (split, shard), anns = element
    name = sharding.shard_name(split, shard, plans[split].num_shards)
    final = paths.join(self.output, name)
    tmp = paths.join(self.output, f"{TMP_PREFIX}{uuid.uuid4().hex}-{name}")
    stats = _stats(split, shard, name)
    errors: List[ErrorRecord] = []
    with FileSystems.create(tmp) as f:
      for ann in sorted(anns, key=lambda a: (a.key, a.uri)):
        result = convert(ann, label_map, self.bbox_policy)
        errors.extend(result.errors)
        if result.serialized is None:
          self.rejected.inc()
          continue
        _TFRecordUtil.write_record(f, result.serialized)
        self.images.inc()
        stats["examples"] += 1
        stats["objects"] += len(result.labels)
        stats["clipped"] += result.clipped
        stats["classes"].update(result.labels)
    FileSystems.rename([tmp], [final])
    stats["bytes"] = FileSystems.match([final])[0].metadata_list[0].size_in_bytes
    stats["classes"] = dict(sorted(stats["classes"].items()))
    yield stats
    for error in errors:
      yield beam.pvalue.TaggedOutput("errors", error)


class WriteShards(beam.PTransform):
  """PCollection[ImageAnnotation] (with split) -> (PCollection[shard stats], PCollection[errors]).

  Side inputs: label_map ({name: id}, singleton) and plans ({split: SplitPlan}). Writes
  OUTPUT/SPLIT-SSSSS-of-NNNNN.tfrecord, examples sorted by key, byte-identical across runs.
  """

  def __init__(self, output: str, label_map, plans, bbox_policy: str = "clip"):
    super().__init__()
    self.output, self.label_map, self.plans = output, label_map, plans
    self.bbox_policy = bbox_policy

  def expand(self, anns):
    written = (anns
               | "KeyByShard" >> beam.Map(
                   lambda a, plans: ((a.split, plans[a.split].shard_of(a.key)), a), self.plans)
               | "GroupByShard" >> beam.GroupByKey()
               | "Write" >> beam.ParDo(_WriteShard(self.output, self.bbox_policy),
                                       self.label_map, self.plans).with_outputs(
                                           "errors", main="stats"))
    return written.stats, written.errors


class _Encode(beam.DoFn):

  def __init__(self, bbox_policy: str):
    self.bbox_policy = bbox_policy

  def process(self, ann: ImageAnnotation, label_map):
    result = convert(ann, label_map, self.bbox_policy)
    for error in result.errors:
      yield beam.pvalue.TaggedOutput("errors", error)
    if result.serialized is not None:
      stats = _stats(ann.split, None, "")
      stats.update(examples=1, objects=len(result.labels), clipped=result.clipped,
                   bytes=len(result.serialized), classes=dict(collections.Counter(result.labels)))
      yield beam.pvalue.TaggedOutput("stats", stats)
      yield ann.split, result.serialized


class WriteWithBeamSink(beam.PTransform):
  """Same contract as WriteShards, through Beam's WriteToTFRecord (one write per split).

  Splits must be known when the graph is built. Image bytes pass through Beam's own sharding
  shuffle here, so prefer this on runners with a cheap distributed shuffle (Dataflow).
  """

  def __init__(self, output: str, label_map, splits: Iterable[str],
               num_shards: Optional[int], bbox_policy: str = "clip"):
    super().__init__()
    self.output, self.label_map = output, label_map
    self.splits = sorted(splits)
    self.num_shards = num_shards or 0
    self.bbox_policy = bbox_policy

  def expand(self, anns):
    encoded = anns | "Encode" >> beam.ParDo(_Encode(self.bbox_policy), self.label_map) \
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
    # File names the sink wrote; the manifest waits on them so it is written last.
    self.written = tuple(written) | "Written" >> beam.Flatten()
    return encoded.stats, encoded.errors
