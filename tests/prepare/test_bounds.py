"""prepare/bounds: the backstop of sources.base.MAX_OBJECTS_PER_IMAGE for a format that does
not bound its images itself, checked where every image passes (PrepareImages' locate step),
on Beam's in-process runner."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecord.prepare.locate import PrepareImages
from beam_tfrecord.records.model import Box, ErrorRecord, ImageAnnotation, ObjectAnnotation
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE as BOUND


def _image(name: str, objects: int) -> ImageAnnotation:
  box = ObjectAnnotation("cat", Box(1.0, 2.0, 3.0, 4.0))
  return ImageAnnotation(key=name, uri=f"/d/{name}", source_id=name, source="/d/a.json",
                         objects=(box,) * objects, split="train", size_bytes=10)


def test_an_image_over_the_bound_becomes_one_error_the_rest_passes():
  full, empty = _image("full.jpg", BOUND), _image("empty.jpg", 0)
  with beam.Pipeline("FnApiRunner") as p:
    images, errors = (p | beam.Create([full, _image("big.jpg", BOUND + 1), empty])
                      | PrepareImages(None))
    assert_that(images, equal_to([full, empty]), label="Images")
    assert_that(errors | beam.Map(ErrorRecord.to_json), equal_to([
        ErrorRecord(source="/d/a.json", stage="parse", reason="too_many_objects",
                    key="big.jpg", level="image",
                    message=f"big.jpg has {BOUND + 1:,} objects, more than the {BOUND:,} one "
                    "image may have: the image is not converted").to_json()]),
        label="Errors")
