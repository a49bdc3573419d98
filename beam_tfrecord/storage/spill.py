"""Partitioned spill files: records set aside on local disk by partition, read back one
partition at a time, so that a step that must see records together (a join, a sort) holds
one partition in memory instead of the whole dataset. Beam-free.

The in-process local runner holds every grouped PCollection in memory (docs/architecture.md);
TFDS's local shuffler spills to bucket files on disk for the same reason. A record is bytes;
each is written as a 4-byte little-endian length and the bytes.
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
from typing import Dict, Iterator, List, Optional

_LENGTH = struct.Struct("<I")
BUFFER_BYTES = 8 << 20  # buffered in memory before the partitions are appended to their files


def write_records(f, records: List[bytes]) -> None:
  pack = _LENGTH.pack
  f.write(b"".join(pack(len(r)) + r for r in records))


def read_records(path: str) -> Iterator[bytes]:
  """The records of one spill file, in the order they were written."""
  with open(path, "rb") as f:
    data = f.read()
  return iter_records(data)


def iter_records(data: bytes) -> Iterator[bytes]:
  """The records of a spill file's bytes."""
  at, end, unpack = 0, len(data), _LENGTH.unpack_from
  while at < end:
    (n,) = unpack(data, at)
    at += 4
    yield data[at:at + n]
    at += n


class Spill:
  """Records added by partition (0 <= p < partitions), buffered, appended to one file per
  partition under `directory` (a fresh temporary folder by default, removed by close()).

  Memory: at most buffer_bytes of records plus what one read of a partition returns."""

  def __init__(self, partitions: int, directory: Optional[str] = None,
               buffer_bytes: int = BUFFER_BYTES, prefix: str = "part"):
    self.partitions = partitions
    self._own = directory is None
    self.directory = directory or tempfile.mkdtemp(prefix="beam-tfrecord-spill-")
    self._prefix = prefix
    self._buffers: Dict[int, List[bytes]] = {}
    self._buffered = 0
    self._buffer_bytes = buffer_bytes
    self.written = set()  # partitions with a file

  def path(self, partition: int) -> str:
    return os.path.join(self.directory, f"{self._prefix}-{partition:05d}")

  def add(self, partition: int, record: bytes) -> None:
    self._buffers.setdefault(partition, []).append(record)
    self._buffered += len(record) + 4
    if self._buffered >= self._buffer_bytes:
      self.flush()

  def flush(self) -> None:
    for partition, records in self._buffers.items():
      with open(self.path(partition), "ab") as f:
        write_records(f, records)
      self.written.add(partition)
    self._buffers.clear()
    self._buffered = 0

  def read(self, partition: int) -> Iterator[bytes]:
    """One partition's records (flush first)."""
    if partition in self.written:
      yield from read_records(self.path(partition))

  def close(self) -> None:
    self._buffers.clear()
    if self._own:
      shutil.rmtree(self.directory, ignore_errors=True)

  def __enter__(self) -> "Spill":
    return self

  def __exit__(self, *exc) -> None:
    self.close()
