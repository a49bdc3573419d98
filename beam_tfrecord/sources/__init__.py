"""Annotation sources, one module per format.

Each module holds pure parse functions (testable without Beam) and one PTransform that turns a
pipeline root into `SourceOutput(images, errors, categories)`:
  images:      PCollection[ImageAnnotation] with split (if the source has one), objects grouped
  errors:      PCollection[ErrorRecord] for every record that could not be used
  categories:  PCollection[(name, id)] when the format carries ids (COCO), else None
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import apache_beam as beam


class SourceOutput(NamedTuple):
  images: beam.PCollection
  errors: beam.PCollection
  categories: Optional[beam.PCollection] = None


def read_text(uri: str) -> bytes:
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.open(uri, compression_type="uncompressed") as f:
    return f.read()
