"""The pipeline's image batches, from a source to the pack: lists of at most
sources.base.BATCH_IMAGES ImageAnnotations as plain tuples (records/plain's layout).

The front half (source, select, locate, pack) sees every image of the dataset. As
dataclasses, each image was built where it was joined, rebuilt on the runner's thread from
the COCO join worker's tuples (~9 us an image at a million small images, py-spy), read
attribute by attribute, copied to change its split and size, and turned back into a tuple
for the shard writer. As tuples, the join worker's output is the batch itself, Locate reads
and replaces fields by index, and Pack marshals the tuple it was given: an ImageAnnotation is
made only where a step needs its methods (SelectClasses, Beam's sink) and in the writer.
Beam codes a batch with ListCoder[FastPrimitivesCoder] (tuples, strings and numbers in C,
nothing pickled). Beam-free: the join's worker processes import it.
"""
from __future__ import annotations

from typing import Any, Iterable, List, Set, Tuple

from beam_tfrecord.records import plain
from beam_tfrecord.records.model import Box, ImageAnnotation, ObjectAnnotation

ImageBatch = List[Tuple[Any, ...]]  # the type hint of a PCollection of batches

TO_PLAIN, FROM_PLAIN = plain.record_converters(ImageAnnotation)

_IMAGE = {name: i for i, name in enumerate(plain.field_names(ImageAnnotation))}
KEY, URI, SOURCE_ID, SOURCE = _IMAGE["key"], _IMAGE["uri"], _IMAGE["source_id"], _IMAGE["source"]
OBJECTS, SPLIT, SIZE_BYTES, LABELS = (_IMAGE["objects"], _IMAGE["split"], _IMAGE["size_bytes"],
                                      _IMAGE["labels"])
LABEL = plain.field_names(ObjectAnnotation).index("label")  # of an object's tuple

# the tuples of an ImageAnnotation, ObjectAnnotation and Box, made from their fields as the
# dataclasses would be (keywords, defaults): for a source that has no other use for the records
IMAGE, OBJECT, BOX = (plain.tuple_maker(c) for c in (ImageAnnotation, ObjectAnnotation, Box))


def of(anns: Iterable[ImageAnnotation]) -> ImageBatch:
  """A batch of these annotations."""
  return [TO_PLAIN(a) for a in anns]


def annotations(batch: ImageBatch) -> List[ImageAnnotation]:
  """The batch's images as ImageAnnotations."""
  return [FROM_PLAIN(t) for t in batch]


def class_names(batch: ImageBatch) -> Set[str]:
  """Every class name the batch's images use: their objects' labels and image-level labels."""
  names = {o[LABEL] for t in batch for o in t[OBJECTS]}
  names.update(name for t in batch for name in t[LABELS])
  return names


def with_split_and_size(image: Tuple[Any, ...], split: str, size: int) -> Tuple[Any, ...]:
  """The image's tuple with this split and file size."""
  if image[SPLIT] == split and image[SIZE_BYTES] == size:
    return image
  changed = list(image)
  changed[SPLIT], changed[SIZE_BYTES] = split, size
  return tuple(changed)
