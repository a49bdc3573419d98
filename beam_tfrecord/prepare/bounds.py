"""The backstop of sources.base.MAX_OBJECTS_PER_IMAGE: no image with more objects goes on.

Every format bounds its images' objects where it parses them (so that one hostile image costs
O(bound) memory); this is the check for a format that does not: such an image becomes a
too_many_objects error in PrepareImages' locate step (prepare/locate.py, which every image
passes once: no transform of its own, so no per-image Beam step more), before it is packed,
sorted and written as one huge record. Pure and Beam-free.
"""
from __future__ import annotations

from typing import Optional, Tuple

from beam_tfrecord.records import batches
from beam_tfrecord.records.model import ErrorRecord
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE


def over_the_bound(image: Tuple) -> Optional[ErrorRecord]:
  """The too_many_objects error of an image (a batch's tuple, records/batches) with more
  objects than the bound, else None."""
  count = len(image[batches.OBJECTS])
  if count <= MAX_OBJECTS_PER_IMAGE:
    return None
  key = image[batches.KEY]
  return ErrorRecord(
      source=image[batches.SOURCE], stage="parse", reason="too_many_objects", key=key,
      level="image", message=f"{key} has {count:,} objects, more than the "
      f"{MAX_OBJECTS_PER_IMAGE:,} one image may have: the image is not converted")
