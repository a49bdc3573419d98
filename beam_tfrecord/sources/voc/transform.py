"""The Beam transforms of --format voc: ReadVoc (the XMLs listed, spread and parsed on workers;
the image sets read into a side input of each image id's sets) and ReadVocSegmentation (the
class PNGs of the deeplab schema, joined with their image sets by id)."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.sources.base import SourceOutput
from beam_tfrecord.sources.voc import class_pngs
from beam_tfrecord.sources.voc.annotation import parse_xml, read_xml
from beam_tfrecord.sources.voc.image_sets import (missing_annotations,
                                                  parse_image_set,
                                                  parse_image_sets, split_files,
                                                  split_names, split_of)
from beam_tfrecord.sources.voc.layout import (annotation_files, find_image_dirs,
                                              image_candidates, is_flat,
                                              xml_files, xml_stem)
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import exists, read_text


class _ParseXml(beam.DoFn):

  def __init__(self, image_root: str, allow_absolute: bool, follow_symlinks: bool = False,
               flat_root: Optional[str] = None, split: Optional[str] = None,
               image_dirs: Sequence[str] = ()):
    self.image_root = image_root
    self.image_dirs = tuple(image_dirs)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.flat_root = flat_root    # the XML folder of a flat (LabelImg) layout
    self.split = split

  def _locate(self, uri: str, filename: str) -> Tuple[str, str]:
    if self.flat_root is None:
      return paths.resolve(self.image_root, filename, self.allow_absolute, self.follow_symlinks)
    rel = uri[len(self.flat_root.rstrip("/\\")) + 1:].replace("\\", "/")
    names = image_candidates(rel, filename, self.image_root == self.flat_root, self.image_dirs)
    resolved = [paths.resolve(self.image_root, n, self.allow_absolute, self.follow_symlinks)
                for n in names]
    return next((r for r in resolved if exists(r[1])), resolved[0])

  def process(self, readable, splits: Dict[str, List[str]], scope: List[str]):
    uri = readable.metadata.path if hasattr(readable, "metadata") else readable
    stem = xml_stem(uri)
    filename = None  # the key of an error: the image's file name once known, else the XML
    try:
      filename, width, height, objects = parse_xml(read_xml(readable))
      key, image_uri = self._locate(uri, filename)
    except InputError as e:
      yield beam.pvalue.TaggedOutput("errors", e.record(uri, filename or uri))
      return
    except ImportError:  # a package missing from the worker: the job fails (model.py)
      raise
    except Exception as e:  # unforeseen: report it, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="unexpected_error", key=filename or uri,
          message=f"{type(e).__name__}: {e}"))
      return
    split = self.split
    if scope:
      split, error = split_of(uri, key, stem, splits.get(stem, []), scope)
      if error is not None:
        yield beam.pvalue.TaggedOutput("errors", error)
        return
    yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri,
                          objects=tuple(objects), split=split, width=width, height=height)


class _ListedSplits(beam.PTransform):
  """What both VOC transforms share: their arguments, and the image sets of ImageSets/<FOLDER>
  that make the splits (membership comes from every list; `scope` is the lists that make
  splits), none when `split` is given or `use_image_sets` is off."""
  FOLDER = "Main"

  def __init__(self, voc_root: str, image_root: Optional[str] = None,
               use_image_sets: bool = True, allow_absolute: bool = False,
               image_sets: Optional[Sequence[str]] = None, follow_symlinks: bool = False,
               split: Optional[str] = None):
    super().__init__()
    self.voc_root = voc_root
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.split = split
    self.lists = (split_files(voc_root, self.FOLDER)
                  if use_image_sets and not split and self.has_lists() else {})
    self.scope = sorted(image_sets or self.lists)
    self.splits = split_names(self.scope) if self.lists else []

  def has_lists(self) -> bool:
    return True


class ReadVoc(_ListedSplits):
  """A Pascal VOC directory, or a folder of VOC XMLs -> SourceOutput.

  In: voc_root (holding Annotations/*.xml, optionally ImageSets/Main/*.txt; or XMLs anywhere
  below it) and image_root (default voc_root/JPEGImages; for a folder of XMLs, the images
  lie beside the XMLs unless image_root is given). Out: one ImageAnnotation per XML, split from
  ImageSets when `use_image_sets` (images listed in none or several lists become errors) or
  `split`, and ErrorRecords.
  """

  def __init__(self, voc_root: str, image_root: Optional[str] = None, **options):
    self.flat = is_flat(voc_root)
    super().__init__(voc_root, image_root, **options)
    self.image_root = image_root or (voc_root if self.flat else
                                     paths.join(voc_root, "JPEGImages"))
    self.image_dirs: List[str] = []
    if self.flat and not image_root:
      self.image_dirs = find_image_dirs(voc_root)

  def has_lists(self) -> bool:
    return not self.flat  # a folder of XMLs has no ImageSets

  def expand(self, root):
    members = (root
               | "SplitLists" >> beam.Create(sorted(self.lists.items()))
               | "ReadLists" >> beam.FlatMap(_list_members)
               | "GroupSplits" >> beam.GroupByKey()
               | "SortSplits" >> beam.MapTuple(lambda stem, s: (stem, sorted(set(s)))))
    parse = _ParseXml(self.image_root, self.allow_absolute, self.follow_symlinks,
                      self.voc_root if self.flat else None, self.split, self.image_dirs)
    # listed rather than globbed: Annotations/A.XML counts, as in a folder of XMLs
    xmls = (root
            | "Root" >> beam.Create([self.voc_root])
            | "ListXml" >> beam.FlatMap(xml_files if self.flat else annotation_files)
            | "Spread" >> beam.Reshuffle())
    parsed = xmls | "Parse" >> beam.ParDo(parse, beam.pvalue.AsDict(members),
                                          self.scope).with_outputs(
                                              "errors", main="images")
    if not self.lists:
      return SourceOutput(images=parsed.images, errors=parsed.errors)
    # ids the chosen lists name without an XML: reported, never silently left out
    stems = xmls | "XmlIds" >> beam.Map(lambda uri: (xml_stem(uri), uri))
    missing = ({"xml": stems, "lists": members}
               | "JoinLists" >> beam.CoGroupByKey()
               | "MissingXml" >> beam.FlatMap(missing_annotations, self.scope, dict(self.lists)))
    errors = (parsed.errors, missing) | "VocErrors" >> beam.Flatten()
    return SourceOutput(images=parsed.images, errors=errors)


def _list_members(item: Tuple[str, str]) -> List[Tuple[str, str]]:
  """(image id, set) of each id an image set (name, uri) lists."""
  name, uri = item
  return [(stem, name) for stem in parse_image_set(read_text(uri).decode("utf-8"))]


class ReadVocSegmentation(_ListedSplits):
  """VOC's semantic segmentation (the deeplab schema) -> SourceOutput, VOC's 20 classes as its
  categories (ids 1..20: the palette indices).

  In: voc_root holding SegmentationClass/*.png and optionally ImageSets/Segmentation/*.txt;
  image_root (default voc_root/JPEGImages), where the image of id X is X.jpg. Out: one
  ImageAnnotation per class PNG, its bytes as its one object (class_pngs.class_png_object),
  split by the lists as ReadVoc splits by ImageSets/Main (or `split`), and ErrorRecords: ids
  listed without a PNG, PNGs in no chosen list, PNGs unreadable or over their budget.
  Largest element: one id's group in the join (its PNG's uri and the names of the lists that
  name it); the PNG (at most class_pngs.MAX_CLASS_PNG_BYTES) is read after the join, one at a
  time. Memory: O(1) per element on the workers; the PNG listing streams from one worker.
  """

  FOLDER = class_pngs.SETS_FOLDER

  def __init__(self, voc_root: str, image_root: Optional[str] = None, **options):
    super().__init__(voc_root, image_root, **options)
    self.reader = class_pngs.Reader(image_root or paths.join(voc_root, "JPEGImages"),
                                    self.scope, self.lists, self.split, self.allow_absolute,
                                    self.follow_symlinks)

  def expand(self, root):
    pngs = (root
            | "Root" >> beam.Create([self.voc_root])
            | "ListPng" >> beam.FlatMap(class_pngs.class_png_files)
            | "PngIds" >> beam.Map(lambda uri: (class_pngs.png_stem(uri), uri)))
    members = (root
               | "SplitLists" >> beam.Create(sorted(self.lists.items()))
               | "ReadLists" >> beam.FlatMap(_list_members))
    reader = self.reader
    parsed = ({"png": pngs, "lists": members}
              | "JoinLists" >> beam.CoGroupByKey()
              | "ReadPng" >> beam.FlatMap(lambda element: [
                  beam.pvalue.TaggedOutput("errors", item) if isinstance(item, ErrorRecord)
                  else item for item in reader(element)]).with_outputs("errors", main="images"))
    return SourceOutput(images=parsed.images, errors=parsed.errors,
                        categories=root | "VocClasses" >> beam.Create(class_pngs.categories()))


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  allow, follow = config.allow_absolute_paths, config.follow_symlinks
  assigned = config.input_image_roots()  # (split, VOC dir, its --images or None)
  segmentation = class_pngs.wanted(config)
  transform, name = ((ReadVocSegmentation, "ReadVocSegmentation") if segmentation
                     else (ReadVoc, "ReadVoc"))
  if len(assigned) == 1 and not assigned[0][0]:
    voc = transform(assigned[0][1], assigned[0][2], use_image_sets=not config.split,
                    allow_absolute=allow, follow_symlinks=follow,
                    image_sets=parse_image_sets(config.image_sets) if config.image_sets
                    else None)
    return root | name >> voc, sorted(voc.splits)
  if not all(split for split, _, _ in assigned):
    raise ValueError("--format voc takes one --input (a VOC directory or a folder of XMLs), "
                     "or one SPLIT=DIR per split")
  per_folder = [root | f"{name}[{split}]" >> transform(
      uri, images, allow_absolute=allow, follow_symlinks=follow,
      split=split) for split, uri, images in assigned]
  categories = (root | "VocClasses" >> beam.Create(class_pngs.categories())
                if segmentation else None)
  return (SourceOutput(
      images=tuple(o.images for o in per_folder) | "VocImages" >> beam.Flatten(),
      errors=tuple(o.errors for o in per_folder) | "VocErrors" >> beam.Flatten(),
      categories=categories),
      sorted(split for split, _, _ in assigned))
