"""Pascal VOC's semantic segmentation (the deeplab schema): SegmentationClass/<id>.png, palette
PNGs whose indices are the classes (0 background, 1..20 VOC's classes, 255 the void border),
with ImageSets/Segmentation/<set>.txt as the splits, read as DeepLab's build_voc2012_data.py
reads them: the image of id X is JPEGImages/X.jpg (under --images when given). Annotations/
is not read. A PNG saved as RGB in VOC's colour map (Datumaro's VOC export, an image editor
that flattens the palette) is read as the indices of its colours (records/masks.voc_indices).
Beam-free: transform.ReadVocSegmentation wires these functions.

The PNG's bytes travel in the annotation record (masks.class_png_json) rather than being read
again by the writer: a few kB an image (VOC's are 1-10 kB), at most MAX_CLASS_PNG_BYTES.
"""
from __future__ import annotations

import posixpath
from typing import Dict, Iterator, List, Optional, Sequence, Union

from beam_tfrecord import schemas
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation, InputError,
                                         ObjectAnnotation)
from beam_tfrecord.sources.base import is_hidden
from beam_tfrecord.sources.voc.image_sets import missing_annotation, split_of
from beam_tfrecord.storage import paths
from beam_tfrecord.storage.files import list_dir, read_text

CLASS_FOLDER = "SegmentationClass"
SETS_FOLDER = "Segmentation"     # ImageSets/Segmentation
IMAGE_SUFFIX = ".jpg"            # build_voc2012_data.py's image_format
# VOC's classes in palette-index order (1..20; 0 is background): its devkit's VOCopts.classes,
# which is also their sorted order
VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
               "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
               "sheep", "sofa", "train", "tvmonitor")
# A class PNG is annotation, carried through the sort: VOC's are 1-10 kB, a 2048x1024
# Cityscapes label PNG ~50 kB; 4 MB is a 2,000 x 2,000 image of noise.
MAX_CLASS_PNG_BYTES = 4 << 20


def wanted(config) -> bool:
  """Whether the run reads class PNGs: its schema takes one class mask per image (deeplab).
  `config`: the format's SourceOptions (voc declares `schema`)."""
  return schemas.get(config.schema or schemas.DEFAULT).class_masks


def categories() -> List[tuple]:
  """(name, id) of VOC's classes: the label map when no --label-map is given."""
  return [(name, i) for i, name in enumerate(VOC_CLASSES, start=1)]


def has_class_pngs(voc_root: str) -> bool:
  return CLASS_FOLDER in list_dir(voc_root)[0]


def class_png_files(voc_root: str) -> List[str]:
  """The PNGs of SegmentationClass/, sorted: .png in any case, hidden files aside."""
  folder = paths.join(voc_root, CLASS_FOLDER)
  return [paths.join(folder, name) for name in list_dir(folder)[1]
          if name.lower().endswith(".png") and not is_hidden(name)]


def png_stem(uri: str) -> str:
  """The image id of a class PNG: its name without .png (what ImageSets lists)."""
  return posixpath.splitext(posixpath.basename(uri.replace("\\", "/")))[0]


def class_png_object(data: bytes) -> ObjectAnnotation:
  """The image's class PNG as the one object of its annotation: the writer finds it there
  (masks.carried_class_png). It has no class of its own: its pixels are the classes."""
  from beam_tfrecord.records import masks  # numpy, Pillow: not for --format auto's detection
  return ObjectAnnotation(label="", box=Box(0.0, 0.0, 1.0, 1.0, normalized=True),
                          segmentation=masks.class_png_json(data))


class Reader:
  """Turns one image id, with its PNGs and the image sets naming it (a CoGroupByKey's
  element: (id, {"png": [uri, ...], "lists": [set, ...]})), into its ImageAnnotation or the
  errors that keep it out. Picklable."""

  def __init__(self, image_root: str, scope: Sequence[str], lists: Dict[str, str],
               split: Optional[str] = None, allow_absolute: bool = False,
               follow_symlinks: bool = False):
    self.image_root, self.scope, self.lists = image_root, list(scope), dict(lists)
    self.split = split
    self.allow_absolute, self.follow_symlinks = allow_absolute, follow_symlinks

  def __call__(self, element) -> Iterator[Union[ImageAnnotation, ErrorRecord]]:
    stem, joined = element
    pngs = sorted(joined["png"])
    member_of = sorted(set(joined["lists"]))
    if not pngs:
      yield from missing_annotation(stem, member_of, self.scope, self.lists, SETS_FOLDER,
                                    f"{CLASS_FOLDER}/ has no {stem}.png")
      return
    uri = pngs[0]
    for other in pngs[1:]:  # X.png and X.PNG: one id, converted once
      yield ErrorRecord(source=other, stage="parse", reason="duplicate_image", key=stem,
                        level="warning", message=f"{other} has the id of {uri}, which is used")
    try:
      key, image_uri = paths.resolve(self.image_root, stem + IMAGE_SUFFIX, self.allow_absolute,
                                     self.follow_symlinks)
    except InputError as e:
      yield e.record(uri, stem + IMAGE_SUFFIX)
      return
    split = self.split
    if self.scope:
      split, error = split_of(uri, key, stem, member_of, self.scope, SETS_FOLDER)
      if error is not None:
        yield error
        return
    try:
      data = read_text(uri, MAX_CLASS_PNG_BYTES)
    except InputError as e:
      yield e.record(uri, key)
      return
    except Exception as e:  # missing since listed, permission, network
      yield ErrorRecord(source=uri, stage="read", reason="unreadable", key=key,
                        message=f"{type(e).__name__}: {e}")
      return
    yield ImageAnnotation(key=key, uri=image_uri, source_id=stem, source=uri,
                          objects=(class_png_object(data),), split=split)
