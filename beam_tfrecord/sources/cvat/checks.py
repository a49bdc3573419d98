"""The pre-run check of --format cvat: each input is a CVAT XML of the version this reader
reads (UsageError, before anything is written). Beam-free."""
from __future__ import annotations

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources.checks import check_file
from beam_tfrecord.sources.cvat.detection import annotation_file, read_head
from beam_tfrecord.sources.cvat.document import VERSION, head_version
from beam_tfrecord.storage import paths


def check(config) -> None:
  """Each input is (or is a folder holding) a CVAT XML: its head's root is <annotations>
  with <version>1.1, and no DTD (at most HEAD_BYTES read)."""
  for item in config.inputs:
    _, given = paths.parse_assignment(item)
    uri = annotation_file(given)
    check_file(uri, "--input")
    try:
      version = head_version(read_head(uri))
    except InputError as e:  # a DTD or entities
      raise UsageError(f"--input {uri}: {e.message}") from None
    if version is None:
      raise UsageError(f"--input {uri} is not a CVAT XML file (no <annotations> root element)")
    if version != VERSION:
      raise UsageError(f"--input {uri} is CVAT XML version {version or '(none)'}; --format "
                       f"cvat reads {VERSION} ('CVAT for images 1.1' exports)")
