"""The Beam transform of --format yolo: image listings and label files are read on workers."""
from __future__ import annotations

import posixpath
from typing import List, Sequence

import apache_beam as beam

from beam_tfrecord.errors import UsageError
from beam_tfrecord.records.model import (ErrorRecord, ImageAnnotation,
                                         InputError, ObjectAnnotation)
from beam_tfrecord.sources.base import image_extensions
from beam_tfrecord.sources.keypoints import source_output
from beam_tfrecord.sources.yolo.dataset import YoloDataset
from beam_tfrecord.sources.yolo.labels import parse_label_text, read_label_text
from beam_tfrecord.sources.yolo.listing import (label_files_in, list_directory,
                                                list_file, orphans)
from beam_tfrecord.storage import paths


class _ListImages(beam.DoFn):
  """(split, entry) -> (split, image name relative to root, its label path, label exists).

  A directory entry is listed recursively, and so is its label directory, whose label files
  go to the 'labels' output (for the orphan check); a .txt entry is a list of image paths."""

  def __init__(self, dataset: YoloDataset):
    self.dataset = dataset
    self.extensions = None

  def setup(self):
    self.extensions = image_extensions()

  def process(self, task):
    split, entry = task
    listed = (list_file(split, entry, self.dataset) if entry.endswith(".txt") else
              list_directory(split, entry, self.dataset.root, self.extensions))
    for output, value in listed:
      yield value if output == "images" else beam.pvalue.TaggedOutput(output, value)


class _ReadLabels(beam.DoFn):
  """(split, image name, label path, label exists) -> ImageAnnotation + per-line errors."""

  def __init__(self, dataset: YoloDataset, allow_absolute: bool, follow_symlinks: bool,
               include_masks: bool = False):
    self.dataset = dataset
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def process(self, item):
    split, name, label, has_label = item
    label = label if has_label else None
    source = label or name
    try:
      key, uri = paths.resolve(self.dataset.root, name, self.allow_absolute,
                               self.follow_symlinks)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(source, name))
      return
    objects: List[ObjectAnnotation] = []
    if label is not None:
      try:
        text = read_label_text(label)
      # one label file is one image's: what cannot be read costs that image (image level)
      except InputError as e:  # a FIFO or a directory in its place (not_a_file), too large
        yield beam.pvalue.TaggedOutput("errors", e.record(label, key, level="image"))
        return
      except ImportError:  # a package missing from the worker: the job fails (model.py)
        raise
      except Exception as e:  # unreadable or not text: the image's objects are unknown
        yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
            source=label, stage="parse", reason="unreadable_label", key=key, level="image",
            message=f"{type(e).__name__}: {e}; the image is not converted"))
        return
      try:
        objects, errors = parse_label_text(text, self.dataset.names, self.include_masks,
                                           self.dataset.kpt_shape)
      except InputError as e:  # too_many_objects
        yield beam.pvalue.TaggedOutput("errors", e.record(label, key))
        return
      for number, error in errors:
        yield beam.pvalue.TaggedOutput("errors", error.record(f"{label}:{number}", key,
                                                              level="object"))
    yield ImageAnnotation(key=key, uri=uri, source_id=key, source=source,
                          objects=tuple(objects), split=split,
                          keypoint_names=self.dataset.kpt_names)


class ReadYolo(beam.PTransform):
  """YOLO datasets -> SourceOutput.

  In: YoloDatasets (from `load`), and the id of the first class (1 for the TF OD API).
  Out: one ImageAnnotation per image (background images included, boxes normalized), the
  (name, id) of every class in the yaml's order, and ErrorRecords for orphan label files,
  unusable lines and missing images. With include_masks, objects of segmentation lines carry
  their polygon (see labels.parse_line).
  """

  def __init__(self, datasets: Sequence[YoloDataset], first_id: int = 1,
               allow_absolute: bool = False, follow_symlinks: bool = False,
               include_masks: bool = False):
    super().__init__()
    self.datasets = list(datasets)
    names = {d.names for d in self.datasets}
    if len(names) > 1:
      raise UsageError(f"the YOLO inputs name different classes: {sorted(names)}")
    self.first_id = first_id
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.include_masks = include_masks

  def expand(self, root):
    images, errors = [], []
    for i, dataset in enumerate(self.datasets):
      tasks = [(split, entry) for split, entries in dataset.splits for entry in entries]
      listed = (root
                | f"Entries[{i}]" >> beam.Create(tasks)
                | f"SpreadEntries[{i}]" >> beam.Reshuffle()
                | f"List[{i}]" >> beam.ParDo(_ListImages(dataset)).with_outputs(
                    "labels", "errors", main="images"))
      # Orphan label files, across all splits at once (Darknet's train and valid lists
      # share one folder): label files listed near the images that no image claims.
      lists = frozenset(e for _, entries in dataset.splits for e in entries)
      beside = (listed.images
                | f"LabelFolders[{i}]" >> beam.Map(lambda t: posixpath.dirname(t[2]))
                | f"DistinctFolders[{i}]" >> beam.Distinct()
                | f"ListFolders[{i}]" >> beam.FlatMap(label_files_in, lists))
      files = ((listed.labels, beside)
               | f"LabelFiles[{i}]" >> beam.Flatten()
               | f"FileKeys[{i}]" >> beam.Map(lambda p: (p, True)))
      claimed = listed.images | f"Claimed[{i}]" >> beam.Map(lambda t: (t[2], True))
      orphaned = ({"file": files, "image": claimed}
                  | f"MatchLabels[{i}]" >> beam.CoGroupByKey()
                  | f"Orphans[{i}]" >> beam.FlatMap(orphans))
      read = (listed.images
              | f"SpreadImages[{i}]" >> beam.Reshuffle()
              | f"Labels[{i}]" >> beam.ParDo(_ReadLabels(
                  dataset, self.allow_absolute, self.follow_symlinks,
                  self.include_masks)).with_outputs(
                      "errors", main="images"))
      images.append(read.images)
      errors += [listed.errors, read.errors, orphaned]
    names = self.datasets[0].names
    categories = root | "Classes" >> beam.Create(
        [(name, i + self.first_id) for i, name in enumerate(names)])
    layouts = root | "Layouts" >> beam.Create(
        [(f"{d.described_by} ({d.root})", d.layout) for d in self.datasets])
    return source_output(tuple(images) | "Images" >> beam.Flatten(),
                         tuple(errors) | "Errors" >> beam.Flatten(), categories, layouts)
