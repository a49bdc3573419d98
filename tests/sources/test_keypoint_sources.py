"""Keypoints in the sources (COCO, YOLO pose, CVAT skeletons) and records/keypoints.py: the
layout of a dataset's points, each object's points, and what bad points become."""
from __future__ import annotations

import io
import json

import layouts_keypoints as lk
import pytest

from beam_tfrecord.records import coders, keypoints, packed
from beam_tfrecord.records.keypoints import KeypointLayout
from beam_tfrecord.records.model import Box, ImageAnnotation, InputError, ObjectAnnotation
from beam_tfrecord.sources import cvat, yolo


def _reason(call) -> str:
  with pytest.raises(InputError) as e:
    call()
  return e.value.reason


def test_layout_shares_equal_lists_and_slices_others():
  """Two classes naming the same points share them; a third list gets the slots after."""
  layout = keypoints.layout_of([("person", ("a", "b"), ((0, 1),)), ("dog", (), ()),
                                ("child", ("a", "b"), ((0, 1),)), ("hand", ("f", "g", "h"),
                                                                  ((1, 2),))])
  assert layout == KeypointLayout(("a", "b", "f", "g", "h"), ((0, 1), (3, 4)),
                                  (("person", 0, 2), ("child", 0, 2), ("hand", 2, 3)))
  assert KeypointLayout.from_json(json.loads(json.dumps(layout.to_json()))) == layout
  hand = keypoints.placed(layout, "hand", (1, 2, 2, 3, 4, 1, 0, 0, 0), "x")
  assert hand == (0.0,) * 6 + (1, 2, 2, 3, 4, 1, 0, 0, 0)
  assert keypoints.placed(layout, "dog", (), "x") == (0.0,) * 15
  assert _reason(lambda: keypoints.placed(layout, "dog", (1, 1, 2), "x")) == \
      "keypoint_count_mismatch"
  assert keypoints.layout_of([("dog", (), ())]) is None


def test_checked_and_normalized():
  assert keypoints.checked([5, 6, 0, 1, 2, 1.0], 2, "x") == (0.0, 0.0, 0.0, 1.0, 2.0, 1.0)
  assert _reason(lambda: keypoints.checked([1, 2, 3], 1, "x")) == "bad_keypoint_visibility"
  assert _reason(lambda: keypoints.checked([1, 2, 2], 2, "x")) == "keypoint_count_mismatch"
  assert _reason(lambda: keypoints.checked([1, "a", 2], 1, "x")) == "wrong_type"
  assert keypoints.normalized((10, 5, 2, 0, 0, 0, 20, 10, 1), 20, 10, "x") == (
      [0.5, 0.0, 1.0], [0.5, 0.0, 1.0], [2, 0, 1])
  assert _reason(lambda: keypoints.normalized((21, 5, 2), 20, 10, "x")) == \
      "keypoint_outside_image"
  assert keypoints.normalized((-7, 99, 0), 20, 10, "x") == ([0.0], [1.0], [0])  # unlabelled


def test_differing_layouts():
  a, b = KeypointLayout(("p",)), KeypointLayout(("q",))
  assert keypoints.differing([("2.json", a), ("1.json", a)]) == (a, [])
  assert keypoints.differing([("2.json", b), ("1.json", a), ("3.json", None)]) == (
      a, ["2.json", "3.json"])
  assert keypoints.differing([("1.json", None)]) == (None, [])


def test_points_cross_shuffles_and_reach_the_writer():
  ann = ImageAnnotation("k", "/k", "k", "s", objects=(ObjectAnnotation(
      "person", Box(1, 2, 3, 4), keypoints=(1.0, 2.0, 2.0, 0.0, 0.0, 0.0)),),
      keypoint_names=("a", "b"))
  coder = coders.DataclassCoder(ImageAnnotation)
  assert coder.decode(coder.encode(ann)) == ann
  assert packed.unpack(packed.pack(ann)[packed.BLOB]) == ann


@pytest.mark.parametrize("join_in_worker", [True, False])
def test_coco_both_joins(tmp_path, join_in_worker):
  """ReadCoco, in one worker and through the CoGroupByKey: persons' points as the JSON gives
  them, the dog's 17 unlabelled, the 17 names on each image; one layout per file."""
  import apache_beam as beam
  from apache_beam.testing.test_pipeline import TestPipeline
  from apache_beam.testing.util import assert_that, equal_to

  from beam_tfrecord.sources.coco import ReadCoco
  images = lk.make_images(tmp_path)
  train = lk.write_coco(tmp_path, images, "train")
  expected = []
  for img in images:
    if img.split == "train":
      expected.append((img.name, tuple(
          (o.label, tuple(float(v) for p in (o.points or [(0, 0, 0)] * 17) for v in p))
          for o in img.objects), lk.COCO_KEYPOINTS))
  from beam_tfrecord.records import batches
  with TestPipeline("FnApiRunner") as p:
    out = p | ReadCoco([("train", str(train), str(tmp_path / "images"))],
                       join_in_worker=join_in_worker)
    assert_that(out.images | beam.FlatMap(lambda batch: [(a.key, tuple(  # batches of images
        (o.label, o.keypoints) for o in a.objects), a.keypoint_names)
        for a in batches.annotations(batch)]),
        equal_to(expected))
    assert_that(out.errors, equal_to([]), label="NoErrors")


