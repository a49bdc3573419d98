"""A version's catalog, one partition per shard file: a Parquet table with a row per image
of the shard, in shard order, saying what the image was (identity and its 64-bit hash, file
stamp, annotation digest) and what the shard holds for it (its records' bytes in the file,
their stats, the errors it gave). The next run compares its images with it and copies the
bytes of unchanged images instead of reading and encoding them again; `verify` checks every
row against its shard. The manifest lists each partition with its digest and row count
(shard_plan: `indexes`, `index_digests`, `index_rows`): a partition that differs is refused
and its images are encoded again. Pure and Beam-free (writer processes import it).

Why Parquet: the JSON lines it replaces cost 17-19 us an image to write and ~33 us to parse
(py-spy of a 200k-image append, 2026-12-07); columns are written and checked by pyarrow.

Size: ~60 bytes an image on disk; a writer holds the partition of its own shard only.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import marshal
import operator
import os
from typing import List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from beam_tfrecord.records import batches
from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.records.packed import identity_hash
from beam_tfrecord.storage import files, paths

# "catalog-" is not a prefix of any shard name: `glob("train-*")` never finds a partition
TEMPLATE = "catalog-{split}-{shard:05d}-of-{num_shards:05d}.parquet"
# A partition larger than this is not one this tool wrote: it is not trusted (the shard is
# re-encoded). At ~60 bytes a row: millions of images in one shard.
MAX_INDEX_BYTES = 256 << 20
ROW_GROUP = 65536  # rows per row group: a reader of one hash range reads few

Identity = Tuple[str, str]  # (key, uri): an image of a split
HASH_MAX = (1 << 64) - 1


def index_name(split: str, shard: int, num_shards: int) -> str:
  return TEMPLATE.format(split=split, shard=shard, num_shards=num_shards)


@dataclasses.dataclass(frozen=True)
class Entry:
  """One image of a shard: its identity and stamp, its annotation's digest, the bytes of its
  records in the shard file ([offset, offset + length); none for a rejected image), what they
  counted, and the errors and warnings the image gave when it was encoded."""
  key: str
  uri: str
  stamp: str
  digest: str
  offset: int = 0
  length: int = 0
  records: int = 0
  objects: int = 0
  clipped: int = 0
  reoriented: int = 0
  labels: Tuple[str, ...] = ()
  errors: Tuple[Tuple[Tuple[str, object], ...], ...] = ()  # ErrorRecord fields, sorted pairs
  rejected: bool = False
  sha: str = ""  # record_digest of its records' framings
  content: str = ""  # hex SHA-256 of the image file as read (write/contents.py)

  @property
  def identity(self) -> Identity:
    return self.key, self.uri

  def error_records(self, source: Optional[str] = None) -> List[ErrorRecord]:
    """The image's errors as the encoder gave them, from `source` (the annotation file it
    comes from now) where they named the one it came from then."""
    records = [ErrorRecord(**dict(fields)) for fields in self.errors]
    if source is not None:
      records = [dataclasses.replace(r, source=source) for r in records]
    return records


def errors_of(records: Sequence[ErrorRecord]) -> Tuple[Tuple[Tuple[str, object], ...], ...]:
  return tuple(tuple(sorted(dataclasses.asdict(e).items())) for e in records)


def record_digest(key: str, uri: str, framings: Sequence[bytes]) -> str:
  """The digest a catalog row keeps of an image's records, keyed by the image: of each
  record's framing (tfrecord.framings: head and tail, length and CRCs), not of its data.
  The data's CRCs are checked against the framing wherever a range is read back
  (checked_range), so a range moved to another image's records, or damaged, no longer
  matches; hashing 16 bytes a record instead of the image it holds took 2.8 s of a first
  version's 17 CPU-s on 20,000 photos (py-spy, 2026-12-07)."""
  h = hashlib.blake2b(digest_size=16)
  h.update(key.encode("utf-8", "surrogatepass") + b"\0" +
           uri.encode("utf-8", "surrogatepass") + b"\0")
  for part in framings:
    h.update(part)
  return h.hexdigest()


def checked_range(f, entry: Entry):
  """The records `entry` lists, read from its shard (a record_files.EarlierShard), or None
  when they are not what it says (check_range). What the writer checks before it copies a
  record forward, and what `verify` checks of every row."""
  return check_range(f, entry.key, entry.uri, entry.offset, entry.length, entry.records,
                     entry.sha)


def check_range(f, key: str, uri: str, offset: int, length: int, records: int, sha: str):
  """checked_range of a row given as its columns' values: None when the range is short, or
  is not exactly `records` whole records (TFRecord CRCs, ArrayRecord's hashes) whose
  framings' digest keyed by the image is `sha`; else the records as the shard copies them
  (record_files.EarlierShard.read_range)."""
  found = f.read_range(offset, length)
  if found is None:
    return None
  frames, payload = found
  if len(frames) != 2 * records or record_digest(key, uri, frames) != sha:
    return None
  return payload


