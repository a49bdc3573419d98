"""What every source produces (SourceOutput) and the helpers sources share."""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

if TYPE_CHECKING:  # the helpers below serve Beam-free modules (detection, listings)
  import apache_beam as beam


class SourceOutput(NamedTuple):
  images: "beam.PCollection"
  errors: "beam.PCollection"
  categories: "Optional[beam.PCollection]" = None


def image_extensions() -> frozenset:
  """File extensions (lower case, with the dot) of every format Pillow opens."""
  from PIL import Image
  return frozenset(ext.lower() for ext in Image.registered_extensions())


def is_hidden(relative: str) -> bool:
  """A file or a folder on its way starting with '.' (.DS_Store, .ipynb_checkpoints/...)."""
  return any(part.startswith(".") for part in relative.replace("\\", "/").split("/"))
