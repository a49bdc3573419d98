"""The Beam transform of --format cvat: a worker reads each file's `<meta>` and cuts the file
into byte ranges; the ranges are spread and read by any worker."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.sources.keypoints import source_output
from beam_tfrecord.sources.cvat.byte_ranges import ranges
from beam_tfrecord.sources.cvat.document import Meta, parse_range, read_meta
from beam_tfrecord.sources.cvat.shapes import ParsedImage, split_of
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import exists, open_read


class _PlanFile(beam.DoFn):
  """(split, xml uri, image root) -> (split, uri, root, start, end, Meta) per byte range,
  after reading the file's <meta>; a file whose meta cannot be read is one file error."""

  def process(self, task):
    split, uri, root = task
    try:
      with open_read(uri) as f:
        meta = read_meta(f, uri)
      size = paths.file_size(uri)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, uri, level="file"))
      return
    except ImportError:  # a package missing from the worker: the job fails (model.py)
      raise
    except Exception as e:  # unreadable: report it, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="read", reason="unreadable", key=uri, level="file",
          message=f"{type(e).__name__}: {e}"))
      return
    yield beam.pvalue.TaggedOutput("layouts", (uri, meta.layout))
    for start, end in ranges(size, meta.splittable):
      yield split, uri, root, start, end, meta


class _ReadRange(beam.DoFn):
  """(split, uri, image root, start, end, Meta) -> an ImageAnnotation per image of the range,
  and ErrorRecords (per element, per image, and what stopped the range)."""

  def __init__(self, allow_absolute: bool, follow_symlinks: bool, include_masks: bool):
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def _locate(self, root: str, name: Optional[str], subset: Optional[str]) -> Tuple[str, str]:
    if subset and name:  # a project export: images/<subset>/<name>
      nested = paths.resolve(root, f"{subset}/{name}", self.allow_absolute,
                             self.follow_symlinks)
      if exists(nested[1]):
        return nested
    return paths.resolve(root, name, self.allow_absolute, self.follow_symlinks)

  def process(self, task):
    split, uri, root, start, end, meta = task
    try:
      with open_read(uri) as f:
        for item in parse_range(f, start, end, meta, self.include_masks, uri):
          if item[0] == "image":
            yield from self._image(item[1], split, uri, root, meta)
          elif item[0] == "error":  # an image's rejection names it; the others the file
            _, error, level, key = item
            yield beam.pvalue.TaggedOutput("errors", error.record(uri, key or uri, level=level))
    except ImportError:  # a package missing from the worker: the job fails (model.py)
      raise
    except Exception as e:  # unforeseen: report it, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="unexpected_error", key=uri, level="file",
          message=f"{type(e).__name__}: {e} (the range from byte {start})"))

  def _image(self, image: ParsedImage, split: Optional[str], uri: str, root: str, meta: Meta):
    try:
      key, image_uri = self._locate(root, image.name, image.subset)
      split = split or split_of(image.subset if image.subset is not None else meta.subset)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, image.name or uri))
      return
    for error, level in image.problems:
      yield beam.pvalue.TaggedOutput("errors", error.record(uri, key, level=level))
    layout = meta.layout
    yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri,
                          objects=image.objects, split=split, width=image.width,
                          height=image.height, keypoint_names=layout.names if layout else ())


class ReadCvat(beam.PTransform):
  """CVAT for images 1.1 XML files -> SourceOutput.

  In: (split or None, annotations.xml uri, image root) per file. Out: one ImageAnnotation per
  <image> (boxes in pixels, occluded as truncated; with include_masks each object's polygons
  as its segmentation; a <skeleton> is an object with keypoints, its box around its labelled
  points) and ErrorRecords. A worker reads each file's <meta> and cuts it into
  byte ranges (_PlanFile); the ranges are spread and read by any worker (_ReadRange). Largest
  element: one image's annotation (or a range task, holding the file's label names).
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]],
               allow_absolute: bool = False, follow_symlinks: bool = False,
               include_masks: bool = False):
    super().__init__()
    self.inputs = list(inputs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def expand(self, root):
    planned = (root
               | "Files" >> beam.Create(self.inputs)
               | "PlanRanges" >> beam.ParDo(_PlanFile()).with_outputs(
                   "errors", "layouts", main="ranges"))
    read = (planned.ranges
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRanges" >> beam.ParDo(_ReadRange(
                self.allow_absolute, self.follow_symlinks, self.include_masks))
            .with_outputs("errors", main="images"))
    errors = (planned.errors, read.errors) | "CvatErrors" >> beam.Flatten()
    return source_output(read.images, errors, layouts=planned.layouts)