SCHEMA = pa.schema([
    ("key", pa.string()), ("uri", pa.string()), ("hash", pa.uint64()), ("stamp", pa.string()),
    ("digest", pa.string()), ("offset", pa.int64()), ("length", pa.int64()),
    ("records", pa.int64()), ("objects", pa.int64()), ("clipped", pa.int64()),
    ("reoriented", pa.int64()), ("labels", pa.list_(pa.string())), ("errors", pa.string()),
    ("rejected", pa.bool_()), ("sha", pa.string()), ("content", pa.string())])
_FIELDS = tuple(f.name for f in dataclasses.fields(Entry))
_COLUMNS = tuple(n for n in SCHEMA.names if n != "hash")
assert sorted(_COLUMNS) == sorted(_FIELDS), "the schema and Entry must name the same fields"
_VALUES = operator.attrgetter(*_COLUMNS)
_ERRORS = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def encode(entries: Sequence[Entry]) -> bytes:
  """A partition's bytes: the entries as one Parquet table in SCHEMA, in their order. The
  same entries give the same bytes (no time or path in the file)."""
  rows = [_VALUES(e) for e in entries]
  columns = dict(zip(_COLUMNS, map(list, zip(*rows)))) if rows else \
      {name: [] for name in _COLUMNS}
  columns["hash"] = [identity_hash(k) for k in columns["key"]]
  columns["labels"] = [list(labels) for labels in columns["labels"]]
  columns["errors"] = [_ERRORS.encode([dict(e) for e in errors]) if errors else ""
                       for errors in columns["errors"]]
  table = pa.Table.from_pydict({name: columns[name] for name in SCHEMA.names}, schema=SCHEMA)
  sink = pa.BufferOutputStream()
  pq.write_table(table, sink, row_group_size=ROW_GROUP, compression="snappy")
  return sink.getvalue().to_pybytes()


def check_table(data: bytes, span: Tuple[int, int] = (0, HASH_MAX)) -> pa.Table:
  """The table of a partition's bytes, checked in columns; ValueError when it is not one this
  tool writes (a partition is read back from an earlier output, where anyone can edit it):
  another schema, a null, a negative count, a hash that is not its key's or lies outside
  `span` (the hashes of its shard's ranges, inclusive), rows out of shard order, or records
  that overlap (rows lie in the shard in order). Equal bytes always give the same answer:
  every reader of a partition decides alike."""
  try:
    table = pq.read_table(pa.BufferReader(data))
  except (pa.ArrowException, OSError) as e:
    raise ValueError(f"not a Parquet file ({e})") from None
  if not table.schema.remove_metadata().equals(SCHEMA):
    raise ValueError("its columns are not a catalog's")
  if any(column.null_count for column in table.columns) or \
      pc.list_flatten(table.column("labels")).null_count:
    raise ValueError("it holds nulls")
  if not table.num_rows:
    return table
  for name in ("offset", "length", "records", "objects", "clipped", "reoriented"):
    if pc.min(table.column(name)).as_py() < 0:
      raise ValueError(f"a {name} is negative")
  hashes = hashes_of(table)
  if hashes[0] < span[0] or hashes[-1] > span[1] or bool((hashes[1:] < hashes[:-1]).any()):
    raise ValueError("its rows are not in shard order within its shard's ranges")
  if table.column("hash").to_pylist() != [identity_hash(k) for k in
                                          table.column("key").to_pylist()]:
    raise ValueError("a row's hash is not its key's")
  errors = table.column("errors")
  for text in errors.filter(pc.not_equal(errors, "")).to_pylist():
    _errors(text)  # a list of objects, or ValueError
  offsets = table.column("offset").to_numpy()
  lengths = table.column("length").to_numpy()
  ends = np.where(lengths > 0, offsets + lengths, 0)
  before = np.concatenate(([0], np.maximum.accumulate(ends)[:-1]))
  overlapping = np.flatnonzero((lengths > 0) & (offsets < before))
  if overlapping.size:
    key = table.column("key")[int(overlapping[0])].as_py()
    raise ValueError(f"entry {key!r} overlaps the one before it")
  return table


def hashes_of(table: pa.Table) -> np.ndarray:
  return table.column("hash").to_numpy()


def entries_of(table: pa.Table) -> List[Entry]:
  """The rows of a checked table as Entries (ValueError for errors that are not JSON)."""
  columns = table.select(list(_FIELDS)).to_pydict()
  columns["labels"] = [tuple(labels) for labels in columns["labels"]]
  columns["errors"] = [_errors(text) for text in columns["errors"]]
  return [Entry(*row) for row in zip(*(columns[name] for name in _FIELDS))]


def parse(data: bytes) -> List[Entry]:
  """The entries of a partition's bytes (check_table's checks)."""
  return entries_of(check_table(data))


