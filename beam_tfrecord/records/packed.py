"""What the shard writer is given: an ImageAnnotation as bytes, its routing in front.

After PrepareImages each image takes two more steps before its shard is written (the shard
plan, the grouping by shard), then goes to a writer process. As a dataclass it was encoded
twice and decoded twice on the way (nine objects rebuilt each time, ~21 us) and pickled to the
writer (~24 us), all on the runner's one thread. Packed, the plan and the routing read the
fields in front, the grouping by shard carries only the bytes (`BLOB`: the plain tuple of the
annotation's fields in marshal's format, ~340 bytes), and the writer process rebuilds the
dataclass on its own core. The in-process runner holds the grouped records twice, encoded:
marshal's bytes are 16% smaller than pickle's for these tuples, at the same speed (20,000
images: peak 372 -> 363 MB). marshal's format belongs to one Python version, and a blob is
only ever read by the pipeline that wrote it: its writer processes run sys.executable, and a
Dataflow job's workers share one container. Beam-free: writer processes import it.
"""
from __future__ import annotations

import hashlib
import marshal
from typing import Any, Tuple

from beam_tfrecord.records import batches
from beam_tfrecord.records.model import ImageAnnotation

# (split, key, uri, source, source_id, size_bytes, records, blob, hash): records is what the
# schema writes for the image (--records-per-shard counts them), blob the annotation (unpack),
# hash the image's place in the shard order (identity_hash: an unsigned 64-bit int, typed Any
# because Beam codes an `int` with its signed VarIntCoder)
Packed = Tuple[str, str, str, str, str, int, int, bytes, Any]
SPLIT, KEY, URI, SOURCE, SOURCE_ID, SIZE, RECORDS, BLOB, HASH = range(9)


def identity_hash(key: str) -> int:
  """An image's 64-bit place in the shard order: a hash of its key, the same on every machine
  and wherever the dataset sits (the key is the file's name relative to its image root; the
  URI only breaks ties). Annotations of one key, hence of one file, are neighbours."""
  return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"),
                                        digest_size=8).digest(), "big")

def pack_plain(image: Tuple, records: int = 1) -> Packed:
  """An image of a batch (records/batches: an ImageAnnotation's plain tuple) whose split and
  size are known (PrepareImages' output)."""
  return (image[batches.SPLIT], image[batches.KEY], image[batches.URI], image[batches.SOURCE],
          image[batches.SOURCE_ID], image[batches.SIZE_BYTES] or 0, records,
          marshal.dumps(image), identity_hash(image[batches.KEY]))


def pack(ann: ImageAnnotation, records: int = 1) -> Packed:
  """pack_plain of an ImageAnnotation."""
  return pack_plain(batches.TO_PLAIN(ann), records)


def unpack(blob: bytes) -> ImageAnnotation:
  """The annotation of a Packed's BLOB."""
  return batches.FROM_PLAIN(marshal.loads(blob))
