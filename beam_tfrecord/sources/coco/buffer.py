"""The in-worker join's buffer: the images and objects of one COCO file by partition of
image id, spilled to local disk past a budget (storage.spill) and given back one partition
at a time. Beam-free."""
from __future__ import annotations

import marshal
import struct
from typing import Dict, List, Optional, Tuple

_SPILLED = struct.Struct("<qqq4dBdq")  # image id, index, category, box, flags, area, id
_CROWD, _AREA, _ID = 1, 2, 4


def _pack_object(image_id: int, chunk: Tuple) -> Optional[bytes]:
  """An object chunk without segmentation or keypoints and its image id as 73 bytes (~400 as
  tuples); None when it cannot be packed (a segmentation, keypoints, an integer beyond 64
  bits)."""
  index, category_id, box, is_crowd, area, ann_id, segmentation, *more = chunk
  if segmentation is not None or any(more):
    return None
  flags = (_CROWD if is_crowd else 0) | (_AREA if area is not None else 0) | (
      _ID if ann_id is not None else 0)
  try:
    return _SPILLED.pack(image_id, index, category_id, *box, flags, area or 0.0, ann_id or 0)
  except struct.error:
    return None


# _JoinFile's spill: image ids in at least SPILL_PARTITIONS partitions, one more per
# PARTITION_BYTES of the file (memory held by one partition's join stays ~3x that), at most
# MAX_PARTITIONS; images and objects buffered in memory up to SPILL_BUFFER_BYTES before they
# are written to local disk.
SPILL_PARTITIONS = 64
PARTITION_BYTES = 4 << 20
MAX_PARTITIONS = 4096
SPILL_BUFFER_BYTES = 8 << 20
_MIX, _MASK = 0x9E3779B97F4A7C15, (1 << 64) - 1  # Fibonacci hashing: strided ids spread too


class _JoinBuffer:
  """The images and objects of one COCO file by partition of image id, joined one partition
  at a time once the file (its categories last) is read.

  Held in memory up to `buffer_bytes` (estimated), then appended to a storage.spill.Spill as
  one record per partition and kind: partition p holds marshal dumps of image tuples
  (image_id, file_name, width, height), n + p _SPILLED objects, 2n + p marshal dumps of
  (image_id, chunk) for the objects that do not pack. A file that fits the buffer never
  touches the disk. close() removes the spill directory."""

  def __init__(self, partitions: int, buffer_bytes: int):
    self.partitions, self.buffer_bytes = partitions, buffer_bytes
    self.images: List[List[Tuple]] = [[] for _ in range(partitions)]
    self.packed = [bytearray() for _ in range(partitions)]
    self.loose: List[List[Tuple]] = [[] for _ in range(partitions)]
    self.held = 0
    self.spill = None

  def add_image(self, image_id: int, file_name: str, width, height) -> None:
    self.images[((image_id * _MIX) & _MASK) * self.partitions >> 64].append(
        (image_id, file_name, width, height))
    self.held += 160 + len(file_name)  # a tuple, its name and numbers in memory
    if self.held >= self.buffer_bytes:
      self.flush()

  def add_object(self, image_id: int, chunk: Tuple) -> None:
    partition = ((image_id * _MIX) & _MASK) * self.partitions >> 64
    packed = _pack_object(image_id, chunk)
    if packed is not None:
      self.packed[partition] += packed
      self.held += 73
    else:
      self.loose[partition].append((image_id, chunk))
      # a segmentation's text, 24 bytes (a float in a tuple) a keypoint value
      self.held += 400 + len(chunk[6] or "") + 24 * len(chunk[7] or () if len(chunk) > 7 else ())
    if self.held >= self.buffer_bytes:
      self.flush()

  def flush(self) -> None:
    """Everything held goes to the spill files."""
    from beam_tfrecord.storage.spill import Spill
    n = self.partitions
    if self.spill is None:
      self.spill = Spill(3 * n, buffer_bytes=self.buffer_bytes, prefix="coco")
    for p in range(n):
      if self.images[p]:
        self.spill.add(p, marshal.dumps(self.images[p]))
        self.images[p] = []
      if self.packed[p]:
        self.spill.add(n + p, bytes(self.packed[p]))
        self.packed[p] = bytearray()
      if self.loose[p]:
        self.spill.add(2 * n + p, marshal.dumps(self.loose[p]))
        self.loose[p] = []
    self.spill.flush()
    self.held = 0

  def partition(self, p: int) -> Tuple[Dict[int, List[Tuple]], Dict[int, List[Tuple]]]:
    """({image_id: [(file_name, width, height), ...]}, {image_id: [chunk, ...]}) of partition
    p, from its spill files and what is still held (then dropped); objects in file order."""
    n, spill = self.partitions, self.spill
    images: Dict[int, List[Tuple]] = {}
    batches = [marshal.loads(b) for b in spill.read(p)] if spill else []
    batches.append(self.images[p])
    self.images[p] = []
    for batch in batches:
      for image_id, file_name, width, height in batch:
        found = images.get(image_id)
        if found is None:
          images[image_id] = [(file_name, width, height)]
        else:
          found.append((file_name, width, height))
    del batches
    data = b"".join([*(spill.read(n + p) if spill else ()), self.packed[p]])
    self.packed[p] = bytearray()
    objects: Dict[int, List[Tuple]] = {}
    for image_id, index, category_id, x0, y0, x1, y1, flags, area, ann_id in \
        _SPILLED.iter_unpack(data):
      chunk = (index, category_id, (x0, y0, x1, y1), bool(flags & _CROWD),
               area if flags & _AREA else None, ann_id if flags & _ID else None, None)
      kept = objects.get(image_id)
      if kept is None:
        objects[image_id] = [chunk]
      else:
        kept.append(chunk)
    del data
    loose = [marshal.loads(b) for b in spill.read(2 * n + p)] if spill else []
    loose.append(self.loose[p])
    self.loose[p] = []
    for batch in loose:
      for image_id, chunk in batch:
        objects.setdefault(image_id, []).append(chunk)
    return images, objects

  def spilled(self) -> Tuple[str, int, frozenset]:
    """Everything to the spill files; (their folder, partitions, the spill's files) for
    reading(): the join's worker processes read the partitions from there."""
    self.flush()
    return self.spill.directory, self.partitions, frozenset(self.spill.written)

  @classmethod
  def reading(cls, directory: str, partitions: int, written: frozenset) -> "_JoinBuffer":
    """A buffer over another's spilled() files, for partition(): it holds nothing itself and
    its close() leaves the files to their owner."""
    from beam_tfrecord.storage.spill import Spill
    buffer = cls(partitions, 0)
    buffer.spill = Spill(3 * partitions, directory=directory, prefix="coco")
    buffer.spill.written = set(written)
    return buffer

  def close(self) -> None:
    if self.spill is not None:
      self.spill.close()

