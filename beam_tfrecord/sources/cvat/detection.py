"""Which file an --input means and whether it is a CVAT XML (--format auto): only a head of
HEAD_BYTES is read. Beam-free."""
from __future__ import annotations

import os
import posixpath
import re
from typing import Optional

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources.cvat.document import HEAD_BYTES, VERSION, head_version
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import is_dir, list_dir, open_read

EXPORT_FILE = "annotations.xml"  # the file of a CVAT export (and of each split folder)


def annotation_file(uri: str) -> str:
  """An --input as the XML it names: a folder (an unpacked export) means its annotations.xml."""
  if not uri.lower().endswith(".xml") and is_dir(uri):
    return paths.join(uri, EXPORT_FILE)
  return uri


def default_image_root(xml_uri: str) -> str:
  """Where an export keeps its images: images/ beside the XML, else the XML's folder."""
  folder = (posixpath.dirname(xml_uri) if paths.is_remote(xml_uri) else
            os.path.dirname(xml_uri) or ".")
  images = paths.join(folder, "images")
  return images if is_dir(images) else folder


def read_head(uri: str) -> bytes:
  with open_read(uri) as f:
    return f.read(HEAD_BYTES)


# A document type declaration, its internal subset included (up to the "]>" that ends it).
_DOCTYPE = re.compile(rb"<!DOCTYPE\b[^\[>]*(\[.*?\]\s*)?>", re.DOTALL)


def is_cvat_xml(uri: str) -> bool:
  """Whether a file's head is a CVAT XML (<annotations> with <version>1.1). A DTD does not
  hide the format: the head is looked at without it, and the run's checks then refuse the
  file as unsafe_xml in one line, as they do with --format cvat."""
  try:
    head = read_head(uri)
    try:
      return head_version(head) == VERSION
    except InputError:  # a DTD or entities, refused when parsing: look past the declaration
      return head_version(_DOCTYPE.sub(b"", head, count=1)) == VERSION
  except Exception:
    return False


def detect(path: str) -> Optional[str]:
  """--format auto: a .xml whose root is <annotations> with <version>1.1, or a folder holding
  such an annotations.xml (an unpacked CVAT export)."""
  if path.lower().endswith(".xml"):
    return f"CVAT XML {VERSION}" if is_cvat_xml(path) else None
  files = list_dir(path)[1]
  if EXPORT_FILE in files and is_cvat_xml(paths.join(path, EXPORT_FILE)):
    return EXPORT_FILE
  return None
