"""SelectClasses: --classes and --class-map applied to a source's output, before ids exist.

In: a SourceOutput and a ClassSelection. Out: a SourceOutput whose objects and image-level
labels are the kept classes under their new names (categories renamed alike), and a
PCollection of counter increments for the run's error counts.

Sizes: images are mapped one at a time; the source's class names (to check the options) are
one Distinct over names and one list of at most the number of classes; excluded objects are
counted per class by a CombinePerKey. Nothing grows with the number of images.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Tuple

import apache_beam as beam

from beam_tfrecord.prepare.class_selection import (ClassSelection,
                                                   select_labels,
                                                   unknown_message,
                                                   unknown_names)
from beam_tfrecord.records import batches
from beam_tfrecord.records.batches import ImageBatch
from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation
from beam_tfrecord.sources.base import SourceOutput

EXCLUDED = "excluded_class"          # the reason under which dropped objects are counted
EXCLUDED_PREFIX = "excluded:"        # error-count keys of one class: 'excluded:cat'
UNKNOWN = "unknown_class_selected"   # a usage reason (finalize/manifest.USAGE_REASONS)


def select_image(ann: ImageAnnotation, selection: ClassSelection
                 ) -> Tuple[List[ImageAnnotation], Dict[str, int]]:
  """([the image with the kept classes renamed] or [] when all its image-level labels are
  excluded, {source class: objects or labels excluded}). An image whose objects are all
  excluded stays, as a background image."""
  excluded: Dict[str, int] = {}
  objects = []
  for obj in ann.objects:
    new = selection.target(obj.label)
    if new is None:
      excluded[obj.label] = excluded.get(obj.label, 0) + 1
    else:
      objects.append(obj if new == obj.label else dataclasses.replace(obj, label=new))
  labels, dropped = select_labels(ann.labels, selection)
  for name, n in dropped.items():
    excluded[name] = excluded.get(name, 0) + n
  if ann.labels and not labels:  # a classification image without a class: nothing to write
    return [], excluded
  if not excluded and all(a is b for a, b in zip(objects, ann.objects)) and \
      tuple(labels) == ann.labels:
    return [ann], excluded
  return [ann.replace(objects=tuple(objects), labels=tuple(dict.fromkeys(labels)))], excluded


class _Select(beam.DoFn):

  def __init__(self, selection: ClassSelection):
    self.selection = selection

  def process(self, batch: ImageBatch):
    kept: List[ImageAnnotation] = []
    excluded: Dict[str, int] = {}
    for ann in batches.annotations(batch):
      selected, dropped = select_image(ann, self.selection)
      kept += selected
      for name, n in dropped.items():
        excluded[name] = excluded.get(name, 0) + n
    if kept:
      yield batches.of(kept)
    for name, n in excluded.items():  # summed per class below (ExcludedPerClass)
      yield beam.pvalue.TaggedOutput("excluded", (name, n))


def _counts(name: str, n: int) -> Iterable[Tuple[str, int]]:
  return [(EXCLUDED, n), ("level:warning", n), (EXCLUDED_PREFIX + name, n)]


def _check_names(names: List[str], selection: ClassSelection, source: str
                 ) -> List[ErrorRecord]:
  unknown = unknown_names(selection, names)
  if not unknown:
    return []
  return [ErrorRecord(source=source, stage="parse", reason=UNKNOWN, key="--classes/--class-map",
                      level="file", message=unknown_message(unknown, names))]


class SelectClasses(beam.PTransform):
  """SourceOutput -> (SourceOutput with the selection applied, PCollection[(count key, n)]).

  The count keys are 'excluded_class', 'level:warning' and 'excluded:NAME', summed with the
  run's error counts: dropped objects are counted (a warning), not listed one by one. A name
  in the options that the source lacks (neither an object's or image's class nor a category)
  is one error record whose reason fails the run with exit 2 (manifest.USAGE_REASONS)."""

  def __init__(self, source: SourceOutput, selection: ClassSelection, where: str):
    super().__init__()
    self.source, self.selection, self.where = source, selection, where

  def expand(self, root):
    selection = self.selection
    names = (self.source.images
             | "SourceNames" >> beam.FlatMap(batches.class_names))
    if self.source.categories is not None:
      names = ((names, self.source.categories | "CategoryNames" >> beam.Keys())
               | "AllNames" >> beam.Flatten())
    unknown = (names
               | "DistinctNames" >> beam.Distinct()
               | "NameList" >> beam.combiners.ToList()
               | "CheckNames" >> beam.FlatMap(_check_names, selection, self.where))
    selected = self.source.images | "Select" >> beam.ParDo(_Select(selection)).with_output_types(
        ImageBatch).with_outputs("excluded", main="images")
    counts = (selected.excluded
              | "ExcludedPerClass" >> beam.CombinePerKey(sum)
              | "ExcludedCounts" >> beam.FlatMapTuple(_counts))
    categories = None
    if self.source.categories is not None:
      categories = self.source.categories | "RenameCategories" >> beam.FlatMapTuple(
          lambda name, i: [(selection.target(name), i)] if selection.target(name) else [])
    errors = (self.source.errors, unknown) | "SelectErrors" >> beam.Flatten()
    return SourceOutput(selected.images, errors, categories, batched=True), counts
