"""YOLO labels: Ultralytics `data.yaml` and Darknet `obj.data` + `obj.names`.

One `.txt` per image, one line per object (labels.py): a box, a segmentation polygon (with
--include-masks rasterized into the mask) or a pose line. The label file of an image is found
the Ultralytics way (listing.py). Boxes stay normalized (Box.normalized): the source never
reads an image. YOLO class i becomes label id i + 1 (0 is background in the TF OD API), or i
under a schema whose ids start at 0.

The dataset description is read when the pipeline is built (a problem with it is a
UsageError); image listings and label files are read on workers.

  dataset.py    the dataset yaml / obj.data (and obj.names): names, splits, the root
  labels.py     label paths and label lines as objects
  listing.py    images listed and paired with their label files; orphan label files
  detection.py  --format auto and the pre-run check
  transform.py  ReadYolo, the Beam transform (imported when the pipeline is built)
This module is the source protocol (sources/registry.py) and imports no Beam.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple

from beam_tfrecord.sources.yolo.dataset import (DARKNET_NAMES, DARKNET_SPLITS,
                                                YAML_SPLITS, YoloDataset,
                                                detect_file, load, load_darknet,
                                                load_data_yaml,
                                                parse_darknet_data,
                                                parse_kpt_shape, parse_names)
from beam_tfrecord.sources.yolo.detection import check, detect
from beam_tfrecord.sources.yolo.labels import (is_label_file, label_dir,
                                               label_path, line_shape,
                                               parse_label_text, parse_line)
from beam_tfrecord.sources.yolo.listing import is_absolute, trailing_candidates
from beam_tfrecord.storage import paths

if TYPE_CHECKING:
  from beam_tfrecord.sources.base import SourceOutput

__all__ = [
    "DARKNET_NAMES", "DARKNET_SPLITS", "EXPORT_WHAT", "IMAGES", "MASKS", "YAML_SPLITS",
    "YoloDataset", "check", "detect", "detect_file", "fingerprint_patterns", "is_absolute",
    "is_label_file", "label_dir", "label_path", "line_shape", "load", "load_darknet",
    "load_data_yaml", "parse_darknet_data", "parse_kpt_shape", "parse_label_text",
    "parse_line", "parse_names", "possible_splits", "read", "trailing_candidates"]

MASKS = True  # segmentation polygons: --include-masks rasterizes them
OPTIONS = ()  # only the common settings (sources/options.COMMON)
IMAGES = False  # the yaml / obj.data names the images: --images is refused, never ignored
EXPORT_WHAT = "data.yaml"  # what each split folder of an export holds


def __getattr__(name: str):
  if name == "ReadYolo":  # Beam: only when asked for
    from beam_tfrecord.sources.yolo.transform import ReadYolo
    return ReadYolo
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def possible_splits(config) -> Optional[set]:
  return None  # not looked at before the run


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  from beam_tfrecord.sources.yolo.transform import ReadYolo
  datasets = [load(uri, split) for split, uri in
              (paths.parse_assignment(item) for item in config.inputs)]
  source = root | "ReadYolo" >> ReadYolo(datasets, first_id, config.allow_absolute_paths,
                                         config.follow_symlinks,
                                         include_masks=config.include_masks)
  return source, sorted({s for d in datasets for s, _ in d.splits})


def fingerprint_patterns(config) -> Tuple[List[Tuple[str, str]], List[str]]:
  """The dataset yaml / obj.data, the dataset root, each image directory and its label
  directory (or list file)."""
  patterns: List[Tuple[str, str]] = []
  for item in config.inputs:
    split, uri = paths.parse_assignment(item)
    dataset = load(uri, split)
    patterns.append(("tree", paths.join(dataset.root, "**")))
    for _, entries in dataset.splits:  # entries may lie outside the root (../x)
      for entry in entries:
        patterns.append(("file", entry) if entry.endswith(".txt") else
                        ("tree", paths.join(entry, "**")))
        if not entry.endswith(".txt"):
          patterns.append(("tree", paths.join(label_dir(entry), "**")))
    if uri.endswith((".yaml", ".yml", ".data")):
      patterns.append(("file", uri))
  return patterns, []
