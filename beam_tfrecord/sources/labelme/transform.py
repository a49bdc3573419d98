"""ReadLabelMe: the input folders listed on workers, one JSON parsed per element."""
from __future__ import annotations

import posixpath
from typing import List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.sources.base import SourceOutput, is_hidden
from beam_tfrecord.sources.labelme.document import (MAX_JSON_BYTES, embedded_key,
                                                    image_candidates, image_name, image_size,
                                                    load_json)
from beam_tfrecord.sources.labelme.shapes import parse_shapes
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import EMBEDDED, exists, list_dir, list_tree, read_text

def _list_tasks(task: Tuple[Optional[str], str, Optional[str]]):
  """(split, input folder, image root) -> (split, input, image root, sub-folder or '' for the
  folder's own files): the listing is spread over first-level sub-folders."""
  split, root, images = task
  subdirs, _ = list_dir(root)
  yield split, root, images, ""
  for d in subdirs:
    if not is_hidden(d):
      yield split, root, images, d


def _list_json(task) -> List[Tuple[Optional[str], str, Optional[str], str]]:
  """(split, input, image root, sub-folder) -> (split, input, image root, JSON relative to
  the input) for each visible .json there (any case)."""
  split, root, images, sub = task
  if not sub:
    names = list_dir(root)[1]
  else:
    names = [posixpath.join(sub, rel) for rel in list_tree(paths.join(root, sub))]
  return [(split, root, images, rel) for rel in names
          if rel.lower().endswith(".json") and not is_hidden(rel)]


class _ParseJson(beam.DoFn):
  """(split, input, image root, JSON relative) -> ImageAnnotation, and ErrorRecords."""

  def __init__(self, allow_absolute: bool, follow_symlinks: bool, include_masks: bool):
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def _locate(self, root: str, names: Sequence[str]) -> Tuple[str, str]:
    """(key, uri) of the first candidate that resolves inside the root and exists; existence
    is probed only when there are several. When none exists: the first candidate's refusal
    (a name leaving the root), else the first candidate, for locate to report as missing."""
    resolved, refused = [], []
    for name in names:
      try:
        resolved.append(paths.resolve(root, name, self.allow_absolute, self.follow_symlinks))
      except InputError as e:
        refused.append((name, e))
    if len(names) == 1 and resolved:
      return resolved[0]
    for key, uri in resolved:
      if exists(uri):
        return key, uri
    if refused and refused[0][0] == names[0]:
      e = refused[0][1]
      raise InputError(e.stage, e.reason, f"{e.message}; give the folder holding both the "
                       "JSONs and the images as --input, or --images DIR")
    return resolved[0]

  def process(self, task):
    try:
      yield from self._parse(task)
    except ImportError:  # a package missing from the worker: the job fails (model.py)
      raise
    except Exception as e:  # unforeseen: report it, never kill the job
      uri = paths.join(task[1], task[3])
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="unexpected_error", key=uri, level="image",
          message=f"{type(e).__name__}: {e}"))

  def _parse(self, task):
    split, input_root, image_root, rel = task
    uri = paths.join(input_root, rel)
    try:
      doc = load_json(read_text(uri, MAX_JSON_BYTES))
    # a LabelMe JSON describes one image: what cannot be read costs that image (image
    # level); a JSON that is no LabelMe file at all is the file's problem (not_labelme)
    except InputError as e:
      level = "file" if e.reason == "not_labelme" else "image"
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level=level))
      return
    except ImportError:  # a package missing from the worker: the job fails (model.py)
      raise
    except Exception as e:  # unreadable (permissions, network): report, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="read", reason="unreadable", key=uri, level="image",
          message=f"{type(e).__name__}: {e}"))
      return
    name = image_name(doc)
    data = doc.get("imageData")
    size = None
    if data is not None:
      # labelme's rule (LabelFile.load): imageData when present, whatever imagePath names.
      # The writer decodes it where it reads images (storage/files.read_bytes of the JSON's
      # uri + EMBEDDED, with an image file's checks): the JSON, at most MAX_JSON_BYTES, is
      # read again and parsed there, in place of an image file.
      key = embedded_key(rel, name, image_root is not None)
      if not isinstance(data, str) or not data:
        yield beam.pvalue.TaggedOutput("errors", InputError(
            "read", "bad_image_data", f"imageData is {data!r:.40}, not the image as base64"
            ).record(uri, key))
        return
      image_uri, size = uri + EMBEDDED, len(data) * 3 // 4
    elif name is None:
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="missing_field", key=uri, level="image",
          message="the file has no imagePath and no imageData: its image is unknown"))
      return
    else:
      names = image_candidates(rel, name, image_root is not None)
      try:
        key, image_uri = self._locate(image_root or input_root, names)
      except InputError as e:
        yield beam.pvalue.TaggedOutput("errors", e.record(uri, name))
        return
    objects, problems = parse_shapes(doc["shapes"], self.include_masks, uri)
    for level, error in problems:
      yield beam.pvalue.TaggedOutput("errors", error.record(uri, key, level=level))
    width, height = image_size(doc)
    yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri,
                          objects=tuple(objects), split=split, width=width, height=height,
                          size_bytes=size)


class ReadLabelMe(beam.PTransform):
  """Folders of LabelMe JSONs -> SourceOutput.

  In: (split or None, input folder, image root or None) per --input; a None image root means
  the input folder, with imagePath relative to each JSON. Out: one ImageAnnotation per JSON
  (absolute pixel boxes; with include_masks, each object's polygons as a COCO polygon list),
  the size the JSON claims, its split; ErrorRecords for unreadable or foreign JSONs (file),
  missing images, empty imageData and too many shapes (image), bad shapes and mixed groups
  (object) and unsupported shapes (warning). No categories: class ids are the sorted names'.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, Optional[str]]],
               allow_absolute: bool = False, follow_symlinks: bool = False,
               include_masks: bool = False):
    super().__init__()
    self.inputs = list(inputs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def expand(self, root):
    parsed = (root
              | "Inputs" >> beam.Create(self.inputs)
              | "Folders" >> beam.FlatMap(_list_tasks)
              | "SpreadFolders" >> beam.Reshuffle()
              | "ListJson" >> beam.FlatMap(_list_json)
              | "Spread" >> beam.Reshuffle()
              | "Parse" >> beam.ParDo(_ParseJson(
                  self.allow_absolute, self.follow_symlinks, self.include_masks)).with_outputs(
                      "errors", main="images"))
    return SourceOutput(images=parsed.images, errors=parsed.errors)