def _errors(text: str) -> Tuple[Tuple[Tuple[str, object], ...], ...]:
  if not text:
    return ()
  errors = json.loads(text)
  if not isinstance(errors, list) or not all(isinstance(e, dict) for e in errors):
    raise ValueError("errors are not a list of objects")
  return tuple(tuple(sorted(e.items())) for e in errors)


def read(uri: str) -> Optional[List[Entry]]:
  """The entries of a partition, or None when there is none or it cannot be read as one
  (the shard is then encoded again: a partition only ever saves work)."""
  return read_checked(uri)[0]


def read_checked(uri: str, expected: str = "", rows: int = -1
                 ) -> Tuple[Optional[List[Entry]], str]:
  """(read()'s entries, the file's digest). With `expected` (the digest its version
  recorded) and `rows` (its row count, -1 where not recorded), a partition whose bytes or
  rows differ is None too: forged, swapped, truncated or damaged."""
  table, digest = read_table(uri, expected, rows)
  try:
    return (entries_of(table) if table is not None else None), digest
  except ValueError:
    return None, ""


def read_table(uri: str, expected: str = "", rows: int = -1,
               span: Tuple[int, int] = (0, HASH_MAX), checked: bool = False
               ) -> Tuple[Optional[pa.Table], str]:
  """(the partition's table, the file's digest), the table None as read_checked's entries.
  `checked`: the bytes are `expected`'s, which a check of this run passed (check_table), so
  only the digest is compared."""
  try:
    with files.open_earlier(uri) as f:
      data = f.read(MAX_INDEX_BYTES + 1)
    if len(data) > MAX_INDEX_BYTES:
      return None, ""
    digest = file_digest(data)
    if expected and digest != expected:
      return None, digest
    if checked and expected:
      table = pq.read_table(pa.BufferReader(data))
    else:
      table = check_table(data, span)
    if rows >= 0 and table.num_rows != rows:
      return None, digest
    return table, digest
  except (OSError, ValueError, TypeError, KeyError, pa.ArrowException):
    return None, ""
  except Exception:  # an object store's own errors: no partition
    return None, ""


def file_digest(data: bytes) -> str:
  """An index file's digest, as the manifest records it (shard_plan's `index_digests`)."""
  return hashlib.blake2b(data, digest_size=16).hexdigest()


def file_stamp(uri: str) -> str:
  """A shard file's stamp, not following a link: size, modification and change time, inode
  ('' on object stores, or when it cannot be looked at). A write into the file changes it,
  even one that puts the modification time back (the change time moves); so do a new link
  to the file or one removed (versions sharing it), which only costs a check of its CRCs."""
  if paths.is_remote(uri):
    return ""
  try:
    return _local_stamp(os.lstat(uri))
  except OSError:
    return ""


def _local_stamp(st: os.stat_result) -> str:
  """A local file's stamp, shard or image: size, modification time, inode, change time."""
  return f"{st.st_size}:{st.st_mtime_ns}:{st.st_ino}:{st.st_ctime_ns}"


def digest(ann: ImageAnnotation) -> str:
  """digest_plain of an ImageAnnotation."""
  return digest_plain(batches.TO_PLAIN(ann))


def digest_plain(image: Tuple) -> str:
  """What an image's annotation (its plain tuple, records/batches) says about the image, as a
  digest: every field but the file size (a property of the file: the stamp's) and the
  annotation file it came from (a dated export, export-2026-11-24.json, names another file
  each night; it is in no record, and the errors an unchanged image gave are re-issued naming
  the current one: Entry.error_records).

  The bytes hashed are marshal's format 2, exact for plain values (floats as IEEE doubles)
  and the same for equal values however they share objects: formats 3 and later mark shared
  and interned objects as references, so equal tuples can marshal differently. It took ~1
  us where repr took ~11 (an image of 7 boxes) and 47 us an image of the 20k photos."""
  fields = list(image)
  fields[batches.SIZE_BYTES], fields[batches.SOURCE] = None, ""
  return hashlib.blake2b(marshal.dumps(tuple(fields), 2), digest_size=16).hexdigest()


def stamp(uri: str) -> str:
  """The image file's stamp without reading it: locally its size, modification time, inode
  and change time (nanoseconds: `cp -p`, `rsync -a` and `tar x` keep the modification time,
  but no user can set the change time, and a file replaced is a new inode); on object stores
  its size and update time from its metadata (an object written again is a new generation
  with a new time). '' when the file cannot be looked at (it is then encoded, and reported as
  such)."""
  if uri.endswith(files.EMBEDDED):  # an image inside its annotation file: the file's stamp
    uri = uri[:-len(files.EMBEDDED)]
  try:
    if not paths.is_remote(uri):
      return _local_stamp(os.stat(uri))
    from apache_beam.io.filesystems import FileSystems
    meta = FileSystems.get_filesystem(uri).metadata(uri)
    return f"{meta.size_in_bytes}:{meta.last_updated_in_seconds!r}"
  except Exception:  # missing, no access: nothing to compare with
    return ""