def test_yolo_pose_lines():
  """[K, 3]: COCO's visibilities, 0 at 0, 0; [K, 2]: every point labelled; a point off
  [0, 1] or a visibility of 0.5 is the line's error."""
  obj = yolo.parse_line("0 0.5 0.5 0.4 0.4 0.1 0.2 2 0.7 0.8 0 0.3 0.4 1", ["p"],
                        kpt_shape=(3, 3))
  assert obj.keypoints == (0.1, 0.2, 2.0, 0.0, 0.0, 0.0, 0.3, 0.4, 1.0) and obj.box.normalized
  assert yolo.parse_line("0 0.5 0.5 0.4 0.4 0 0 0.3 0.4", ["p"], kpt_shape=(2, 2)).keypoints \
      == (0.0, 0.0, 2.0, 0.3, 0.4, 2.0)
  assert _reason(lambda: yolo.parse_line("0 0.5 0.5 0.4 0.4 0.1 0.2 0.5", ["p"],
                                         kpt_shape=(1, 3))) == "bad_keypoint_visibility"
  assert _reason(lambda: yolo.parse_line("0 0.5 0.5 0.4 0.4 1.1 0.2 1", ["p"],
                                         kpt_shape=(1, 3))) == "keypoint_outside_image"
  assert yolo.parse_line("0 0.5 0.5 0.4 0.4", ["p"]).keypoints is None


def test_yolo_kpt_names(tmp_path):
  from beam_tfrecord.errors import UsageError
  (tmp_path / "images").mkdir()
  path = tmp_path / "pose.yaml"
  path.write_text("train: images\nkpt_shape: [2, 3]\nnames: [p, q]\n"
                  "kpt_names:\n  0: [head, tail]\n  1: [head, tail]\n")
  dataset = yolo.load(str(path))
  assert dataset.kpt_names == ("head", "tail")
  assert dataset.layout == KeypointLayout(("head", "tail"), (), (("p", 0, 2), ("q", 0, 2)))
  path.write_text("train: images\nkpt_shape: [2, 3]\nnames: [p]\n")
  assert yolo.load(str(path)).kpt_names == ("0", "1")
  path.write_text("train: images\nkpt_shape: [2, 3]\nnames: [p]\nkpt_names: {0: [a]}\n")
  with pytest.raises(UsageError, match="kpt_names"):
    yolo.load(str(path))


def _cvat(tmp_path, element=None):
  images = lk.make_images(tmp_path, count=3, keypoints=3, other="car")
  xml = lk.write_cvat_skeletons(tmp_path, images, ("a", "b", "c"), [(0, 1), (1, 2)],
                                element=element)
  return images, xml


def test_cvat_meta_skeletons(tmp_path):
  """The skeleton label with its svg's points and edges; its point labels are no classes."""
  _, xml = _cvat(tmp_path)
  with open(xml, "rb") as f:
    meta = cvat.read_meta(f)
  assert meta.labels == frozenset({"person", "car"})
  assert meta.skeletons == (("person", ("a", "b", "c"), ((0, 1), (1, 2))),)
  assert meta.layout == KeypointLayout(("a", "b", "c"), ((0, 1), (1, 2)), (("person", 0, 3),))


def test_cvat_skeleton_errors(tmp_path):
  """A point named twice, or one the skeleton does not have, is the skeleton's error; a
  skeleton of a label that is no skeleton too."""
  layout = KeypointLayout(("a", "b"), (), (("person", 0, 2),))
  from xml.etree import ElementTree as ET

  def skeleton(points, label="person"):
    return ET.fromstring(f'<skeleton label="{label}">' + "".join(
        f'<points label="{n}" outside="0" occluded="0" points="{x},{y}"/>'
        for n, x, y in points) + "</skeleton>")
  obj = cvat.parse_skeleton(skeleton([("b", 5, 6), ("a", 1, 2)]), layout)
  assert obj.keypoints == (1.0, 2.0, 2.0, 5.0, 6.0, 2.0)
  assert (obj.box.xmin, obj.box.ymin, obj.box.xmax, obj.box.ymax) == (1, 2, 5, 6)
  for points, label, reason in [([("a", 1, 2), ("a", 1, 2)], "person", "keypoint_count_mismatch"),
                                ([("a", 1, 2), ("z", 1, 2)], "person", "keypoint_count_mismatch"),
                                ([("a", 1, 2)], "person", "keypoint_count_mismatch"),
                                ([("a", 1, 2), ("b", 1, 2)], "car", "unknown_label")]:
    assert _reason(lambda: cvat.parse_skeleton(skeleton(points, label), layout)) == reason


def test_coco_skeleton_numbering():
  """COCO's 1-based skeleton and Datumaro's 0-based one both become 0-based pairs; one that
  fits neither, or is no list of pairs, is dropped with a warning, the names kept."""
  from beam_tfrecord.sources.coco.entries import category_keypoints, skeleton_edges
  assert skeleton_edges([[1, 2], [2, 3]], 3) == (((0, 1), (1, 2)), None)
  assert skeleton_edges([[0, 1], [1, 2]], 3) == (((0, 1), (1, 2)), None)
  assert skeleton_edges([], 3) == ((), None)
  for bad in ([[0, 3]], [[1, 4]], [[-1, 1]], [[1, 2, 3]], [["a", 1]], [[True, 1]], "1-2"):
    edges, problem = skeleton_edges(bad, 3)
    assert edges == () and problem, bad
  names, edges, warning = category_keypoints(
      {"name": "person", "keypoints": ["a", "b", "c"], "skeleton": [[0, 3]]})
  assert (names, edges) == (("a", "b", "c"), ()) and "'person'" in warning
  assert category_keypoints({"name": "p", "keypoints": ["a", "b"], "skeleton": [[1, 2]]}) == (
      ("a", "b"), ((0, 1),), None)
