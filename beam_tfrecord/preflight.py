"""Checks run before anything is written: the inputs exist, are readable and are what
--format says. Each failure is a UsageError (exit 2, one line), raised before the output
directory is created. Per-record problems stay the pipeline's job (errors-*.jsonl)."""
from __future__ import annotations

import os
from typing import Optional

from beam_tfrecord import label_map as label_maps
from beam_tfrecord import paths
from beam_tfrecord.errors import UsageError

HEAD_BYTES = 4096


def _exists(uri: str) -> bool:
  from apache_beam.io.filesystems import FileSystems
  try:
    return FileSystems.exists(uri)
  except Exception:
    return False


def check_file(uri: str, what: str) -> None:
  """The input is an existing, non-empty file."""
  if not paths.is_remote(uri):
    if os.path.isdir(uri):
      raise UsageError(f"{what} {uri} is a directory, not a file")
    if not os.path.exists(uri):
      raise UsageError(f"{what} {uri}: no such file")
    if not os.access(uri, os.R_OK):
      raise UsageError(f"{what} {uri}: not readable (permission denied)")
    if os.path.getsize(uri) == 0:
      raise UsageError(f"{what} {uri} is empty")
    return
  if not _exists(uri):
    raise UsageError(f"{what} {uri}: no such file")


def head(uri: str, size: int = HEAD_BYTES) -> bytes:
  from apache_beam.io.filesystems import FileSystems
  try:
    with FileSystems.open(uri, compression_type="uncompressed") as f:
      return f.read(size)
  except Exception as e:
    raise UsageError(f"{uri}: cannot read ({type(e).__name__}: {e})") from None


def sniff_text(data: bytes) -> Optional[str]:
  """'json', 'xml', 'csv' or None for the first bytes of an annotation file."""
  text = data.lstrip(b"\xef\xbb\xbf").lstrip()
  if not text:
    return None
  if text[:1] in (b"{", b"["):
    return "json"
  if text[:1] == b"<":
    return "xml"
  first = text.split(b"\n", 1)[0]
  if b"," in first or b";" in first or b"\t" in first:
    return "csv"
  return None


def check_directory(uri: str, what: str) -> None:
  if paths.is_remote(uri):
    return  # object stores have no directories to check; missing files are per-image errors
  if not os.path.exists(uri):
    raise UsageError(f"{what} {uri}: no such directory")
  if not os.path.isdir(uri):
    raise UsageError(f"{what} {uri} is a file, not a directory")


def check_label_map(uri: str, min_id: int = 1) -> None:
  try:
    label_maps.read(uri, min_id)
  except ValueError as e:
    raise UsageError(f"--label-map {uri}: {e}") from None
  except Exception as e:  # missing, unreadable
    raise UsageError(f"--label-map {uri}: cannot read ({type(e).__name__}: "
                     f"{getattr(e, 'strerror', None) or e})") from None


def check(config) -> None:
  """Every pre-run check for a ConvertConfig (see pipeline.ConvertConfig)."""
  from beam_tfrecord import schemas
  from beam_tfrecord.pipeline import image_roots
  from beam_tfrecord.sources import coco, csv, folders, voc, yolo
  if config.label_map:
    check_label_map(config.label_map, schemas.from_options(config.encode_options()).first_id)
  default_root, per_split = image_roots(config)
  for split, root in sorted(per_split.items()) + ([(None, default_root)] if default_root else []):
    check_directory(root, f"--images {split + '=' if split else ''}".rstrip())
  if config.format == "coco":
    for item in config.inputs:
      coco.check_input(paths.parse_assignment(item)[1])
  elif config.format == "csv":
    from beam_tfrecord.sources.csv import parse_column_map
    for item in config.inputs:
      csv.check_input(paths.parse_assignment(item)[1], parse_column_map(config.csv_columns))
  elif config.format == "voc":
    voc.check_input(config.inputs, config.image_sets)
  elif config.format == "yolo":  # the yaml / obj.data parses and names existing folders
    for item in config.inputs:
      split, uri = paths.parse_assignment(item)
      yolo.load(uri, split)
  elif config.format == "folders":
    folders.plan([paths.parse_assignment(item) for item in config.inputs])
  if config.format == "coco" and not config.label_map:
    coco.check_background_category([paths.parse_assignment(i)[1] for i in config.inputs])
