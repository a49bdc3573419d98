"""The files a shard's records go into (--file-format) and the index files beside them
(--index-files): written by write/shard_writer.py, read by readback/ and the finalize step.

- tfrecord: records framed one after another (records/tfrecord.py), what tf.data reads.
- array_record: the array-record package's files (Riegeli chunks and a footer of their
  offsets), which Grain's ArrayRecordDataSource and TFDS's `as_data_source` read by index.
  Written as TFDS writes them (core/file_adapters.ArrayRecordFileAdapter: options
  'group_size:1', one record a chunk, so a random read decodes one record), uncompressed
  (ARRAY_RECORD_OPTIONS says why). The writer takes a local path only: on an object store a
  shard is written to a local temporary file and then copied through Beam's FileSystems
  (one more write and read of the shard on the worker's disk).

An index file (tfrecord only) is the text the `tfrecord` package's and NVIDIA DALI's
`tfrecord2idx` write: a line per record, "OFFSET LENGTH\\n", the byte offset of the record's
framing and its framed length (12 + data + 4). Both readers split a shard across workers by
these lines, so they must be exact: written from the offsets the writer has, checked by
`verify` against the framing read back.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import tempfile
import uuid
from typing import BinaryIO, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from beam_tfrecord.records import tfrecord
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.storage import files, paths

TFRECORD, ARRAY_RECORD = "tfrecord", "array_record"
FILE_FORMATS = (TFRECORD, ARRAY_RECORD)
# TFDS's group_size:1 (a random read decodes one record), without the package's default
# zstd:3: records hold encoded images, which it does not shrink. 4,000 JPEGs of the 20k
# benchmark (359 MB, 2026-12-07): zstd:3 wrote 479 MB/s to 1.0014x the input, uncompressed
# 2,306 MB/s to 1.0013x (snappy 1,977 MB/s, 0.9996x; brotli:1 316 MB/s, 0.9941x)
ARRAY_RECORD_OPTIONS = "group_size:1,uncompressed"
INDEX_SUFFIX = ".idx"
WRITE_BUFFER_BYTES = 1024 * 1024
READ_BATCH = 256  # array_record: records read per call (a batch of images, not a shard)


@dataclasses.dataclass(frozen=True)
class Container:
  """How a run stores its records: the file format, and an index file per TFRecord shard."""
  file_format: str = TFRECORD
  index_files: bool = False

  @property
  def suffix(self) -> str:
    return "." + self.file_format


def file_format_of(manifest: Union[Manifest, Mapping]) -> str:
  """The format of an output's shards (--file-format; outputs from before it: TFRecord)."""
  return Manifest.of(manifest).setting("file_format") or TFRECORD


def index_name(shard: str) -> str:
  """A shard's index file: its name and '.idx' (readers pair them as `path + '.idx'`)."""
  return shard + INDEX_SUFFIX


def index_text(spans: Sequence[Tuple[int, int]]) -> bytes:
  return "".join(f"{offset} {length}\n" for offset, length in spans).encode("ascii")


def parse_index(data: bytes) -> Optional[List[Tuple[int, int]]]:
  """An index file's (offset, length) lines, None when it is not one."""
  spans = []
  try:
    for line in data.decode("ascii").splitlines():
      offset, length = line.split(" ")
      spans.append((int(offset), int(length)))
  except ValueError:
    return None
  return spans


def framed_spans(data: bytes, offset: int) -> List[Tuple[int, int]]:
  """(offset, framed length) of each record of `data` (whole framed records, checked
  already), placed at `offset` of their shard."""
  spans, pos = [], 0
  while pos < len(data):
    length = 12 + int.from_bytes(data[pos:pos + 8], "little") + 4
    spans.append((offset + pos, length))
    pos += length
  return spans


def scan_spans(uri: str) -> List[Tuple[int, int]]:
  """(offset, framed length) of each record of a TFRecord shard whose records were checked
  already (--append: a kept file whose stamp is the one recorded), from their heads alone;
  a ValueError when the framing does not end at the file's end."""
  spans, pos = [], 0
  with files.open_earlier(uri) as f:
    size = f.seek(0, os.SEEK_END)
    while pos < size:
      f.seek(pos)
      head = f.read(8)
      length = 12 + int.from_bytes(head, "little") + 4
      if len(head) != 8 or pos + length > size:
        raise ValueError(f"{uri}: a record is cut short at byte {pos}")
      spans.append((pos, length))
      pos += length
  return spans


