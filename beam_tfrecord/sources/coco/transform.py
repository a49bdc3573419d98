"""ReadCoco: COCO instances JSON files to a SourceOutput, through either join."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.batches import ImageBatch
from beam_tfrecord.sources.base import batch_images
from beam_tfrecord.sources.coco.join import (_duplicate_category, _zero_verdict, file_layout,
                                             join_image)
from beam_tfrecord.sources.coco.stream import SECTIONS
from beam_tfrecord.sources.coco.workers import _JoinFile, _ParseSection
from beam_tfrecord.sources.keypoints import source_output

class ReadCoco(beam.PTransform):
  """COCO instances JSON files -> SourceOutput.

  In: `inputs`, a list of (split or None, json_uri, image_root). Out: one image per
  COCO image (images without annotations included), in lists of at most BATCH_IMAGES
  (SourceOutput.batched, records/batches), ErrorRecords, and (name, category_id)
  pairs, so that label ids keep COCO's category ids. With drop_background (no --label-map),
  a category with id 0 is dropped with a warning when no annotation uses it, and a file whose
  annotations use it gives a category_zero_used error, which fails the run (category_zero).
  With include_masks each object carries its `segmentation` (as compact JSON) for the writer
  to rasterize. join_in_worker (the local runners): each file is read and joined by one
  _JoinFile, in bounded memory, a large file's partitions joined by `join_processes` worker
  processes (join_pool; the in-process runner's thread would join them alone); else a task
  per file and section, and a CoGroupByKey.
  """

  def __init__(self, inputs: Sequence[Tuple[Optional[str], str, str]],
               allow_absolute: bool = False, follow_symlinks: bool = False,
               drop_background: bool = False, include_masks: bool = False,
               join_in_worker: bool = False, join_processes: int = 0):
    super().__init__()
    self.inputs = list(inputs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.drop_background = drop_background
    self.include_masks = include_masks
    self.join_in_worker = join_in_worker  # every file through _JoinFile
    self.join_processes = join_processes  # its worker processes for a large file (join_pool)

  def expand(self, root):
    whole = self.inputs if self.join_in_worker else []
    streamed = [] if self.join_in_worker else self.inputs
    images, categories, errors, layouts = [], [], [], []
    if whole:
      files = (root
               | "Files" >> beam.Create(whole)
               | "JoinFiles" >> beam.ParDo(_JoinFile(
                   self.allow_absolute, self.follow_symlinks, self.drop_background,
                   self.include_masks, processes=self.join_processes))
               .with_output_types(ImageBatch).with_outputs(
                   "categories", "errors", "layouts", main="images"))
      images.append(files.images)
      categories.append(files.categories)
      errors.append(files.errors)
      layouts.append(files.layouts)
    if streamed:
      tasks = [(split, uri, image_root, section)
               for split, uri, image_root in streamed for section in SECTIONS]
      parsed = (root
                | "Tasks" >> beam.Create(tasks)
                | "Spread" >> beam.Reshuffle()
                | "Stream" >> beam.ParDo(_ParseSection(
                    self.allow_absolute, self.drop_background, self.include_masks))
                .with_outputs("objects", "categories", "errors", "zero", "keypoints",
                              main="images"))
      by_file = beam.pvalue.AsDict(
          parsed.keypoints
          | "KeypointsByFile" >> beam.Map(lambda item: (item[0][0], item))
          | "GroupKeypoints" >> beam.GroupByKey()
          | "FileLayouts" >> beam.MapTuple(lambda uri, defs: (uri, file_layout(defs))))
      layouts.append(root
                     | "StreamedFiles" >> beam.Create(sorted({uri for _, uri, _ in streamed}))
                     | "LayoutOfFile" >> beam.Map(lambda uri, found: (uri, found.get(uri)),
                                                  by_file))
      categories.append(parsed.categories)
      errors.append(parsed.errors)
      errors.append(parsed.zero  # at most 2 per file and category 0, usually none
                    | "GroupZero" >> beam.GroupByKey()
                    | "CategoryZero" >> beam.FlatMap(_zero_verdict))
    if len(categories) > 1:
      categories = [tuple(categories) | "AllCategories" >> beam.Flatten()]
    grouped = categories[0] | "GroupCategories" >> beam.GroupByKey()
    by_key = grouped | "PickCategory" >> beam.MapTuple(lambda k, names: (k, min(names)))
    errors.append(grouped | "DuplicateCategories" >> beam.FlatMap(_duplicate_category))
    if streamed:
      joined = ({"image": parsed.images, "objects": parsed.objects}
                | "GroupByImage" >> beam.CoGroupByKey()
                | "Join" >> beam.FlatMap(join_image, beam.pvalue.AsDict(by_key),
                                         self.allow_absolute, self.follow_symlinks, by_file)
                .with_output_types(Tuple[Any, ...]).with_outputs("errors", main="images"))
      images.append(joined.images | "BatchJoined" >> batch_images(plain=True))
      errors.append(joined.errors)
    if len(images) > 1:
      images = [tuple(images) | "Images" >> beam.Flatten().with_output_types(ImageBatch)]
    names = by_key | "Names" >> beam.MapTuple(lambda uri_id, name: (name, uri_id[1]))
    if len(layouts) > 1:
      layouts = [tuple(layouts) | "LayoutsOfFiles" >> beam.Flatten()]
    return source_output(images[0], tuple(errors) | "Errors" >> beam.Flatten(), names,
                         layouts[0])._replace(batched=True)
