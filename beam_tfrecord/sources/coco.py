"""COCO instances JSON (images, annotations, categories), parsed on workers with ijson.

A COCO file can be ~450 MB (train2017), so the launcher never loads it: the pipeline starts
from a list of (file, section) tasks, and each worker streams one section of one file with
ijson, emitting small records. Images and their annotations meet in a CoGroupByKey.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord import paths
from beam_tfrecord.model import (Box, ErrorRecord, ImageAnnotation, InputError,
                                 ObjectAnnotation)
from beam_tfrecord.sources import SourceOutput

SECTIONS = ("images", "annotations", "categories")


def _number(value: Any, field: str) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise InputError("parse", "wrong_type", f"{field} must be a number, got {value!r}")
  return float(value)


def _int_id(value: Any, field: str) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
    raise InputError("parse", "wrong_type", f"{field} must be an integer, got {value!r}")
  return int(value)


def _require(record: Any, field: str, kind: str) -> Any:
  if not isinstance(record, dict):
    raise InputError("parse", "wrong_type", f"{kind} entry must be an object, got {record!r:.80}")
  if field not in record:
    raise InputError("parse", "missing_field", f"{kind} entry has no {field!r}: {record!r:.200}")
  return record[field]


def parse_image(record: Any) -> Tuple[int, str, Optional[int], Optional[int]]:
  """(id, file_name, width, height) of one entry of `images`."""
  image_id = _int_id(_require(record, "id", "image"), "image id")
  file_name = _require(record, "file_name", "image")
  if not isinstance(file_name, str):
    raise InputError("parse", "wrong_type", f"image {image_id} file_name is {file_name!r}")
  width, height = record.get("width"), record.get("height")
  width = _int_id(width, "image width") if width is not None else None
  height = _int_id(height, "image height") if height is not None else None
  return image_id, file_name, width, height


def parse_annotation(record: Any) -> Tuple[int, int, Box, bool, Optional[float]]:
  """(image_id, category_id, box, is_crowd, area) of one entry of `annotations`."""
  image_id = _int_id(_require(record, "image_id", "annotation"), "annotation image_id")
  category_id = _int_id(_require(record, "category_id", "annotation"), "annotation category_id")
  bbox = _require(record, "bbox", "annotation")
  if not isinstance(bbox, (list, tuple)) or len(bbox) != 4:
    raise InputError("parse", "wrong_type", f"annotation bbox must be [x, y, w, h], got {bbox!r}")
  x, y, w, h = (_number(v, "bbox value") for v in bbox)
  iscrowd = record.get("iscrowd", 0)
  if iscrowd not in (0, 1, True, False):
    raise InputError("parse", "wrong_type", f"iscrowd must be 0 or 1, got {iscrowd!r}")
  area = record.get("area")
  area = _number(area, "area") if area is not None else None
  return image_id, category_id, Box(x, y, x + w, y + h), bool(iscrowd), area


def parse_category(record: Any) -> Tuple[int, str]:
  category_id = _int_id(_require(record, "id", "category"), "category id")
  name = _require(record, "name", "category")
  if not isinstance(name, str) or not name:
    raise InputError("parse", "wrong_type", f"category {category_id} name is {name!r}")
  return category_id, name


def stream_section(fileobj, section: str) -> Iterator[Any]:
  """Yield the entries of one top-level array of a COCO JSON without loading the file."""
  import ijson
  yield from ijson.items(fileobj, f"{section}.item", use_float=True)


class _ParseSection(beam.DoFn):
  """(split, json_uri, image_root, section) -> tagged small records."""

  def __init__(self, allow_absolute: bool):
    self.allow_absolute = allow_absolute

  def process(self, task):
    from apache_beam.io.filesystems import FileSystems
    split, uri, image_root, section = task
    parse = {"images": parse_image, "annotations": parse_annotation,
             "categories": parse_category}[section]
    index = -1
    try:
      with FileSystems.open(uri, compression_type="uncompressed") as f:
        for index, record in enumerate(stream_section(f, section)):
          try:
            parsed = parse(record)
          except InputError as e:
            level = {"images": "image", "annotations": "object"}.get(section, "file")
            yield beam.pvalue.TaggedOutput("errors", e.record(f"{uri}#{section}[{index}]",
                                                              level=level))
            continue
          if section == "images":
            image_id, file_name, width, height = parsed
            yield ((uri, image_id), (split, image_root, file_name, width, height))
          elif section == "annotations":
            # the index keeps the file's object order through the shuffle
            yield beam.pvalue.TaggedOutput("objects", ((uri, parsed[0]), (index, *parsed[1:])))
          else:
            yield beam.pvalue.TaggedOutput("categories", (uri, parsed))
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, level="file"))
    except Exception as e:  # ijson errors, unreadable file: report, keep what was read
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="malformed_json", level="file",
          message=f"{section} after entry {index + 1}: {type(e).__name__}: {e}"))


def join_image(element, categories: Dict[Tuple[str, int], str], allow_absolute: bool):
  """((uri, image_id), {'image': [...], 'objects': [...]}) -> ImageAnnotation | errors."""
  (uri, image_id), grouped = element
  images, objects = list(grouped["image"]), list(grouped["objects"])
  source = f"{uri}#image_id={image_id}"
  if not images:
    yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
        source=source, stage="parse", reason="unknown_image_id", level="object",
        message=f"{len(objects)} annotation(s) refer to image id {image_id}, "
        "which is not in `images`"))
    return
  if len(images) > 1:
    yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
        source=source, stage="parse", reason="duplicate_image_id", level="warning",
        message=f"image id {image_id} appears {len(images)} times; the first is used"))
  split, image_root, file_name, width, height = sorted(images, key=repr)[0]
  try:
    key, image_uri = paths.resolve(image_root, file_name, allow_absolute)
  except InputError as e:
    yield beam.pvalue.TaggedOutput("errors", e.record(source, file_name))
    return
  objs: List[ObjectAnnotation] = []
  for _, category_id, box, is_crowd, area in sorted(objects, key=lambda o: o[0]):
    name = categories.get((uri, category_id))
    if name is None:
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=source, stage="parse", reason="unknown_category_id", key=key, level="object",
          message=f"annotation of {file_name!r} has category_id {category_id}, "
          "which is not in `categories`"))
      continue
    objs.append(ObjectAnnotation(label=name, box=box, is_crowd=is_crowd, area=area))
  yield ImageAnnotation(key=key, uri=image_uri, source_id=str(image_id), source=uri,
                        objects=tuple(objs), split=split, width=width, height=height)


class ReadCoco(beam.PTransform):
  """COCO instances JSON files -> SourceOutput.

  In: `inputs`, a list of (split or None, json_uri, image_root). Out: one ImageAnnotation per
  COCO image (images without annotations included), ErrorRecords, and (name, category_id)
  pairs, so that label ids keep COCO's category ids.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]],
               allow_absolute: bool = False):
    super().__init__()
    self.inputs = list(inputs)
    self.allow_absolute = allow_absolute

  def expand(self, root):
    tasks = [(split, uri, image_root, section)
             for split, uri, image_root in self.inputs for section in SECTIONS]
    parsed = (root
              | "Tasks" >> beam.Create(tasks)
              | "Spread" >> beam.Reshuffle()
              | "Stream" >> beam.ParDo(_ParseSection(self.allow_absolute)).with_outputs(
                  "objects", "categories", "errors", main="images"))
    by_key = (parsed.categories
              | "CategoryKeys" >> beam.Map(lambda kv: ((kv[0], kv[1][0]), kv[1][1])))
    joined = ({"image": parsed.images, "objects": parsed.objects}
              | "GroupByImage" >> beam.CoGroupByKey()
              | "Join" >> beam.FlatMap(join_image, beam.pvalue.AsDict(by_key),
                                       self.allow_absolute).with_outputs("errors", main="images"))
    errors = ((parsed.errors, joined.errors) | "Errors" >> beam.Flatten())
    names = parsed.categories | "Names" >> beam.Map(lambda kv: (kv[1][1], kv[1][0]))
    return SourceOutput(images=joined.images, errors=errors, categories=names)
