"""One LabelMe document: its bytes read as JSON within the budgets, and where its image is
(imagePath, the size it claims). Pure and Beam-free."""
from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources import depth
from beam_tfrecord.storage import paths

# Budgets of one LabelMe JSON. imageData (base64, 4/3 of the image) makes files large: 64 MB
# holds a 48 MB photo. LabelMe nests 5 deep (file/shapes/shape/points/point); flags and
# extra keys a little more.
MAX_JSON_BYTES = 64 << 20
MAX_JSON_DEPTH = 32


def load_json(data: bytes) -> Dict[str, Any]:
  """The top-level object of one LabelMe file of at most MAX_JSON_BYTES nesting at most
  MAX_JSON_DEPTH containers; InputError ('too_large', 'too_deep', 'malformed_json',
  'not_labelme')."""
  if len(data) > MAX_JSON_BYTES:
    raise InputError("parse", "too_large", f"the JSON file has {len(data)} bytes, over the "
                     f"{MAX_JSON_BYTES} a LabelMe file may have")
  doc = depth.loads(data, MAX_JSON_DEPTH)
  if not isinstance(doc, dict):
    raise InputError("parse", "not_labelme", f"the JSON is a {type(doc).__name__}, not an "
                     "object with `shapes`: not a LabelMe file")
  if "shapes" not in doc:
    keys = ", ".join(sorted(doc)[:6]) or "none"
    raise InputError("parse", "not_labelme", f"the JSON has no `shapes` (its keys: {keys}): "
                     "not a LabelMe file")
  if not isinstance(doc["shapes"], list):
    raise InputError("parse", "malformed_json", f"`shapes` is a {type(doc['shapes']).__name__}"
                     ", not a list")
  return doc


def image_size(doc: Dict[str, Any]) -> Tuple[Optional[int], Optional[int]]:
  """(imageWidth, imageHeight) when both are positive integers (the header decides anyway)."""
  size = doc.get("imageWidth"), doc.get("imageHeight")
  if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
    return size
  return None, None


_DRIVE = re.compile(r"^[A-Za-z]:/")


def image_name(doc: Dict[str, Any]) -> Optional[str]:
  """imagePath with '/' separators (LabelMe on Windows wrote '\\'), or None when absent."""
  value = doc.get("imagePath")
  if not isinstance(value, str) or not value.strip():
    return None
  return value.replace("\\", "/")


def image_candidates(json_relative: str, image_path: str, separate_root: bool
                     ) -> List[str]:
  """Names relative to the image root the image of a JSON (at `json_relative` under the
  input folder) may be at, in order. Without a separate root (the input folder is the image
  root): imagePath joined to the JSON's folder, then its base name beside the JSON; with one
  (--images): the base name under the JSON's sub-folder, then directly in the root. An
  absolute imagePath (the annotator's machine) is tried by its base name only."""
  folder = posixpath.dirname(json_relative)
  base = posixpath.basename(image_path.rstrip("/"))
  beside = posixpath.join(folder, base) if folder else base
  if separate_root:
    return list(dict.fromkeys([beside, base]))
  if image_path.startswith("/") or _DRIVE.match(image_path) or paths.is_remote(image_path):
    return [beside]
  joined = posixpath.normpath(posixpath.join(folder, image_path)) if folder else image_path
  return list(dict.fromkeys([joined, beside]))
