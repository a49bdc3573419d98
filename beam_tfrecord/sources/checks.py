"""Input checks run before anything is written: the inputs exist, are readable and are what
--format says. Each failure is a UsageError (exit 2, one line), raised before the output
directory is created. Per-record problems stay the pipeline's job (errors-*.jsonl)."""
from __future__ import annotations

import os
from typing import Optional

from beam_tfrecord.errors import UsageError
from beam_tfrecord.storage import files, paths


def check_file(uri: str, what: str) -> None:
  """The input is an existing, non-empty file."""
  files.check_store(uri, what)
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
  try:
    found = files.exists(uri, strict=True)
  except Exception as e:  # no access, no network: say so rather than "no such file"
    first = (str(e).strip().splitlines() or [""])[0][:200]
    raise UsageError(f"{what} {uri}: cannot be checked ({type(e).__name__}: {first})") from None
  if not found:
    raise UsageError(f"{what} {uri}: no such file")


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
  files.check_store(uri, what)
  if paths.is_remote(uri):
    return  # object stores have no directories to check; missing files are per-image errors
  if not os.path.exists(uri):
    raise UsageError(f"{what} {uri}: no such directory")
  if not os.path.isdir(uri):
    raise UsageError(f"{what} {uri} is a file, not a directory")


def check_label_map(uri: str, min_id: int = 1) -> None:
  try:
    files.read_label_map(uri, min_id)
  except ValueError as e:
    raise UsageError(f"--label-map {uri}: {e}") from None
  except Exception as e:  # missing, unreadable
    raise UsageError(f"--label-map {uri}: cannot read ({type(e).__name__}: "
                     f"{getattr(e, 'strerror', None) or e})") from None
