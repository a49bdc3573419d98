"""What every source produces (SourceOutput) and the helpers sources share."""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

from beam_tfrecord.records import batches

if TYPE_CHECKING:  # the helpers below serve Beam-free modules (detection, listings)
  import apache_beam as beam


# Objects one image may have (boxes, shapes, rows, segments). Past it the image is rejected
# with too_many_objects, and parsers stop collecting its objects there, so one hostile image
# costs O(bound) memory (600,000 LabelMe shapes took 1.46 GB; 500,000 Open Images rows for one
# image 1.18 GB). Real datasets stay far below: COCO's densest image has 93 annotations,
# SKU-110K's ~700, Open Images' a few hundred.
MAX_OBJECTS_PER_IMAGE = 10_000


# Images per element from a source to the sort's spill: one Beam element per image cost ~0.75
# us for each step it passed (a fused Map, in-process runner); a batch of a few hundred kB
# stays far below any runner's element limits, and a source of any size stays many elements.
BATCH_IMAGES = 1000


class SourceOutput(NamedTuple):
  """What a source gives. `images`: its ImageAnnotations, one per element, or batches of at
  most BATCH_IMAGES of them (records/batches) when `batched` (a source that has them in hand
  together: COCO's join); registry.read gives every source's as batches."""
  images: "beam.PCollection"
  errors: "beam.PCollection"
  categories: "Optional[beam.PCollection]" = None
  # the dataset's records/keypoints.KeypointLayout (at most one element; none without
  # keypoints): the manifest's and the card's keypoint names (sources/keypoints.py)
  keypoints: "Optional[beam.PCollection]" = None
  batched: bool = False


def in_batches(outputs, size: int = BATCH_IMAGES):
  """A DoFn's outputs with its images (a batch's tuples, records/batches) in batches of at
  most `size`, in order; every other output (tagged ones) passed on as it comes."""
  batch = []
  for out in outputs:
    if type(out) is tuple:
      batch.append(out)
      if len(batch) == size:
        yield batch
        batch = []
    else:
      yield out
  if batch:
    yield batch


def batch_images(plain: bool = False):
  """PCollection[ImageAnnotation] -> PCollection[ImageBatch]: batches (records/batches) of
  BATCH_IMAGES images, formed within each bundle; with `plain`, the images come as a
  batch's tuples already (COCO's distributed join). Typed: Beam samples element sizes for
  its metrics, and an untyped batch was sized by pickling each of its images (a sampled
  batch of 1,000 ImageAnnotations: ~12 ms); a typed batch of tuples is sized by Beam's C
  coder."""
  import apache_beam as beam

  @beam.ptransform_fn
  def BatchImages(images):  # noqa: N802 (a PTransform's name)
    batch = beam.BatchElements(min_batch_size=BATCH_IMAGES, max_batch_size=BATCH_IMAGES)
    if plain:  # tuples already
      return images | "Batch" >> batch.with_output_types(batches.ImageBatch)
    return (images | "Batch" >> batch
            | "Plain" >> beam.Map(batches.of).with_output_types(batches.ImageBatch))
  return BatchImages()  # pylint: disable=no-value-for-parameter


def image_extensions() -> frozenset:
  """File extensions (lower case, with the dot) of every format Pillow opens."""
  from PIL import Image
  return frozenset(ext.lower() for ext in Image.registered_extensions())


def is_hidden(relative: str) -> bool:
  """A file or a folder on its way starting with '.' (.DS_Store, .ipynb_checkpoints/...)."""
  return any(part.startswith(".") for part in relative.replace("\\", "/").split("/"))
