"""--layout tfds: the output as TensorFlow Datasets writes a prepared dataset, so that
`tfds.builder_from_directory("OUT/NAME/VERSION")` and `tfds.builder("NAME", data_dir="OUT")`
load it. Pure and Beam-free; TFDS itself is never imported (it is a test dependency only).

What TFDS reads (tensorflow_datasets/core: dataset_info.py, read_only_builder.py, naming.py,
features/*.py; checked against files TFDS 4.9 wrote for builders of the same features):
  OUT/NAME/VERSION/NAME-SPLIT.tfrecord-00000-of-0000N   the shards (filepathTemplate below;
                      .array_record- with --file-format array_record, as TFDS names them)
  dataset_info.json   DatasetInfo as JSON: name, version, fileFormat, description, citation,
                      splits [{name, numBytes, shardLengths, filepathTemplate}], supervisedKeys
  features.json       the FeaturesDict as JSON (pythonClassName + the feature's own message)
  objects-label.labels.txt / label.labels.txt   a ClassLabel's names, one a line, in id order
The manifest, the card and label_map.pbtxt sit beside them: TFDS reads only the files above.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Dict, List, Mapping, Optional

from beam_tfrecord.records.manifest import SplitInfo

TEMPLATE = "{name}-{{split}}.{file_format}-{{index:05d}}-of-{{num_shards:05d}}"
FILEPATH_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"  # TFDS's default
DATASET_INFO = "dataset_info.json"
FEATURES = "features.json"
# TFDS's own rules (core/naming.py, core/utils/version.py)
NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# TFDS's rule for a dataset version (tensorflow_datasets/core/utils/version.py,
# _VERSION_RESOLVED_REG: MAJOR.MINOR.PATCH of _NO_LEADING_ZEROS = r"\d|[1-9]\d*"), copied: the
# launcher does not import TFDS. ASCII digits only (TFDS's \d also takes other scripts' digits,
# which it then prints as ASCII: a directory it would not find); fullmatch: no trailing newline.
VERSION_RE = re.compile(r"(?:\d|[1-9]\d*)\.(?:\d|[1-9]\d*)\.(?:\d|[1-9]\d*)", re.ASCII)
# --schema values of this layout (schemas/tfds_detection.py, schemas/tfds_image_folder.py)
DETECTION, IMAGE_FOLDER = "tfds-detection", "tfds-image-folder"
SCHEMAS = (DETECTION, IMAGE_FOLDER)

_FEATURES_PKG = "tensorflow_datasets.core.features."
_IMAGE = _FEATURES_PKG + "image_feature.Image"
_TEXT = _FEATURES_PKG + "text_feature.Text"
_TENSOR = _FEATURES_PKG + "tensor_feature.Tensor"
_CLASS_LABEL = _FEATURES_PKG + "class_label_feature.ClassLabel"
_BBOX = _FEATURES_PKG + "bounding_boxes.BBoxFeature"
_SEQUENCE = _FEATURES_PKG + "sequence_feature.Sequence"
_DICT = _FEATURES_PKG + "features_dict.FeaturesDict"


def check_options(config) -> None:
  """ValueError (exit 2) for options that do not fit the layout."""
  from beam_tfrecord.plan import naming
  if not config.dataset_name:
    raise ValueError("--layout tfds needs --dataset-name NAME (the name tfds.builder loads)")
  if not NAME_RE.match(config.dataset_name):
    raise ValueError(f"--dataset-name {config.dataset_name!r}: TFDS names are lower case "
                     "letters, digits and '_', starting with a letter (e.g. my_boxes)")
  if not VERSION_RE.fullmatch(config.dataset_version):
    raise ValueError(f"--dataset-version {config.dataset_version!r}: give MAJOR.MINOR.PATCH, "
                     "e.g. 1.0.0")
  if config.sink != "shards":
    raise ValueError("--layout tfds needs --sink shards (TFDS needs each shard's length)")
  if config.shard_name_template not in (naming.DEFAULT_SHARD_NAME_TEMPLATE,
                                        naming.default_template(config.file_format),
                                        template(config)):
    raise ValueError("--layout tfds names its shards as TFDS does; leave out "
                     "--shard-name-template")
  if config.schema is not None and config.schema not in SCHEMAS:
    raise ValueError(f"--layout tfds writes TFDS's features (--schema {' or '.join(SCHEMAS)}, "
                     f"chosen by the source); --schema {config.schema} does not fit it")
  if config.feature_names:
    raise ValueError("--layout tfds writes TFDS's own feature names; leave out --feature-names")


def resolve(config, image_level: bool):
  """The config of a tfds run: the output directory OUT/NAME/VERSION, TFDS's shard names and
  the schema of the source's kind (idempotent: a resolved config is returned as it is)."""
  from beam_tfrecord.storage import paths
  if config.tfds_root is not None:
    return config
  schema = config.schema or (IMAGE_FOLDER if image_level else DETECTION)
  output = paths.join(paths.join(config.output, config.dataset_name), config.dataset_version)
  return dataclasses.replace(config, schema=schema, output=output, tfds_root=config.output,
                             shard_name_template=template(config))