def check_index(shard: str, index: str) -> Optional[str]:
  """What is wrong with a TFRecord shard's index file (opened without following a link),
  None when it has a line 'OFFSET LENGTH' for each record, exactly where the framing puts
  it (DALI and the `tfrecord` package trust these lines: a wrong one reads garbage or
  skips records)."""
  try:
    with files.open_earlier(index) as f:
      listed = parse_index(f.read())
    actual = scan_spans(shard)
  except (OSError, ValueError) as e:
    return f"cannot be checked against its shard ({e})"
  if listed is None:
    return "not an index file (lines 'OFFSET LENGTH')"
  if listed != actual:
    at = next((i for i, (a, b) in enumerate(zip(listed, actual)) if a != b),
              min(len(listed), len(actual)))
    return (f"does not match its shard (line {at + 1}; {len(listed)} lines for "
            f"{len(actual)} records)")
  return None


class ShardFile:
  """A shard being written: `write` a record (its framing returned: the catalog digests it),
  `position` the next record's place (bytes for TFRecord, records for ArrayRecord: what a
  catalog row's offset counts), `spans` each record's (offset, framed length) when the run
  writes index files."""

  def __init__(self, uri: str, container: Container, framed: bool = False):
    self.uri, self.container = uri, container
    self._framed = framed  # ArrayRecord: the framing computed too (the catalog digests it)
    self.position = 0
    self.spans: Optional[List[Tuple[int, int]]] = [] if container.index_files else None
    self._local: Optional[str] = None
    if container.file_format == ARRAY_RECORD:
      from array_record.python import array_record_module
      self._local = uri if not paths.is_remote(uri) else os.path.join(
          tempfile.gettempdir(), f"beam-tfrecord-{uuid.uuid4().hex}.array_record")
      create_new(self._local)  # ours, a new regular file, before the writer opens it
      self._writer = array_record_module.ArrayRecordWriter(self._local, ARRAY_RECORD_OPTIONS)
    elif paths.is_remote(uri):
      from apache_beam.io.filesystems import FileSystems
      self._f: BinaryIO = FileSystems.create(uri)
    else:  # a buffer of many records: with the default 8 KB each record was its own write()
      self._f = os.fdopen(create_new(uri, keep=True), "wb", buffering=WRITE_BUFFER_BYTES)

  def write(self, record: bytes) -> Tuple[bytes, bytes]:
    if self._local is not None:
      self._writer.write(record)
      self.position += 1
      return tfrecord.framing(record) if self._framed else (b"", b"")
    head, tail = tfrecord.framing(record)
    self._f.write(head)
    self._f.write(record)  # written part by part: no image-sized join
    self._f.write(tail)
    length = len(head) + len(record) + len(tail)
    if self.spans is not None:
      self.spans.append((self.position, length))
    self.position += length
    return head, tail

  def copy(self, payload) -> None:
    """Records read from an earlier shard of this format (EarlierShard.read_range, checked),
    copied as they are: framed bytes, or a list of ArrayRecord records."""
    if self._local is not None:
      for record in payload:
        self._writer.write(record)
      self.position += len(payload)
      return
    data = payload
    self._f.write(data)
    if self.spans is not None:
      self.spans.extend(framed_spans(data, self.position))
    self.position += len(data)

  def close(self) -> None:
    if self._local is None:
      self._f.close()
      return
    self._writer.close()
    if self._local != self.uri:
      try:
        from apache_beam.io.filesystems import FileSystems
        with open(self._local, "rb") as src, FileSystems.create(self.uri) as dst:
          shutil.copyfileobj(src, dst, WRITE_BUFFER_BYTES)
      finally:
        os.unlink(self._local)

  def abandon(self) -> None:
    """After a failure: the local temporary file of an object store's shard removed."""
    if self._local is not None and self._local != self.uri:
      with contextlib.suppress(Exception):
        self._writer.close()
      with contextlib.suppress(OSError):
        os.unlink(self._local)


@contextlib.contextmanager
def create(uri: str, container: Container, framed: bool = False) -> Iterator[ShardFile]:
  shard = ShardFile(uri, container, framed)
  try:
    yield shard
  except BaseException:
    shard.abandon()
    raise
  shard.close()


def create_new(path: str, keep: bool = False):
  """A new regular file at `path` (a unique name in the run's staging directory), created
  without following a link; its descriptor when `keep`, else closed. How every local file of
  a run's shards (records, index files, catalog partitions) is created."""
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) |
               getattr(os, "O_CLOEXEC", 0), 0o644)
  if keep:
    return fd
  os.close(fd)
  return None


