"""PrepareImages: every image located (file size) and given its split; duplicates dropped."""
from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.prepare import bounds, splitting
from beam_tfrecord.records.model import DEFAULT_SPLIT
from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.layout import kill_point


def pick_one(uri: str, anns: Iterable[ImageAnnotation]
             ) -> Tuple[ImageAnnotation, List[ErrorRecord]]:
  """One example per image file: of several annotations of `uri`, the smallest by (source,
  source id, split, key) is used and the others are reported (as plan/shard_plan's
  sort_partition does for the shard writer)."""
  anns = sorted(anns, key=lambda a: (a.source, a.source_id, a.split or "", a.key))
  return anns[0], [ErrorRecord(
      source=dup.source, stage="parse", reason="duplicate_image", key=dup.key, level="warning",
      message=f"{uri} is annotated again (source id {dup.source_id!r}); the annotation "
      f"from {anns[0].source} (source id {anns[0].source_id!r}) is used") for dup in anns[1:]]


def _locate_and_assign(ann: ImageAnnotation, fractions: Optional[Mapping[str, float]],
                       size: Any = None):
  """Fill in the file size and the split, or report the missing file (one fused step).
  `size` is the file size or InputError when it was looked up already (_locate_batch), or
  the annotation's own size_bytes when its source saw the file (COCO's paths.resolve_sized)."""
  kill_point("parse")
  too_many = bounds.over_the_bound(ann)  # a format that did not bound it itself
  if too_many is not None:
    yield beam.pvalue.TaggedOutput("errors", too_many)
    return
  try:
    if size is None:
      size = ann.size_bytes if ann.size_bytes is not None else paths.file_size(ann.uri)
    if isinstance(size, InputError):
      raise size
  except InputError as e:
    yield beam.pvalue.TaggedOutput("errors", e.record(ann.source, ann.key))
    return
  if fractions:
    split = splitting.split_for_key(ann.key, fractions)
  else:
    split = ann.split or DEFAULT_SPLIT
  yield ann if (size, split) == (ann.size_bytes, ann.split) else ann.replace(size_bytes=size,
                                                                            split=split)


REMOTE_LOCATE_THREADS = 16


def _size_or_error(uri: str) -> Any:
  try:
    return paths.file_size(uri)
  except InputError as e:
    return e


def _locate_batch(batch: Sequence[ImageAnnotation], fractions: Optional[Mapping[str, float]]):
  """_locate_and_assign over a batch, the sizes looked up concurrently: on an object store
  each lookup is a round trip, and one at a time they cost as much as the reads."""
  import concurrent.futures
  with concurrent.futures.ThreadPoolExecutor(REMOTE_LOCATE_THREADS) as pool:
    sizes = list(pool.map(_size_or_error, [a.uri for a in batch]))
  for ann, size in zip(batch, sizes):
    yield from _locate_and_assign(ann, fractions, size)


def _first_of_duplicates(ident: Tuple[str, str], anns: Iterable[ImageAnnotation]):
  kept, errors = pick_one(ident[0], anns)
  for error in errors:
    yield beam.pvalue.TaggedOutput("errors", error)
  yield kept


class PrepareImages(beam.PTransform):
  """PCollection[ImageAnnotation] -> (located, split-assigned images, errors).

  In: images straight from a source. Out: every image with a split and a file size; images
  whose file is missing, or with more objects than any image may have (bounds.py), become
  ErrorRecords. With dedupe, a file annotated twice in one split
  keeps one annotation here (a shuffle by file and split: a file in two splits is written to
  each); the shard writer does the same inside its own grouping instead
  (shard_plan.ShardPlan.duplicates), which saves that shuffle.
  """

  def __init__(self, fractions: Optional[Mapping[str, float]], dedupe: bool = True,
               remote: bool = False):
    super().__init__()
    self.fractions = dict(fractions) if fractions else None
    self.dedupe = dedupe
    self.remote = remote  # images on an object store: look sizes up in concurrent batches

  def expand(self, images):
    if self.remote:
      images = images | "Batch" >> beam.BatchElements(min_batch_size=256, max_batch_size=256)
      locate = beam.FlatMap(_locate_batch, self.fractions)
    else:
      locate = beam.FlatMap(_locate_and_assign, self.fractions)
    located = (images
               | "Locate" >> locate.with_output_types(ImageAnnotation).with_outputs(
                   "errors", main="images"))
    if not self.dedupe:
      return located.images, located.errors
    unique = (located.images
              | "ByFile" >> beam.Map(lambda a: ((a.uri, a.split), a))
              | "GroupByFile" >> beam.GroupByKey()
              | "Dedupe" >> beam.FlatMapTuple(_first_of_duplicates).with_outputs(
                  "errors", main="images"))
    errors = (located.errors, unique.errors) | "Errors" >> beam.Flatten()
    return unique.images, errors
