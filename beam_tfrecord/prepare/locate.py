"""PrepareImages: images in batches, each located (file size) and given its split;
DedupeImages: duplicates dropped (Beam's sink)."""
from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import apache_beam as beam

from beam_tfrecord.prepare import bounds, splitting
from beam_tfrecord.records import batches
from beam_tfrecord.records.batches import ImageBatch
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


def _located(image: Tuple, fractions: Optional[Mapping[str, float]], size: Any
             ) -> Union[Tuple, ErrorRecord]:
  """The image (a batch's tuple, records/batches) with its file size and split, or the
  ErrorRecord that replaces it (a missing file; more objects than an image may have, for a
  format that did not bound them). `size` is the file size or InputError when it was looked
  up already (remote images), else None: the image's own size_bytes when its source saw the
  file (COCO's paths.resolve_sized), or a stat."""
  too_many = bounds.over_the_bound(image)  # a format that did not bound it itself
  if too_many is not None:
    return too_many
  key = image[batches.KEY]
  try:
    if size is None:
      size = image[batches.SIZE_BYTES]
      if size is None:
        size = paths.file_size(image[batches.URI])
    if isinstance(size, InputError):
      raise size
  except InputError as e:
    return e.record(image[batches.SOURCE], key)
  if fractions:
    split = splitting.split_for_key(key, fractions)
  else:
    split = image[batches.SPLIT] or DEFAULT_SPLIT
  return batches.with_split_and_size(image, split, size)


REMOTE_LOCATE_THREADS = 16


def _size_or_error(uri: str) -> Any:
  try:
    return paths.file_size(uri)
  except InputError as e:
    return e


def locate_batch(batch: ImageBatch, fractions: Optional[Mapping[str, float]],
                 remote: bool = False) -> Tuple[ImageBatch, List[ErrorRecord]]:
  """(the batch's located images, in order; its error records). `remote`: the sizes are
  looked up concurrently (on an object store each lookup is a round trip, and one at a time
  they cost as much as the reads)."""
  kill_point("parse")
  if remote:
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(REMOTE_LOCATE_THREADS) as pool:
      sizes: Sequence[Any] = list(pool.map(_size_or_error, [t[batches.URI] for t in batch]))
  else:
    sizes = [None] * len(batch)
  images: ImageBatch = []
  errors: List[ErrorRecord] = []
  for image, size in zip(batch, sizes):
    located = _located(image, fractions, size)
    (errors if type(located) is ErrorRecord else images).append(located)
  return images, errors


def _locate(batch: ImageBatch, fractions: Optional[Mapping[str, float]], remote: bool):
  images, errors = locate_batch(batch, fractions, remote)
  for error in errors:
    yield beam.pvalue.TaggedOutput("errors", error)
  if images:
    yield images


class PrepareImages(beam.PTransform):
  """PCollection[ImageBatch] -> (PCollection[ImageBatch], errors).

  In: a source's batches (records/batches; sources/registry.read: at most BATCH_IMAGES
  images each, formed within each bundle, so a large source stays many elements across
  workers). Out: the same batches, each image with a split and a file size; images whose
  file is missing, or with more objects than any image may have (bounds.py), become
  ErrorRecords. `remote`: images on an object store, whose sizes are looked up
  concurrently, a batch at a time.
  """

  def __init__(self, fractions: Optional[Mapping[str, float]], remote: bool = False):
    super().__init__()
    self.fractions = dict(fractions) if fractions else None
    self.remote = remote

  def expand(self, images):
    located = (images
               | "Locate" >> beam.FlatMap(_locate, self.fractions, self.remote)
               .with_output_types(ImageBatch).with_outputs("errors", main="images"))
    return located.images, located.errors


def _first_of_duplicates(ident: Tuple[str, str], anns: Iterable[ImageAnnotation]):
  kept, errors = pick_one(ident[0], anns)
  for error in errors:
    yield beam.pvalue.TaggedOutput("errors", error)
  yield kept


class DedupeImages(beam.PTransform):
  """PCollection[ImageBatch] -> (PCollection[ImageAnnotation], errors): one
  annotation per file and split (a shuffle by both; a file in two splits is written to each).
  For Beam's sink (--sink beam); the shard writer does the same inside its own sort instead
  (shard_plan.sort_partition), which saves this shuffle."""

  def expand(self, images):
    unique = (images
              | "ByFile" >> beam.FlatMap(lambda batch: [
                  ((a.uri, a.split), a) for a in batches.annotations(batch)])
              | "GroupByFile" >> beam.GroupByKey()
              | "Dedupe" >> beam.FlatMapTuple(_first_of_duplicates).with_outputs(
                  "errors", main="images"))
    return unique.images, unique.errors