# ---------------------------------------------------------------------------------------------
# Reading back
# ---------------------------------------------------------------------------------------------

@contextlib.contextmanager
def local_copy(uri: str) -> Iterator[str]:
  """A local path of the file: itself, or (object stores) a temporary copy, removed after."""
  if not paths.is_remote(uri):
    yield uri
    return
  fd, tmp = tempfile.mkstemp(suffix="." + ARRAY_RECORD, prefix="beam-tfrecord-")
  try:
    with os.fdopen(fd, "wb") as dst, files.open_read(uri) as src:
      shutil.copyfileobj(src, dst, WRITE_BUFFER_BYTES)
    yield tmp
  finally:
    os.unlink(tmp)


class Damaged(ValueError):
  """A shard file that does not read back whole (what is wrong, in its message)."""


def _array_reader(path: str):
  """An ArrayRecordReader of a file opened already (/proc/self/fd/N: the package opens paths
  itself, following links), Damaged when the file is not whole."""
  from array_record.python import array_record_module
  reader = array_record_module.ArrayRecordReader(path)
  if not reader.ok():
    why = "truncated or damaged"
    try:
      reader.close()  # raises the reader's status
    except RuntimeError as e:
      why = str(e).split(";")[0]
    raise Damaged(f"not a whole ArrayRecord file ({why})")
  return reader


class EarlierShard:
  """A shard of an earlier version opened to read catalog rows' ranges (offset and length:
  bytes of framed records in a TFRecord file, record numbers in an ArrayRecord file), not
  following a link (local files are opened once, and an ArrayRecord file is read through
  that descriptor: /proc/self/fd/N). `extent` is where its last record ends."""

  def __init__(self, uri: str, file_format: str = TFRECORD):
    self.file_format = file_format
    self._copy = None
    self.reader = None
    if paths.is_remote(uri) and file_format == ARRAY_RECORD:  # the package reads local files
      self._copy = local_copy(uri)
      uri = self._copy.__enter__()
    try:
      self._f = files.open_earlier(uri)
      if file_format == ARRAY_RECORD:
        self.reader = _array_reader(f"/proc/self/fd/{self._f.fileno()}")
        self.extent = self.reader.num_records()
      else:
        self.extent = self._f.seek(0, os.SEEK_END)
    except BaseException:
      self.close()
      raise

  def read_range(self, offset: int, length: int):
    """(each record's framing: head, tail, head, tail...; the records as a shard copies them:
    framed bytes of a TFRecord file, a list of records of an ArrayRecord one), or None when
    the range cannot be read whole (short, CRCs, Riegeli's hashes)."""
    if self.reader is None:
      try:
        self._f.seek(offset)
        data = self._f.read(length)
      except (OSError, ValueError):
        return None
      if len(data) != length:
        return None
      frames = tfrecord.framings(data)
      return (frames, data) if frames is not None else None
    if offset < 0 or offset + length > self.extent:
      return None
    try:
      records = list(self.reader.read(offset, offset + length)) if length else []
    except RuntimeError:
      return None
    frames = []
    for record in records:
      frames.extend(tfrecord.framing(record))
    return frames, records

  def close(self) -> None:
    if self.reader is not None:
      with contextlib.suppress(RuntimeError):
        self.reader.close()
    if getattr(self, "_f", None) is not None:
      self._f.close()
    if self._copy is not None:
      self._copy.__exit__(None, None, None)

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def read_records(uri: str, file_format: str = TFRECORD, limit: Optional[int] = None
                 ) -> Iterator[bytes]:
  """The records of one shard (`file_format`: the manifest's), in order, on any file system;
  a ValueError where the file stops reading back whole (TFRecord CRCs, Riegeli's hashes)."""
  if file_format == TFRECORD:
    with files.open_read(uri) as f:
      count = 0
      while limit is None or count < limit:
        record = tfrecord.read_record(f)
        if record is None:
          return
        count += 1
        yield record
    return
  with EarlierShard(uri, ARRAY_RECORD) as shard:
    total = shard.extent if limit is None else min(limit, shard.extent)
    for start in range(0, total, READ_BATCH):
      try:
        batch = shard.reader.read(start, min(start + READ_BATCH, total))
      except RuntimeError as e:
        raise Damaged(f"record {start} or after: {str(e).split(';')[0]}") from None
      yield from batch