def template(config) -> str:
  """TFDS's shard names: NAME-SPLIT.FILE_FORMAT-00000-of-0000N."""
  return TEMPLATE.format(name=config.dataset_name, file_format=config.file_format)


def check_label_ids(label_map: Mapping[str, int]) -> None:
  """A ClassLabel numbers its names 0..N-1: a --label-map with other ids cannot be one."""
  ids = sorted(label_map.values())
  if ids != list(range(len(ids))):
    raise ValueError("--layout tfds: the label map's ids must be 0, 1, ... N-1 (a TFDS "
                     f"ClassLabel), not {ids[:8]}{' ...' if len(ids) > 8 else ''}")


def label_file(schema_option: str) -> str:
  """The names file of the schema's ClassLabel (TFDS: the feature's path, '/' as '-')."""
  return "objects-label.labels.txt" if schema_option == DETECTION else "label.labels.txt"


def label_names(label_map: Mapping[str, int]) -> str:
  return "".join(name + "\n" for name, _ in sorted(label_map.items(), key=lambda kv: kv[1]))


def _tensor(dtype: str, *shape: int) -> Dict[str, Any]:
  dimensions = {"dimensions": [str(n) for n in shape]} if shape else {}
  return {"pythonClassName": _TENSOR, "tensor": {"dtype": dtype, "encoding": "none",
                                                 "shape": dimensions}}


def _image(channels: int, encoding: Optional[str] = None) -> Dict[str, Any]:
  image: Dict[str, Any] = {"dtype": "uint8",
                           "shape": {"dimensions": ["-1", "-1", str(channels)]}}
  if encoding:
    image["encodingFormat"] = encoding
  return {"pythonClassName": _IMAGE, "image": image}


def _class_label(num_classes: int) -> Dict[str, Any]:
  return {"pythonClassName": _CLASS_LABEL, "classLabel": {"numClasses": str(num_classes)}}


def features(schema_option: str, num_classes: int, include_masks: bool = False,
             image_encoding: Optional[str] = None,
             num_keypoints: Optional[int] = None) -> Dict[str, Any]:
  """features.json: TFDS coco/2017's features (objects with area, bbox, id, is_crowd, label;
  with masks LVIS's `segmentation`, a 1-channel PNG per object; with `num_keypoints` K,
  `keypoints` (K, 2) [y, x] and `keypoint_visibility` (K,)), or image_folder's."""
  if schema_option == IMAGE_FOLDER:
    top = {"image": _image(3, image_encoding), "image/filename": {
        "pythonClassName": _TEXT, "text": {}}, "label": _class_label(num_classes)}
  else:
    objects = {
        "area": _tensor("int64"),
        "bbox": {"pythonClassName": _BBOX, "boundingBox": {
            "bboxFormat": "REL_YXYX", "dtype": "float32", "shape": {"dimensions": ["4"]}}},
        "id": _tensor("int64"),
        "is_crowd": _tensor("bool"),
        "label": _class_label(num_classes),
    }
    if include_masks:
      objects["segmentation"] = _image(1, "png")
    if num_keypoints:
      objects["keypoints"] = _tensor("float32", num_keypoints, 2)
      objects["keypoint_visibility"] = _tensor("int64", num_keypoints)
    top = {"image": _image(3, image_encoding),
           "image/filename": {"pythonClassName": _TEXT, "text": {}},
           "image/id": _tensor("int64"),
           "objects": {"pythonClassName": _SEQUENCE, "sequence": {
               "feature": {"pythonClassName": _DICT, "featuresDict": {"features": objects}},
               "length": "-1"}}}
  return {"pythonClassName": _DICT, "featuresDict": {"features": top}}


def dataset_info(name: str, version: str, splits: Mapping[str, SplitInfo], schema_option: str,
                 description: str, citation: str = "", file_format: str = "tfrecord"
                 ) -> Dict[str, Any]:
  """dataset_info.json from the manifest's split entries: each split's shard lengths in
  shard order and its bytes."""
  entries: List[Dict[str, Any]] = []
  for split, entry in sorted(splits.items()):
    shards = sorted(entry.shards, key=lambda s: s.path)  # names sort in index order
    entries.append({"filepathTemplate": FILEPATH_TEMPLATE, "name": split,
                    "numBytes": str(sum(s.bytes for s in shards)),
                    "shardLengths": [str(s.examples) for s in shards]})
  info: Dict[str, Any] = {"description": description, "fileFormat": file_format, "name": name,
                          "splits": entries, "version": version}
  if citation:
    info["citation"] = citation
  if schema_option == IMAGE_FOLDER:  # as image_folder: as_supervised gives (image, label)
    info["supervisedKeys"] = {"tuple": {"items": [{"featureKey": "image"},
                                                  {"featureKey": "label"}]}}
  return info
