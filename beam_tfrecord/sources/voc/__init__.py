"""Pascal VOC: one XML per image under Annotations/, optional ImageSets/Main/<split>.txt; or a
folder of LabelImg XMLs (searched recursively) with the images beside them or under --images
(the raccoon dataset's layout, and a Roboflow VOC export's split folders).

Fields are found by tag name, never by position; coordinates may be floats; difficult,
truncated and pose are optional. The image is located by <filename> under the image root;
<folder> and <path> inside the XML are ignored (they name the annotator's machine).
XML is parsed with defusedxml, so entity bombs and external entities are refused.

  annotation.py  one annotation XML: filename, size, objects; its size and depth budgets
  image_sets.py  ImageSets/Main lists as splits; listed ids without an XML
  layout.py      the XMLs of an input and where an XML's image may lie
  detection.py   --format auto
  checks.py      the pre-run checks
  class_pngs.py  SegmentationClass/ PNGs and ImageSets/Segmentation lists (--schema deeplab)
  transform.py   ReadVoc and ReadVocSegmentation, the Beam transforms, and read (imported
                 when the pipeline is built)
This module is the source protocol (sources/registry.py) and imports no Beam.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

from beam_tfrecord.records.model import DEFAULT_SPLIT
from beam_tfrecord.sources.voc import class_pngs
from beam_tfrecord.sources.voc.annotation import (MAX_XML_BYTES, MAX_XML_DEPTH,
                                                  parse_xml, read_xml)
from beam_tfrecord.sources.voc.checks import check, check_input
from beam_tfrecord.sources.voc.detection import detect
from beam_tfrecord.sources.voc.image_sets import (UNIONS, missing_annotations,
                                                  parse_image_set,
                                                  parse_image_sets,
                                                  resolve_split, split_files,
                                                  split_names)
from beam_tfrecord.sources.voc.layout import (annotation_files,
                                              image_candidates, is_flat,
                                              xml_stem)
from beam_tfrecord.storage import paths

if TYPE_CHECKING:
  from beam_tfrecord.sources.base import SourceOutput

__all__ = [
    "CLASS_MASKS", "EXPORT_WHAT", "MASKS", "MAX_XML_BYTES", "MAX_XML_DEPTH", "UNIONS",
    "annotation_files", "check", "check_input", "detect", "fingerprint_patterns", "image_candidates", "is_flat",
    "missing_annotations", "parse_image_set", "parse_image_sets", "parse_xml",
    "possible_splits", "read", "read_xml", "resolve_split", "split_files", "split_names",
    "xml_stem"]

MASKS = False
CLASS_MASKS = True  # SegmentationClass/ PNGs, read when the schema paints classes (deeplab)
# ImageSets lists (unless --split assigns splits); the schema says which annotations are read,
# and the class options are refused with class PNGs
OPTIONS = ("image_sets", "split", "schema", "classes", "class_map")
EXPORT_WHAT = "XMLs beside the images"  # what each split folder of an export holds


def possible_splits(config) -> Optional[set]:
  assigned = [paths.parse_assignment(item) for item in config.inputs]
  if len(assigned) != 1 or assigned[0][0]:
    return {split or DEFAULT_SPLIT for split, _ in assigned}
  if config.image_sets:
    return set(split_names(parse_image_sets(config.image_sets)))
  if class_pngs.wanted(config):
    return set(split_names(split_files(config.inputs[0], class_pngs.SETS_FOLDER))) or {
        DEFAULT_SPLIT}
  if is_flat(config.inputs[0]):
    return {DEFAULT_SPLIT}
  return set(split_names(split_files(config.inputs[0]))) or {DEFAULT_SPLIT}


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  from beam_tfrecord.sources.voc import transform
  return transform.read(root, config, first_id=first_id, local=local)


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """Annotations/ (deeplab: SegmentationClass/) and ImageSets/ under the VOC directory; the
  image root (default VOC/JPEGImages); a folder of XMLs: everything below it."""
  given = bool(config.images)
  patterns: List[Tuple[str, str]] = []
  implied: List[str] = []
  for item in config.inputs:
    _, voc = paths.parse_assignment(item)
    if is_flat(voc):  # a folder of XMLs: XMLs and (unless --images) images anywhere below
      patterns.append(("tree", paths.join(voc, "**")))
      continue
    annotations = class_pngs.CLASS_FOLDER if class_pngs.wanted(config) else "Annotations"
    patterns.append(("tree", paths.join(paths.join(voc, annotations), "**")))
    patterns.append(("tree", paths.join(paths.join(voc, "ImageSets"), "**")))
    if not given and not implied:
      implied.append(paths.join(voc, "JPEGImages"))
  return patterns, implied
