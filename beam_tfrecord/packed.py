"""What the shard writer is given: an ImageAnnotation as a plain tuple, its routing in front.

After PrepareImages each image takes two more steps before its shard is written (the shard
plan, the grouping by shard), then goes to a writer process. As a dataclass it was encoded
twice and decoded twice on the way (nine objects rebuilt each time, ~21 us) and pickled to the
writer (~24 us), all on the runner's one thread; as a tuple of primitives Beam's C coder and
pickle take a few microseconds, and the writer rebuilds the dataclass on its own core.
Beam-free: writer processes import it.
"""
from __future__ import annotations

from typing import Any, Tuple

from beam_tfrecord import plain
from beam_tfrecord.model import ImageAnnotation

# (split, key, uri, source, source_id, size_bytes, records, the annotation's plain tuple):
# records is what the schema writes for the image (--records-per-shard counts them)
Packed = Tuple[str, str, str, str, str, int, int, Tuple[Any, ...]]
SPLIT, KEY, URI, SOURCE, SOURCE_ID, SIZE, RECORDS, FIELDS = range(8)

_TO_PLAIN, _FROM_PLAIN = plain.record_converters(ImageAnnotation)


def pack(ann: ImageAnnotation, records: int = 1) -> Packed:
  """An annotation whose split and size are known (PrepareImages' output)."""
  return (ann.split, ann.key, ann.uri, ann.source, ann.source_id, ann.size_bytes or 0, records,
          _TO_PLAIN(ann))


def unpack(packed: Packed) -> ImageAnnotation:
  return _FROM_PLAIN(packed[FIELDS])


def plan_entry(packed: Packed) -> Tuple[str, str, str, str, int, int, int]:
  """sharding.PlanEntry of one image: (source, source_id, split, key, size, copies, records)."""
  return (packed[SOURCE], packed[SOURCE_ID], packed[SPLIT], packed[KEY], packed[SIZE], 1,
          packed[RECORDS])
