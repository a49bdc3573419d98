"""The Beam transform of --format voc: the XMLs listed, spread and parsed on workers; the
image sets read into a side input of each image id's sets."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam

from beam_tfrecord.records.model import ErrorRecord, ImageAnnotation, InputError
from beam_tfrecord.sources.base import SourceOutput
from beam_tfrecord.sources.voc.annotation import parse_xml, read_xml
from beam_tfrecord.sources.voc.image_sets import (missing_annotations,
                                                  parse_image_set,
                                                  parse_image_sets,
                                                  resolve_split, split_files,
                                                  split_names)
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
    except Exception as e:  # unforeseen: report it, never kill the job
      yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
          source=uri, stage="parse", reason="unexpected_error", key=filename or uri,
          message=f"{type(e).__name__}: {e}"))
      return
    split = self.split
    if scope:
      member_of = splits.get(stem, [])
      split, reason = resolve_split(member_of, scope)
      if split is None:
        excluded = reason == "not_in_split" and bool(member_of)  # only in sets not chosen
        where = (f"the lists {sorted(member_of)}" if member_of else "no ImageSets/Main list")
        yield beam.pvalue.TaggedOutput("errors", ErrorRecord(
            source=uri, stage="parse", key=key,
            reason="excluded_by_image_sets" if excluded else reason,
            level="warning" if excluded else "image",
            message=f"image id {stem!r} is named by {where}"
            + (f", none of the chosen image sets {scope}" if excluded else "")))
        return
    yield ImageAnnotation(key=key, uri=image_uri, source_id=key, source=uri,
                          objects=tuple(objects), split=split, width=width, height=height)


class ReadVoc(beam.PTransform):
  """A Pascal VOC directory, or a folder of VOC XMLs -> SourceOutput.

  In: voc_root (holding Annotations/*.xml, optionally ImageSets/Main/*.txt; or XMLs anywhere
  below it) and image_root (default voc_root/JPEGImages; for a folder of XMLs, the images
  lie beside the XMLs unless image_root is given). Out: one ImageAnnotation per XML, split from
  ImageSets when `use_image_sets` (images listed in none or several lists become errors) or
  `split`, and ErrorRecords.
  """

  def __init__(self, voc_root: str, image_root: Optional[str] = None,
               use_image_sets: bool = True, allow_absolute: bool = False,
               image_sets: Optional[Sequence[str]] = None, follow_symlinks: bool = False,
               split: Optional[str] = None):
    super().__init__()
    self.voc_root = voc_root
    self.flat = is_flat(voc_root)
    self.image_root = image_root or (voc_root if self.flat else
                                     paths.join(voc_root, "JPEGImages"))
    self.image_dirs: List[str] = []
    if self.flat and not image_root:
      self.image_dirs = find_image_dirs(voc_root)
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks
    self.split = split
    # Membership comes from every list; `scope` is the lists that make splits.
    self.lists = (split_files(voc_root) if use_image_sets and not self.flat and not split
                  else {})
    self.scope = sorted(image_sets or self.lists)
    self.splits = split_names(self.scope) if self.lists else []

  def expand(self, root):
    members = (root
               | "SplitLists" >> beam.Create(sorted(self.lists.items()))
               | "ReadLists" >> beam.FlatMap(
                   lambda kv: [(stem, kv[0]) for stem in
                               parse_image_set(read_text(kv[1]).decode("utf-8"))])
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


def read(root, config, *, first_id: int, local: bool) -> Tuple[SourceOutput, List[str]]:
  allow, follow = config.allow_absolute_paths, config.follow_symlinks
  assigned = config.input_image_roots()  # (split, VOC dir, its --images or None)
  if len(assigned) == 1 and not assigned[0][0]:
    voc = ReadVoc(assigned[0][1], assigned[0][2], use_image_sets=not config.split,
                  allow_absolute=allow, follow_symlinks=follow,
                  image_sets=parse_image_sets(config.image_sets) if config.image_sets else None)
    return root | "ReadVoc" >> voc, sorted(voc.splits)
  if not all(split for split, _, _ in assigned):
    raise ValueError("--format voc takes one --input (a VOC directory or a folder of XMLs), "
                     "or one SPLIT=DIR per split")
  per_folder = [root | f"ReadVoc[{split}]" >> ReadVoc(
      uri, images, allow_absolute=allow, follow_symlinks=follow,
      split=split) for split, uri, images in assigned]
  return (SourceOutput(
      images=tuple(o.images for o in per_folder) | "VocImages" >> beam.Flatten(),
      errors=tuple(o.errors for o in per_folder) | "VocErrors" >> beam.Flatten()),
      sorted(split for split, _, _ in assigned))
