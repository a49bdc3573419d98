"""Images meet their objects and category names: join_image (one image's entries and
objects to the image, as a batch's tuple (records/batches), or error records), duplicate
category ids, and what category id 0 comes to without --label-map."""
from __future__ import annotations

import operator
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from beam_tfrecord.records import batches, keypoints
from beam_tfrecord.records.keypoints import KeypointLayout
from beam_tfrecord.records.model import ErrorRecord, InputError
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
from beam_tfrecord.storage import paths

def _duplicate_category(element):
  """A category id given two different names in one file is reported; the smallest name
  (the one PickCategory keeps) is used."""
  (uri, category_id), names = element
  names = sorted(set(names))
  if len(names) > 1:
    yield ErrorRecord(source=uri, stage="parse", reason="duplicate_category_id", key=uri,
                      level="warning",  # a choice made for the user: nothing is lost
                      message=f"category id {category_id} is named {names}; {names[0]!r} is used")


_INDEX = operator.itemgetter(0)
# one image and its objects per COCO image, made as the tuples a batch holds: the join's
# worker process sends them and the runner's steps read them as they are (records/batches);
# as dataclasses, made and then converted, they cost ~4 us more an image (py-spy, 200k)
_IMAGE, _OBJECT, _BOX = batches.IMAGE, batches.OBJECT, batches.BOX


def join_image(element, categories: Dict[Tuple[str, int], str], allow_absolute: bool,
               follow_symlinks: bool = False,
               layouts: Optional[Dict[str, KeypointLayout]] = None):
  """((uri, image_id), {'image': [...], 'objects': [chunk, ...]}) -> the image (a batch's
  tuple, records/batches) | errors.

  A chunk is a tuple of (index, category_id, (x0, y0, x1, y1), is_crowd, area, id,
  segmentation, keypoints). `layouts`: each file's keypoint layout (file_layout), for the
  files that have one: then every object carries the layout's K points."""
  (uri, image_id), grouped = element
  images = list(grouped["image"])
  objects: List[Tuple] = []
  for chunk in grouped["objects"]:
    objects.extend(chunk)
    if images and len(objects) > MAX_OBJECTS_PER_IMAGE:  # collected no further
      break
  return tagged(join_found(uri, image_id, images, objects, categories, allow_absolute,
                           follow_symlinks, layouts))


def tagged(outputs: Iterable) -> Iterator:
  """join_found's outputs as a DoFn gives them: its ErrorRecords to the "errors" output.
  Beam is imported here only: join_found also runs in the join's worker processes
  (sources/coco/join_pool), which import no Beam."""
  from apache_beam.pvalue import TaggedOutput
  for out in outputs:
    yield TaggedOutput("errors", out) if type(out) is ErrorRecord else out


def join_found(uri: str, image_id: int, images: List[Tuple], objects: List[Tuple],
               categories: Dict[Tuple[str, int], str], allow_absolute: bool,
               follow_symlinks: bool = False,
               layouts: Optional[Dict[str, KeypointLayout]] = None):
  """join_image of one image's entries (split, image_root, file_name, width, height) and its
  object chunks, as _JoinFile finds them (no grouped element to build per image): the
  image as a batch's tuple (records/batches), or ErrorRecords (the caller tags them;
  Beam-free, for the join's worker processes, sources/coco/join_pool)."""
  if len(objects) > MAX_OBJECTS_PER_IMAGE and images:
    yield ErrorRecord(
        source=_image_source(uri, image_id), stage="parse", reason="too_many_objects",
        key=str(images[0][2]), level="image",
        message=f"image id {image_id} has more than {MAX_OBJECTS_PER_IMAGE:,} annotations, "
        "the most one image may have: the image is not converted")
    return
  if not images:
    for index, *_ in sorted(objects, key=lambda o: o[0]):  # one record per lost object
      yield ErrorRecord(
          source=f"{uri}#annotations[{index}]", stage="parse", reason="unknown_image_id",
          key=uri, level="object", message=f"the annotation refers to image id {image_id}, "
          "which is not in `images`")
    return
  split, image_root, file_name, width, height = (images[0] if len(images) == 1 else
                                                 min(images, key=repr))
  if len(images) > 1:
    yield ErrorRecord(
        source=_image_source(uri, image_id), stage="parse", reason="duplicate_image_id",
        key=str(file_name), level="warning",
        message=f"image id {image_id} appears {len(images)} times; the first is used")
  try:
    key, image_uri, size = paths.resolve_sized(image_root, file_name, allow_absolute,
                                               follow_symlinks)
  except InputError as e:
    yield e.record(_image_source(uri, image_id), file_name)
    return
  objs: List[Tuple] = []
  if len(objects) > 1:
    objects.sort(key=_INDEX)
  layout = layouts.get(uri) if layouts else None
  for _, category_id, box, is_crowd, area, ann_id, segmentation, *more in objects:
    name = categories.get((uri, category_id))
    if name is None:
      yield ErrorRecord(
          source=_image_source(uri, image_id), stage="parse", reason="unknown_category_id",
          key=key, level="object",
          message=f"annotation of {file_name!r} has category_id {category_id}, "
          "which is not in `categories`")
      continue
    try:  # in a file without keypoints, an object without them: None (no message made)
      points = (None if layout is None and not (more and more[0]) else
                _points(layout, name, more[0] if more else None,
                        f"annotation {ann_id} of {file_name!r}"))
    except InputError as e:
      yield e.record(_image_source(uri, image_id), key, level="object")
      continue
    objs.append(_OBJECT(label=name, box=_BOX(*box), is_crowd=is_crowd, area=area,
                        id=ann_id, segmentation=segmentation, keypoints=points))
  yield _IMAGE(key=key, uri=image_uri, source_id=str(image_id), source=uri,
               objects=tuple(objs), split=split, width=width, height=height,
               size_bytes=size, keypoint_names=layout.names if layout else ())


