"""What the shard writer is given: an ImageAnnotation as bytes, its routing in front.

After PrepareImages each image takes two more steps before its shard is written (the shard
plan, the grouping by shard), then goes to a writer process. As a dataclass it was encoded
twice and decoded twice on the way (nine objects rebuilt each time, ~21 us) and pickled to the
writer (~24 us), all on the runner's one thread. Packed, the plan and the routing read the
fields in front, the grouping by shard carries only the bytes (`BLOB`: the pickled plain tuple
of the annotation's fields, ~400 bytes), and the writer process rebuilds the dataclass on its
own core. The in-process runner holds every grouped record decoded at once: as nested tuples
they took 1.1 kB an image, as bytes about a third of that. Beam-free: writer processes import
it.
"""
from __future__ import annotations

import pickle
from typing import Tuple

from beam_tfrecord import plain
from beam_tfrecord.model import ImageAnnotation

# (split, key, uri, source, source_id, size_bytes, records, blob): records is what the schema
# writes for the image (--records-per-shard counts them), blob the annotation (unpack)
Packed = Tuple[str, str, str, str, str, int, int, bytes]
SPLIT, KEY, URI, SOURCE, SOURCE_ID, SIZE, RECORDS, BLOB = range(8)

_TO_PLAIN, _FROM_PLAIN = plain.record_converters(ImageAnnotation)


def pack(ann: ImageAnnotation, records: int = 1) -> Packed:
  """An annotation whose split and size are known (PrepareImages' output)."""
  return (ann.split, ann.key, ann.uri, ann.source, ann.source_id, ann.size_bytes or 0, records,
          pickle.dumps(_TO_PLAIN(ann), pickle.HIGHEST_PROTOCOL))


def unpack(blob: bytes) -> ImageAnnotation:
  """The annotation of a Packed's BLOB."""
  return _FROM_PLAIN(pickle.loads(blob))


def plan_entry(packed: Packed) -> Tuple[str, str, str, str, int, int, int]:
  """sharding.PlanEntry of one image: (source, source_id, split, key, size, copies, records)."""
  return (packed[SOURCE], packed[SOURCE_ID], packed[SPLIT], packed[KEY], packed[SIZE], 1,
          packed[RECORDS])
