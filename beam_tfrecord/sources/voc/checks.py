"""The pre-run checks of --format voc (UsageError, before anything is written). Beam-free."""
from __future__ import annotations

from typing import Optional, Sequence

from beam_tfrecord.errors import UsageError
from beam_tfrecord.sources.checks import check_directory
from beam_tfrecord.sources.voc.class_pngs import (CLASS_FOLDER, SETS_FOLDER,
                                                  class_png_files, has_class_pngs, wanted)
from beam_tfrecord.sources.voc.image_sets import parse_image_sets, split_files
from beam_tfrecord.sources.voc.layout import annotation_files, is_flat
from beam_tfrecord.storage import paths


def check_input(inputs: Sequence[str], image_sets: Optional[str] = None) -> None:
  """Before running: one VOC directory, with Annotations/*.xml and the chosen image sets; or
  a folder of XMLs, or SPLIT=DIR folders (a Roboflow VOC export), whose XMLs and images
  ReadVoc checks when it is built."""
  assigned = [paths.parse_assignment(item) for item in inputs]
  if len(assigned) > 1 and not all(split for split, _ in assigned):
    raise UsageError(f"--format voc takes one --input (a VOC directory or a folder of XMLs), "
                     f"or one SPLIT=DIR per split; got {len(inputs)} inputs")
  if len(assigned) > 1 or assigned[0][0]:
    if image_sets:
      raise UsageError("--image-sets applies to a VOC directory without SPLIT= inputs")
    for _, root in assigned:
      check_directory(root, "--input")
    return
  root = assigned[0][1]
  check_directory(root, "--input")
  if is_flat(root):  # a folder of XMLs (LabelImg): ReadVoc checks XMLs and images
    if image_sets:
      raise UsageError(f"--image-sets: {root} is a folder of XMLs without ImageSets/Main")
    return
  if not annotation_files(root):
    hint = (f"; for its {CLASS_FOLDER}/ give --schema deeplab" if has_class_pngs(root)
            else "")
    raise UsageError(f"--input {root} has no Annotations/*.xml: not a Pascal VOC directory "
                     f"(VOCdevkit/VOC2012 holds Annotations/, JPEGImages/, ImageSets/Main/)"
                     f"{hint}")
  if image_sets:
    available = split_files(root)
    missing = [name for name in parse_image_sets(image_sets) if name not in available]
    if missing:
      raise UsageError(f"--image-sets: {', '.join(missing)} not in {root}/ImageSets/Main "
                       f"(it has {', '.join(available) or 'no image sets'})")


def check_segmentation(inputs: Sequence[str], image_sets: Optional[str] = None,
                       selecting: bool = False) -> None:
  """Before a deeplab run: VOC directories (one, or SPLIT=DIR per split), each holding
  SegmentationClass/*.png; the chosen ImageSets/Segmentation lists exist. --classes and
  --class-map are refused: a class PNG's values are its classes, which --label-map names."""
  if selecting:
    raise UsageError("--classes and --class-map do not apply to VOC's class PNGs (their "
                     "palette indices are the classes); give --label-map to name the indices")
  assigned = [paths.parse_assignment(item) for item in inputs]
  if len(assigned) > 1 and not all(split for split, _ in assigned):
    raise UsageError(f"--format voc takes one --input (a VOC directory), or one SPLIT=DIR "
                     f"per split; got {len(inputs)} inputs")
  if image_sets and (len(assigned) > 1 or assigned[0][0]):
    raise UsageError("--image-sets applies to a VOC directory without SPLIT= inputs")
  for _, root in assigned:
    check_directory(root, "--input")
    if not class_png_files(root):
      raise UsageError(f"--input {root} has no {CLASS_FOLDER}/*.png: the deeplab schema reads "
                       f"a VOC directory's class PNGs (VOC2012 holds {CLASS_FOLDER}/, "
                       f"JPEGImages/, ImageSets/{SETS_FOLDER}/)")
  if image_sets:
    root = assigned[0][1]
    available = split_files(root, SETS_FOLDER)
    missing = [name for name in parse_image_sets(image_sets) if name not in available]
    if missing:
      raise UsageError(f"--image-sets: {', '.join(missing)} not in {root}/ImageSets/"
                       f"{SETS_FOLDER} (it has {', '.join(available) or 'no image sets'})")


def check(config) -> None:
  if wanted(config):
    check_segmentation(config.inputs, config.image_sets,
                       bool(config.classes or config.class_map))
    return
  check_input(config.inputs, config.image_sets)