def _image_source(uri: str, image_id: int) -> str:
  """The source of an error about one image (made only when there is one)."""
  return f"{uri}#image_id={image_id}"


def _points(layout: Optional[KeypointLayout], name: str, given: Optional[Tuple], what: str
            ) -> Optional[Tuple[float, ...]]:
  """An object's points in its file's layout: its category's checked and placed, K unlabelled
  points for a category without keypoints or an annotation without them (as research
  create_coco_tf_record.py pads them); None in a file without keypoints. InputError for
  points its category does not define (keypoint_count_mismatch), or bad values."""
  if layout is None:
    if given:
      raise InputError("validate", "keypoint_count_mismatch",
                       f"{what} has {len(given) // 3} keypoints; its category {name!r} "
                       "names none")
    return None
  slot = layout.slot(name)
  if not given:
    return keypoints.unlabelled(layout)
  triples = keypoints.checked(given, slot[1], what) if slot else tuple(given)
  return keypoints.placed(layout, name, triples, what)


def file_layout(definitions) -> Optional[KeypointLayout]:
  """The keypoint layout of one file: ((uri, category_id), (name, point names, skeleton)) of
  its categories with keypoints, in category id order (a category id given twice: the def
  of its smallest name, the one PickCategory keeps)."""
  chosen: Dict[int, Tuple] = {}
  for (_, category_id), definition in sorted(definitions):
    chosen.setdefault(category_id, definition)
  return keypoints.layout_of([chosen[c] for c in sorted(chosen)])


# The reason of the error that fails a run whose annotations use category id 0 with no
# --label-map: finalize/manifest.USAGE_REASONS makes it exit 2, and the CLI's last line is
# this record's key (the file) and message (what to do).
CATEGORY_ZERO_USED = "category_zero_used"


def category_zero(uri: str, used: Optional[int], defined: Sequence[Tuple[int, str]]
                  ) -> Iterator[ErrorRecord]:
  """What a file's category id 0 comes to without --label-map (0 is background in the TF OD
  API, the dataset's name in Roboflow exports): `used`, the index of the first annotation
  with category_id 0 (None: none has), fails the run; else each category 0 of `defined`
  ((index in `categories`, name)) is dropped with a warning."""
  if used is not None:
    yield ErrorRecord(
        source=f"{uri}#annotations[{used}]", stage="parse", reason=CATEGORY_ZERO_USED, key=uri,
        level="file", message="annotations use category id 0, which the TF OD API reserves "
        "for background; give --label-map with an id >= 1 for that category's name")
    return
  for index, name in sorted(defined):
    yield ErrorRecord(
        source=f"{uri}#categories[{index}]", stage="parse", reason="background_category",
        key=uri, level="warning", message=f"category id 0 ({name!r}) is used by no "
        "annotation and id 0 means background in the TF OD API: dropped (Roboflow exports name "
        "the dataset this way)")


def _zero_verdict(element) -> Iterator[ErrorRecord]:
  """(uri, [('used', index) | ('defined', index, name), ...]) from the section tasks ->
  category_zero's records."""
  uri, notes = element
  used = [note[1] for note in notes if note[0] == "used"]
  yield from category_zero(uri, min(used) if used else None,
                           [(note[1], note[2]) for note in notes if note[0] == "defined"])
