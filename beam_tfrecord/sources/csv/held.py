"""The in-process join's rows of one file, held by partition of image name, spilled to local disk
past a buffer (storage.spill). Pure and Beam-free."""
from __future__ import annotations

import itertools
from typing import Dict, List, Optional, Tuple

from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE

# The in-process join (readers.JoinRows): a file's rows in at least one partition per
# PARTITION_BYTES of the file (a partition's join holds ~10x its share of the file), at most
# MAX_PARTITIONS; rows held in memory up to SPILL_BUFFER_BYTES (estimated at ROW_BYTES plus the
# name each), then handed to a Spill that buffers as much again as marshal dumps before it
# appends to disk.
PARTITION_BYTES = 4 << 20
MAX_PARTITIONS = 4096
SPILL_BUFFER_BYTES = 8 << 20
ROW_BYTES = 400

# Roboflow's CSV export has rows only for images with boxes; its background images sit beside
# `_annotations.csv` with no row. They are kept as images without objects, as the same export
# in COCO, VOC or YOLO form keeps them; "line" BESIDE marks them (after every real row).
BESIDE = 1 << 62


class HeldRows:
  """Rows of one file by partition of their image's name (crc32: the same partitions in every
  process), each (split, name, line, values...): in memory up to `buffer_bytes`, then spilled
  to a storage.spill.Spill as one marshal dump per partition. A file whose rows fit the buffer
  never touches the disk. close() removes the spill."""

  def __init__(self, partitions: int, buffer_bytes: int):
    self.partitions, self.buffer_bytes = partitions, buffer_bytes
    self.rows: List[List[Tuple]] = [[] for _ in range(partitions)]
    self.held = 0
    self.spill = None

  @classmethod
  def for_file(cls, size: Optional[int], partition_bytes: int = PARTITION_BYTES,
               buffer_bytes: int = SPILL_BUFFER_BYTES) -> "HeldRows":
    """For a file of `size` bytes (None: unknown): a partition per `partition_bytes`."""
    return cls(min(MAX_PARTITIONS, max(1, -(-(size or 0) // partition_bytes))), buffer_bytes)

  def add(self, name: str, row: Tuple) -> None:
    import zlib
    self.rows[zlib.crc32(name.encode()) % self.partitions].append(row)
    self.held += ROW_BYTES + len(name)
    if self.held >= self.buffer_bytes:
      self.flush()

  def flush(self) -> None:
    import marshal

    from beam_tfrecord.storage.spill import Spill
    if self.spill is None:
      self.spill = Spill(self.partitions, buffer_bytes=self.buffer_bytes, prefix="csv")
    for p, rows in enumerate(self.rows):
      if rows:
        self.spill.add(p, marshal.dumps(rows))
        self.rows[p] = []
    self.held = 0

  def images(self, p: int) -> Dict[Tuple[Optional[str], str], List[Tuple]]:
    """{(split, name): [((0, line), values...), ...]} of partition p (as the distributed read's
    rows, with file lines; BESIDE rows as ((BESIDE, 0), values...)), rows in file order
    (spilled batches first, as they were written), then dropped. An image keeps at most
    MAX_OBJECTS_PER_IMAGE + 1 rows, its first: enough for readers.bounded to reject it, so
    one image of 500,000 rows costs no more than the bound (spilled batches are loaded one at
    a time)."""
    import marshal
    if self.spill is not None:
      self.spill.flush()
    spilled = self.spill.read(p) if self.spill is not None else ()
    batches = itertools.chain((marshal.loads(b) for b in spilled), [self.rows[p]])
    images: Dict[Tuple[Optional[str], str], List[Tuple]] = {}
    for batch in batches:
      for row in batch:
        split, name, line = row[:3]
        rows = images.get((split, name))
        if rows is None:
          images[(split, name)] = rows = []
        if len(rows) <= MAX_OBJECTS_PER_IMAGE:
          rows.append(((0, line) if line != BESIDE else (BESIDE, 0),) + row[3:])
    self.rows[p] = []
    return images

  def close(self) -> None:
    if self.spill is not None:
      self.spill.close()
