"""PrepareImages: images in batches, each located (file size) and given its split;
DedupeImages: duplicates dropped (Beam's sink)."""
from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

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


def _located(ann: ImageAnnotation, fractions: Optional[Mapping[str, float]], size: Any
             ) -> Union[ImageAnnotation, ErrorRecord]:
  """The annotation with its file size and split, or the ErrorRecord that replaces it (a
  missing file; more objects than an image may have, for a format that did not bound them).
  `size` is the file size or InputError when it was looked up already (remote images), else
  None: the annotation's own size_bytes when its source saw the file (COCO's
  paths.resolve_sized), or a stat."""
  too_many = bounds.over_the_bound(ann)  # a format that did not bound it itself
  if too_many is not None:
    return too_many
  try:
    if size is None:
      size = ann.size_bytes if ann.size_bytes is not None else paths.file_size(ann.uri)
    if isinstance(size, InputError):
      raise size
  except InputError as e:
    return e.record(ann.source, ann.key)
  if fractions:
    split = splitting.split_for_key(ann.key, fractions)
  else:
    split = ann.split or DEFAULT_SPLIT
  return ann if (size, split) == (ann.size_bytes, ann.split) else ann.replace(size_bytes=size,
                                                                             split=split)


REMOTE_LOCATE_THREADS = 16


def _size_or_error(uri: str) -> Any:
  try:
    return paths.file_size(uri)
  except InputError as e:
    return e


def locate_batch(batch: Sequence[ImageAnnotation], fractions: Optional[Mapping[str, float]],
                 remote: bool = False) -> Tuple[List[ImageAnnotation], List[ErrorRecord]]:
  """(the batch's located images, in order; its error records). `remote`: the sizes are
  looked up concurrently (on an object store each lookup is a round trip, and one at a time
  they cost as much as the reads)."""
  kill_point("parse")
  if remote:
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(REMOTE_LOCATE_THREADS) as pool:
      sizes: Sequence[Any] = list(pool.map(_size_or_error, [a.uri for a in batch]))
  else:
    sizes = [None] * len(batch)
  images: List[ImageAnnotation] = []
  errors: List[ErrorRecord] = []
  for ann, size in zip(batch, sizes):
    located = _located(ann, fractions, size)
    (errors if isinstance(located, ErrorRecord) else images).append(located)
  return images, errors


def _locate(batch: List[ImageAnnotation], fractions: Optional[Mapping[str, float]],
            remote: bool):
  images, errors = locate_batch(batch, fractions, remote)
  for error in errors:
    yield beam.pvalue.TaggedOutput("errors", error)
  if images:
    yield images


class PrepareImages(beam.PTransform):
  """PCollection[List[ImageAnnotation]] -> (PCollection[List[ImageAnnotation]], errors).

  In: a source's batches (sources/registry.read: at most BATCH_IMAGES images each, formed
  within each bundle, so a large source stays many elements across workers). Out: the same
  batches, each image with a split and a file size; images whose file is missing, or with
  more objects than any image may have (bounds.py), become ErrorRecords. `remote`: images on
  an object store, whose sizes are looked up concurrently, a batch at a time.
  """

  def __init__(self, fractions: Optional[Mapping[str, float]], remote: bool = False):
    super().__init__()
    self.fractions = dict(fractions) if fractions else None
    self.remote = remote

  def expand(self, batches):
    located = (batches
               | "Locate" >> beam.FlatMap(_locate, self.fractions, self.remote)
               .with_output_types(List[ImageAnnotation]).with_outputs("errors", main="images"))
    return located.images, located.errors


def _first_of_duplicates(ident: Tuple[str, str], anns: Iterable[ImageAnnotation]):
  kept, errors = pick_one(ident[0], anns)
  for error in errors:
    yield beam.pvalue.TaggedOutput("errors", error)
  yield kept


class DedupeImages(beam.PTransform):
  """PCollection[List[ImageAnnotation]] -> (PCollection[ImageAnnotation], errors): one
  annotation per file and split (a shuffle by both; a file in two splits is written to each).
  For Beam's sink (--sink beam); the shard writer does the same inside its own sort instead
  (shard_plan.sort_partition), which saves this shuffle."""

  def expand(self, batches):
    unique = (batches
              | "ByFile" >> beam.FlatMap(lambda batch: [((a.uri, a.split), a) for a in batch])
              | "GroupByFile" >> beam.GroupByKey()
              | "Dedupe" >> beam.FlatMapTuple(_first_of_duplicates).with_outputs(
                  "errors", main="images"))
    return unique.images, unique.errors
