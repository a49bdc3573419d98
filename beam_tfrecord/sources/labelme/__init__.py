"""LabelMe (wkentaro/labelme 3.x to 5.x): a folder of per-image JSON files, searched
recursively, or one `SPLIT=DIR` folder per split.

Each JSON holds `shapes` [{label, points [[x, y], ...], group_id, shape_type, ...}],
`imagePath` (relative to the JSON's folder, '\\' in files written on Windows), `imageData`
(the image as base64, or null), `imageHeight` and `imageWidth`. Points are pixels of the
image as LabelMe shows it (EXIF applied). A `rectangle` (two corners in any order) is a box;
a `polygon` (3+ points) gives its bounding box and, with --include-masks, its mask. Shapes
that share an integer `group_id` in one file are one object: the union of their boxes and of
their masks; a group whose shapes carry different labels is an object-level error naming the
group. `circle`, `line`, `linestrip`, `point`, `mask` (5.x AI masks) and any other type are
`unsupported_shape` warnings naming the type and the file, never dropped silently. Shapes
labelled `__ignore__` (labelme2coco's ignore regions) are skipped: they are no class.
A 3.x file without `shape_type` has polygons (what labelme read it as).

The image, by labelme's own rule (LabelFile.load): `imageData` whenever it is there (not
null), whatever imagePath names (labelme's tutorial file names the JSON itself); its uri is
the JSON's + storage.files.EMBEDDED, which the writer decodes where it reads images (the JSON,
4/3 of the image and at most MAX_JSON_BYTES, read and parsed again with an image file's checks
in place of an image file), and its key is
imagePath's name (else the JSON's name without .json). Nothing is extracted to disk. imageData
that is empty or not a string is bad_image_data here, not base64 where it is decoded. With
imageData null, the image file: without --images the image root is the input folder, and the
image is imagePath joined to the JSON's folder; when that is not there (or leaves the input
folder), the file of the same base name beside the JSON. So with annotations/ and images/
side by side and imagePath `../images/x.jpg`, give their parent folder as --input. With
--images DIR, the image is imagePath's base name in DIR under the JSON's sub-folder, then
directly in DIR (as a folder of VOC XMLs).

A file of more than MAX_OBJECTS_PER_IMAGE (sources/base) shapes is too_many_objects, its one
image rejected: the shapes are counted while streaming, before json builds them.

Scale: the launcher reads nothing but, for --format auto, the heads of a few JSONs. Workers
list the input: one task per first-level sub-folder (its largest element: the names in one
sub-folder, ~100 bytes each), then parse one JSON per element: memory is one file, at most
MAX_JSON_BYTES read and parsed (json's objects: ~2-35x the text of the shapes; imageData is
one string), and the ImageAnnotation it yields is that image's objects (at most
MAX_OBJECTS_PER_IMAGE). Nothing gathers per-image state.

  document.py   one JSON read within its budgets (bytes, depth, shapes); where its image is
  shapes.py     its `shapes` to objects
  detection.py  --format auto: the heads of a few JSONs
  transform.py  ReadLabelMe, the Beam transform (imported when the pipeline is built)
This module is the source protocol (sources/registry.py) and imports no Beam.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from beam_tfrecord.records.model import DEFAULT_SPLIT
from beam_tfrecord.sources.labelme.detection import (DETECT_HEAD_BYTES, detect, head_keys,
                                                     is_labelme_head)
from beam_tfrecord.sources.labelme.document import (check_shape_count, embedded_key,
                                                    image_candidates, image_name, image_size,
                                                    load_json)
from beam_tfrecord.sources.labelme.shapes import parse_shapes
from beam_tfrecord.storage import paths

__all__ = ["MASKS", "EXPORT_WHAT", "detect", "check", "possible_splits", "read",
           "fingerprint_patterns", "DETECT_HEAD_BYTES", "head_keys", "is_labelme_head",
           "check_shape_count", "embedded_key", "image_candidates", "image_name",
           "image_size", "load_json",
           "parse_shapes"]

MASKS = True  # polygons (and rectangles) become masks with --include-masks
OPTIONS = ()  # only the common settings (sources/options.COMMON)
EXPORT_WHAT = "LabelMe JSONs"  # what each split folder of an export holds


def _assigned(inputs: Sequence[str]) -> List[Tuple[Optional[str], str]]:
  from beam_tfrecord.errors import UsageError
  assigned = [paths.parse_assignment(item) for item in inputs]
  if len(assigned) > 1 and not all(split for split, _ in assigned):
    raise UsageError(f"--format labelme takes one --input (a folder of LabelMe JSONs), or one "
                     f"SPLIT=DIR per split; got {len(inputs)} inputs")
  return assigned


def _has_json(root: str) -> Optional[bool]:
  """Whether a local folder holds a .json anywhere below (stops at the first); None for an
  object store (not listed on the launcher)."""
  if paths.is_remote(root):
    return None
  import os
  for folder, dirs, names in os.walk(root):
    dirs[:] = [d for d in dirs if not d.startswith(".")]
    if any(n.lower().endswith(".json") and not n.startswith(".") for n in names):
      return True
  return False


def check(config) -> None:
  """Each input is a folder holding LabelMe JSONs (a local one is walked to its first .json)."""
  from beam_tfrecord.errors import UsageError
  from beam_tfrecord.sources.checks import check_directory
  for _, root in _assigned(config.inputs):
    check_directory(root, "--input")
    if _has_json(root) is False:
      raise UsageError(f"--input {root} holds no .json file: not a folder of LabelMe JSONs")


def possible_splits(config) -> Optional[set]:
  return {split or DEFAULT_SPLIT for split, _ in _assigned(config.inputs)}


def read(root, config, *, first_id: int, local: bool) -> Tuple[Any, List[str]]:
  """(SourceOutput, split names): ReadLabelMe over every input folder."""
  from beam_tfrecord.sources.labelme.transform import ReadLabelMe
  inputs = config.input_image_roots()  # (split, folder, its --images or None)
  _assigned(config.inputs)
  source = root | "ReadLabelMe" >> ReadLabelMe(
      inputs, config.allow_absolute_paths, config.follow_symlinks, config.include_masks)
  return source, sorted(split for split, _, _ in inputs if split)


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Everything below each input folder (JSONs and, without --images, the images)."""
  return [("tree", paths.join(paths.parse_assignment(item)[1], "**"))
          for item in config.inputs], []
