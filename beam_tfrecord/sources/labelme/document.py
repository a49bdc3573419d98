"""One LabelMe document: its bytes read as JSON within the budgets (bytes, depth, shapes), and
where its image is (imageData or imagePath, the size it claims). Pure and Beam-free."""
from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Optional, Tuple

from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources import depth
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
from beam_tfrecord.storage import paths

# Budgets of one LabelMe JSON. imageData (base64, 4/3 of the image) makes files large: 64 MB
# holds a 48 MB photo. LabelMe nests 5 deep (file/shapes/shape/points/point); flags and
# extra keys a little more.
MAX_JSON_BYTES = 64 << 20
MAX_JSON_DEPTH = 32


def _too_many(count: Optional[int] = None) -> InputError:
  """too_many_objects, with the count when it is known (json built the list)."""
  listed = f"{count:,} shapes, more than" if count else "more than"
  return InputError("parse", "too_many_objects",
                    f"`shapes` lists {listed} the {MAX_OBJECTS_PER_IMAGE:,} one image may have: "
                    "the image is not converted")


def check_shape_count(data: bytes) -> None:
  """InputError 'too_many_objects' when the top-level `shapes` list holds more than
  MAX_OBJECTS_PER_IMAGE elements, 'too_deep' past MAX_JSON_DEPTH: found by streaming the file
  (ijson's C parser, events only) up to the end of that list, or the first element past the
  bound, so that a file of 600,000 shapes is refused before json builds them (its objects cost
  ~35x the text: 1.46 GB for 40 MB). A file ijson refuses (NaN, Infinity, which json reads)
  is left to json.loads and the count after it (memory: MAX_JSON_BYTES' worth of objects)."""
  import io

  import ijson
  if len(data) <= 2 * MAX_OBJECTS_PER_IMAGE:  # too short to list more: '[', n items, n-1 ','
    return
  stream = io.BytesIO(data)
  stream.seek(3 if data.startswith(b"\xef\xbb\xbf") else 0)
  level, key, listing, count = 0, None, False, 0
  try:
    for event, value in ijson.basic_parse(stream):
      if listing and level == 2 and event not in ("end_map", "end_array"):  # a shape starts
        count += 1
        if count > MAX_OBJECTS_PER_IMAGE:
          raise _too_many()
      if event in ("start_map", "start_array"):
        listing = listing or (level == 1 and key == "shapes" and event == "start_array")
        level += 1
        if level > MAX_JSON_DEPTH:
          raise depth.too_deep(MAX_JSON_DEPTH)
      elif event in ("end_map", "end_array"):
        level -= 1
        if listing and level == 1:
          return  # the list is counted; json reads the rest (imageData, after it in labelme's)
      elif event == "map_key" and level == 1:
        key = value
  except ijson.JSONError:
    return


def load_json(data: bytes) -> Dict[str, Any]:
  """The top-level object of one LabelMe file of at most MAX_JSON_BYTES nesting at most
  MAX_JSON_DEPTH containers, with at most MAX_OBJECTS_PER_IMAGE shapes; InputError
  ('too_large', 'too_deep', 'malformed_json', 'too_many_objects': the file's one image's;
  'not_labelme': the file's)."""
  if len(data) > MAX_JSON_BYTES:
    raise InputError("parse", "too_large", f"the JSON file has {len(data)} bytes, over the "
                     f"{MAX_JSON_BYTES} a LabelMe file may have")
  check_shape_count(data)
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
  if len(doc["shapes"]) > MAX_OBJECTS_PER_IMAGE:  # what check_shape_count left to json
    raise _too_many(len(doc["shapes"]))
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


def embedded_key(json_relative: str, image_path: Optional[str], separate_root: bool) -> str:
  """The key of an image taken from imageData: imagePath's name as it would be looked up (its
  first candidate that is a clean relative name; no file is looked at), else the JSON's name
  without .json, as when imagePath names the JSON itself (labelme's tutorial file does)."""
  stem = posixpath.splitext(json_relative)[0]
  for name in image_candidates(json_relative, image_path, separate_root) if image_path else []:
    try:
      key = paths.clean_name(name)
    except InputError:
      continue
    return stem if key == json_relative else key
  return stem
