"""One image from annotation to serialized Example: read bytes, probe/convert, encode.

Shared by both sinks. Pure apart from reading the file through Beam's FileSystems.
"""
from __future__ import annotations

import dataclasses
from typing import List, Mapping, Optional

from beam_tfrecord import images
from beam_tfrecord.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.schemas import od_api


@dataclasses.dataclass
class Converted:
  serialized: Optional[bytes]      # None when the image was rejected
  labels: List[str]
  clipped: int
  errors: List[ErrorRecord]


def read_bytes(uri: str) -> bytes:
  from apache_beam.io.filesystems import FileSystems
  try:
    with FileSystems.open(uri, compression_type="uncompressed") as f:
      return f.read()
  except Exception as e:  # missing since located, permission, network
    raise InputError("read", "unreadable", f"{uri}: {type(e).__name__}: {e}") from None


def convert(ann: ImageAnnotation, label_map: Mapping[str, int],
            bbox_policy: str = "clip") -> Converted:
  """Never raises for bad input: every problem becomes an ErrorRecord."""
  errors: List[ErrorRecord] = []
  try:
    prepared = images.prepare(read_bytes(ann.uri))
    info = prepared.info
    if ((ann.width is not None and ann.width != info.width) or
        (ann.height is not None and ann.height != info.height)):
      errors.append(ErrorRecord(
          source=ann.source, stage="validate", reason="size_mismatch", key=ann.key,
          message=f"annotation says {ann.width}x{ann.height}, image header says "
          f"{info.width}x{info.height}; the header is used"))
    encoded = od_api.encode(ann, prepared, label_map, bbox_policy)
  except InputError as e:
    return Converted(None, [], 0, errors + [e.record(ann.source, ann.key)])
  except Exception as e:  # a bug or an unforeseen input: report it, never kill the job
    return Converted(None, [], 0, errors + [ErrorRecord(
        source=ann.source, stage="encode", reason="unexpected_error", key=ann.key,
        message=f"{type(e).__name__}: {e}")])
  return Converted(encoded.serialized, encoded.labels, encoded.clipped, errors + encoded.errors)
