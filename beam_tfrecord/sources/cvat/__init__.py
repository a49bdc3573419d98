"""CVAT for images 1.1: the `annotations.xml` of a task, job or project export.

The export (a zip unpacked) is `annotations.xml` beside `images/`: a task or job export keeps
each image at images/<name>, a project export at images/<subset>/<name>. The XML holds
`<version>1.1</version>`, then `<meta>` (the `<task>`, `<job>` or `<project>`, its `<labels>`,
and for a task or job its `<subset>`), then one `<image id name [subset task_id] width
height>` per image with its shapes. `<box>` and `<polygon>` become objects (a rotated box:
the box enclosing it); elements of one image sharing a non-zero `group_id` are one object
(the union of their boxes, and with --include-masks of their polygons; a box's mask is its
rectangle). `occluded` becomes image/object/truncated, the only field of the od-api schema
for it; attributes, z_order and source are not kept. `<polyline>`, `<points>`, `<tag>`,
`<skeleton>`, `<ellipse>`, `<cuboid>`, `<mask>` and any other element are reported
(unsupported_shape, a warning), `<track>`s (CVAT for video) too (unsupported_track).

A label the meta does not list, an empty label, differing labels in one group are object
errors. The split is the --input's SPLIT= prefix, else the image's `subset` (a project), else
the task's or job's `<subset>`, lower-cased ('Train' -> 'train'; CVAT's 'default' is no
subset: 'train'); a subset that is no valid split name is an image error (bad_subset).

A worker first reads the `<meta>` of a file and cuts the file into byte ranges of RANGE_BYTES
(the launcher reads only a HEAD_BYTES head in check and detect; a DTD there is refused, exit
2); any worker then reads a range. Largest element: one image's annotation; memory: one
image's XML + one 64 kB chunk. An image over MAX_ELEMENT_BYTES of XML, nested deeper than
MAX_XML_DEPTH, of more than MAX_OBJECTS_PER_IMAGE elements (sources/base; no more are kept)
or with a malformed width or height is an image error naming it (too_large, too_deep,
too_many_objects, wrong_type): the range's other images are read.

  shapes.py       one <image>'s boxes and polygons as objects, its subset as a split
  document.py     the file (or one range of it) streamed: <version>, <meta>, each <image>
  byte_ranges.py  cutting the file into ranges by <image> tag; the element budget
  detection.py    which XML an --input means; --format auto
  checks.py       the pre-run check
  transform.py    ReadCvat, the Beam transform (imported when the pipeline is built)
This module is the source protocol (sources/registry.py) and imports no Beam.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

from beam_tfrecord.sources.cvat.byte_ranges import (declared_encoding,
                                                    range_bytes, ranges)
from beam_tfrecord.sources.cvat.checks import check
from beam_tfrecord.sources.cvat.detection import (EXPORT_FILE, annotation_file,
                                                  default_image_root, detect,
                                                  is_cvat_xml)
from beam_tfrecord.sources.cvat.document import (HEAD_BYTES, MAX_LABELS,
                                                 MAX_XML_DEPTH, VERSION, Meta,
                                                 head_version, parse_range,
                                                 read_meta)
from beam_tfrecord.sources.cvat.shapes import (SHAPES, ParsedImage,
                                               parse_image, parse_points,
                                               parse_shape, parse_skeleton,
                                               rotated_corners, split_of)
from beam_tfrecord.storage import paths

if TYPE_CHECKING:
  from beam_tfrecord.sources.base import SourceOutput

__all__ = [
    "EXPORT_FILE", "HEAD_BYTES", "MASKS", "MAX_LABELS", "MAX_XML_DEPTH", "Meta", "ParsedImage",
    "SHAPES", "VERSION", "annotation_file", "check", "declared_encoding",
    "default_image_root", "detect", "fingerprint_patterns", "head_version", "is_cvat_xml",
    "parse_image", "parse_points", "parse_range", "parse_shape", "parse_skeleton",
    "possible_splits",
    "range_bytes", "ranges", "read", "read_meta", "rotated_corners", "split_of"]

MASKS = True  # polygons: --include-masks rasterizes them
OPTIONS = ()  # only the common settings (sources/options.COMMON)


def _inputs(config) -> List[Tuple[Optional[str], str, str]]:
  """(split, annotations.xml, image root) of each --input (root: its --images, else the
  export's images/ folder, else the XML's folder)."""
  result = []
  for split, uri, images in config.input_image_roots():
    xml = annotation_file(uri)
    result.append((split, xml, images or default_image_root(xml)))
  return result


def possible_splits(config) -> Optional[set]:
  assigned = [paths.parse_assignment(item)[0] for item in config.inputs]
  if all(assigned):
    return set(assigned)
  return None  # subsets are read on workers


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  from beam_tfrecord.sources.cvat.transform import ReadCvat
  inputs = _inputs(config)
  source = root | "ReadCvat" >> ReadCvat(inputs, config.allow_absolute_paths,
                                         config.follow_symlinks, config.include_masks)
  return source, sorted({split for split, _, _ in inputs if split})


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Each annotations.xml; the image roots when --images does not name them."""
  inputs = _inputs(config)
  implied = [] if config.images else sorted({r for _, _, r in inputs})
  return [("file", xml) for _, xml, _ in inputs], implied
