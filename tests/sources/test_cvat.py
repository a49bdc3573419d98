"""sources/cvat.py: CVAT for images 1.1 XML (task, job, project exports), pure functions and
conversions through the CLI on the in-process runner, read back with TensorFlow.

Fixtures are written by tests/layouts_cvat.py from the generated sample images, as CVAT's own
exporter writes them (see its docstring for what was looked at).
"""
from __future__ import annotations

import collections
import io
import os
import re
import shutil
import xml.etree.ElementTree as ET
from collections import OrderedDict

import layouts
import layouts_cvat
import numpy as np
import pytest
from bad_data import RUNNER, convert
from layouts_cvat import box_attrs, polygon_attrs, write_cvat
from PIL import Image

from beam_tfrecord.errors import EXIT_USAGE
from beam_tfrecord.records.model import InputError
from beam_tfrecord.sources import cvat, detect, voc
from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
from beam_tfrecord.sources.cvat import byte_ranges


def _image(xml: str):
  return ET.fromstring(xml)


def _items(data: bytes, start: int = 0, end: int = None, meta=None, masks=False):
  return list(cvat.parse_range(io.BytesIO(data), start, len(data) if end is None else end,
                               meta, masks, "a.xml"))


def _doc(images: int, labels=("cat", "dog")) -> bytes:
  body = "".join(
      f'  <image id="{i}" name="im_{i:03d}.jpg" width="100" height="80">\n'
      f'    <box label="{labels[i % len(labels)]}" source="manual" occluded="{i % 2}" '
      f'xtl="{i}.00" ytl="1.50" xbr="{i + 10}.00" ybr="20.25" z_order="0">\n'
      f'      <attribute name="color">a &lt;image x&gt; value</attribute>\n    </box>\n'
      "  </image>\n" for i in range(images))
  names = "".join(f"        <label>\n          <name>{n}</name>\n        </label>\n"
                  for n in labels)
  return (f'<?xml version="1.0" encoding="utf-8"?>\n<annotations>\n  <version>1.1</version>\n'
          f"  <meta>\n    <task>\n      <id>3</id>\n      <subset>Validation</subset>\n"
          f"      <labels>\n{names}      </labels>\n    </task>\n"
          f"    <dumped>2026-11-23</dumped>\n  </meta>\n{body}</annotations>\n").encode()


# ---------------------------------------------------------------------------------------------
# Pure functions


def test_parse_image_boxes_polygons_groups_and_what_is_not_converted():
  element = _image(
      '<image id="0" name="sub/a.jpg" width="100" height="80">'
      '<box label="cat" source="manual" occluded="1" xtl="1.5" ytl="2" xbr="30" ybr="40" '
      'z_order="0"><attribute name="color">red</attribute></box>'
      '<polygon label="dog" occluded="0" points="10,10;50,10;30,60" z_order="1" group_id="4"/>'
      '<box label="dog" occluded="0" xtl="60" ytl="5" xbr="70" ybr="15" group_id="4"/>'
      '<polyline label="cat" points="1,1;2,2"/><points label="cat" points="1,1"/>'
      '<tag label="cat" source="manual"/>'
      '<skeleton label="cat"><points label="nose" points="1,1"/></skeleton>'
      '<box label="" xtl="1" ytl="1" xbr="2" ybr="2"/>'
      '<box label="bird" xtl="1" ytl="1" xbr="2" ybr="2"/>'
      '<box label="cat" xtl="1" ytl="x" xbr="2" ybr="2"/>'
      '<polygon label="cat" points="1,1;2,2"/>'
      '<box label="cat" occluded="2" xtl="1" ytl="1" xbr="2" ybr="2"/>'
      '<box label="cat" xtl="1" ytl="1" xbr="2" ybr="2" group_id="9"/>'
      '<polygon label="dog" points="3,3;4,3;4,4" group_id="9"/>'
      '</image>')
  image = cvat.parse_image(element, frozenset({"cat", "dog"}), include_masks=True,
                           source="x.xml")
  assert (image.name, image.width, image.height, image.subset) == ("sub/a.jpg", 100, 80, None)
  cat, dog = image.objects
  assert (cat.label, cat.box.xmin, cat.box.ymin, cat.box.xmax, cat.box.ymax, cat.truncated) == \
      ("cat", 1.5, 2.0, 30.0, 40.0, True)
  assert cat.segmentation == "[[1.5,2.0,30.0,2.0,30.0,40.0,1.5,40.0]]"
  # a group is one object: the box around both, both parts in its mask
  assert (dog.label, dog.box.xmin, dog.box.ymin, dog.box.xmax, dog.box.ymax, dog.truncated) == \
      ("dog", 10.0, 5.0, 70.0, 60.0, False)
  assert dog.segmentation == ("[[10.0,10.0,50.0,10.0,30.0,60.0],"
                              "[60.0,5.0,70.0,5.0,70.0,15.0,60.0,15.0]]")
  got = [(e.reason, level) for e, level in image.problems]
  assert got == [("unsupported_shape", "warning")] * 4 + [
      ("missing_label", "object"), ("unknown_label", "object"), ("wrong_type", "object"),
      ("malformed_shape", "object"), ("wrong_type", "object"), ("group_labels_differ", "object")]
  shapes = [e.message for e, _ in image.problems[:4]]
  for tag, message in zip(("polyline", "points", "tag", "skeleton"), shapes):
    assert message.startswith(f"<{tag}> 'cat' of image 'sub/a.jpg' in x.xml is not converted")
  assert "group_id 9" in image.problems[-1][0].message
  # without --include-masks no segmentation travels
  assert all(o.segmentation is None for o in cvat.parse_image(element, None).objects)


def test_rotated_box_becomes_the_box_around_it():
  element = _image('<image name="a.jpg" width="100" height="100"><box label="a" xtl="10" '
                   'ytl="20" xbr="30" ybr="60" rotation="90.00" occluded="0"/></image>')
  (obj,) = cvat.parse_image(element, frozenset({"a"})).objects
  # 20 x 40 about (20, 40), turned a quarter: 40 x 20
  assert [round(v, 9) for v in (obj.box.xmin, obj.box.ymin, obj.box.xmax, obj.box.ymax)] == \
      [0.0, 30.0, 40.0, 50.0]
  corners = cvat.rotated_corners(0, 0, 2, 0, 90)  # clockwise on screen: (0,0) -> (2,-... )
  assert [round(v, 9) for v in corners[:2]] == [1.0, -1.0]


def test_points_sizes_and_subsets():
  assert cvat.parse_points("1.5,2;3,4.25", "p") == [1.5, 2.0, 3.0, 4.25]
  for text, reason in (("1,2;3", "malformed_points"), ("1,nan", "wrong_type"),
                       ("", "missing_field"), ("a,b", "wrong_type")):
    with pytest.raises(InputError) as e:
      cvat.parse_points(text, "p")
    assert e.value.reason == reason, text
  with pytest.raises(InputError):
    cvat.parse_image(_image('<image name="a" width="-3" height="2"/>'), None)
  assert cvat.split_of("Train") == "train" and cvat.split_of("Validation") == "validation"
  assert cvat.split_of("default") is None and cvat.split_of(None) is None
  with pytest.raises(InputError) as e:
    cvat.split_of("my set")
  assert e.value.reason == "bad_subset"


def test_parse_range_reads_meta_then_every_image():
  data = _doc(5)
  items = _items(data)
  assert items[0] == ("meta", cvat.Meta("task", frozenset({"cat", "dog"}), "Validation"))
  images = [i[1] for i in items[1:]]
  assert [im.name for im in images] == [f"im_{i:03d}.jpg" for i in range(5)]
  assert [(o.label, o.box.xmin, o.box.ymax, o.truncated) for im in images for o in im.objects] \
      == [(("cat", "dog")[i % 2], float(i), 20.25, bool(i % 2)) for i in range(5)]


@pytest.mark.parametrize("step", [1, 7, 64, 333, 1000, 10 ** 6])
def test_ranges_cut_anywhere_read_each_image_once(step):
  """Wherever the file is cut (inside a tag, inside '<image', inside an attribute that
  mentions '&lt;image'), each image is read by exactly one range, as the whole file reads it."""
  data = _doc(12)
  meta = cvat.read_meta(io.BytesIO(data))
  whole = [i[1] for i in _items(data)[1:]]
  parts = []
  for start, end in cvat.ranges(len(data), True, step):
    found = _items(data, start, end, meta)
    assert all(kind in ("image", "meta") for kind, *_ in found), found
    parts += [i[1] for i in found if i[0] == "image"]
  assert parts == whole and len(whole) == 12


def test_head_version_detect_and_encodings(tmp_path):
  data = _doc(2)
  assert cvat.head_version(data[:120]) == "1.1"
  assert cvat.head_version(b"<annotation><filename>a</filename></annotation>") is None
  assert cvat.head_version(b'{"images": []}') is None
  assert cvat.head_version(data.replace(b"1.1", b"1.0")) == "1.0"
  assert cvat.declared_encoding(data[:60]) == ("utf-8", True)
  assert cvat.declared_encoding(b"<?xml version='1.0' encoding='ISO-8859-1'?>") == \
      ("ISO-8859-1", True)
  assert cvat.declared_encoding("<?xml ?>".encode("utf-16")) == ("utf-16", False)
  (tmp_path / "export").mkdir()
  (tmp_path / "export" / "annotations.xml").write_bytes(data)
  (tmp_path / "voc.xml").write_text("<annotation><filename>a.jpg</filename></annotation>")
  assert cvat.detect(str(tmp_path / "export" / "annotations.xml")) == "CVAT XML 1.1"
  assert cvat.detect(str(tmp_path / "export")) == "annotations.xml"
  assert cvat.detect(str(tmp_path / "voc.xml")) is None
  assert cvat.detect(str(tmp_path)) is None
  # VOC's detection leaves a CVAT export alone, and still finds XMLs beside it
  assert voc.detect(str(tmp_path / "export")) is None
  assert voc.detect(str(tmp_path)) == "XMLs"


def test_broken_files_stop_where_they_break():
  data = _doc(4)
  cut = data.index(b'<image id="2"') + 30  # inside the third image
  items = _items(data[:cut])
  assert [i[1].name for i in items if i[0] == "image"] == ["im_000.jpg", "im_001.jpg"]
  (error,) = [i for i in items if i[0] == "error"]
  assert (error[1].reason, error[2]) == ("malformed_xml", "file")
  assert "2 image(s) of the file were read before it" in error[1].message
  bomb = (b'<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xx">]>'
          b"<annotations><version>1.1</version></annotations>")
  assert [(i[1].reason, i[2]) for i in _items(bomb)] == [("unsafe_xml", "file")]
  deep = data.replace(b"<dumped>", b"<a>" * 40 + b"</a>" * 40 + b"<dumped>")
  assert [i[1].reason for i in _items(deep) if i[0] == "error"] == ["too_deep"]
  track = data.replace(b"</meta>", b'</meta>\n  <track id="0" label="cat"><box frame="0"/>'
                       b"</track>")
  errors = [i for i in _items(track) if i[0] == "error"]
  assert [(e[1].reason, e[2]) for e in errors] == [("unsupported_track", "object")]
  assert [i[1].reason for i in _items(data.replace(b"1.1", b"1.0"))] == ["unsupported_version"]
  assert [i[1].reason for i in _items(data.replace(b"<annotations>", b"<annotation>")
                                      .replace(b"</annotations>", b"</annotation>"))] == \
      ["malformed_xml"]


def _names(items):
  return [i[1].name for i in items if i[0] == "image"]


def _rejected(items):
  return sorted((i[1].reason, i[2], i[3]) for i in items if i[0] == "error")


def _in_image(data: bytes, name: str, inside: bytes) -> bytes:
  """data with `inside` put first in the <image> named `name` (of _doc)."""
  tag = f'name="{name}" width="100" height="80">'.encode()
  return data.replace(tag, tag + inside)


@pytest.mark.parametrize("step", [None, 97, 1000])
def test_one_image_over_a_budget_rejects_that_image_alone(monkeypatch, step):
  """An image over its byte budget, one nested too deep (in the same 64 kB chunk as the images
  around it) and one with a bad width: each is an image error naming it; the other images
  are read, the file whole or in ranges, each once."""
  monkeypatch.setattr(byte_ranges, "MAX_ELEMENT_BYTES", 16 << 10)  # + one 64 kB chunk
  data = _in_image(_doc(7), "im_001.jpg", b'<points label="cat" points="1,1"/>' * 4000)
  data = _in_image(data, "im_003.jpg", b'<box label="cat">' + b"<a>" * 40 + b"</a>" * 40
                   + b"</box>")
  data = data.replace(b'name="im_005.jpg" width="100"', b'name="im_005.jpg" width="-3"')
  meta = cvat.read_meta(io.BytesIO(data))
  items = []
  for start, end in cvat.ranges(len(data), True, step or len(data)):
    items += _items(data, start, end, meta)
  assert _names(items) == ["im_000.jpg", "im_002.jpg", "im_004.jpg", "im_006.jpg"]
  assert _rejected(items) == [("too_deep", "image", "im_003.jpg"),
                              ("too_large", "image", "im_001.jpg"),
                              ("wrong_type", "image", "im_005.jpg")]
  messages = {i[3]: i[1].message for i in items if i[0] == "error"}
  assert messages["im_001.jpg"].startswith("image 'im_001.jpg': one element holds more than")
  assert messages["im_003.jpg"].endswith("elements; the image is not converted")


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 16])
def test_range_pieces_never_run_past_an_image_tag(chunk):
  """What parse_range resumes on after a rejected image: however the chunks fall, each piece
  is the file's bytes up to its offset, and holds an `<image` tag only at its start."""
  data = _doc(9)
  for start, end in ((0, len(data)), (150, 900), (900, len(data))):
    at = data.index(b"<image ", start) if start else 0
    pieces = list(byte_ranges.range_bytes(io.BytesIO(data), start, end, chunk=chunk))
    for piece, offset in pieces[:-1] if end < len(data) else pieces:  # (the closing tag)
      assert data[at:offset] == piece and b"<image " not in piece[1:], (start, piece)
      at = offset
    assert at == (len(data) if end == len(data) else data.index(b"<image ", end))


def test_an_image_over_its_budget_stops_a_file_that_cannot_be_cut(monkeypatch):
  """UTF-16 cannot be read from an image's tag on: there the image stops the file."""
  monkeypatch.setattr(byte_ranges, "MAX_ELEMENT_BYTES", 16 << 10)
  data = _in_image(_doc(3), "im_001.jpg", b'<points label="cat" points="1,1"/>' * 4000)
  data = data.decode().replace('encoding="utf-8"', 'encoding="utf-16"').encode("utf-16")
  meta = cvat.read_meta(io.BytesIO(data))
  assert not meta.splittable
  items = _items(data, meta=meta)
  assert _names(items) == ["im_000.jpg"]
  assert _rejected(items) == [("too_large", "file", None)]


def test_elements_per_image_are_bounded(monkeypatch):
  """With the real MAX_OBJECTS_PER_IMAGE: an image of that many elements is read whole; one
  more rejects that image alone (too_many_objects, naming it), the element past the bound
  is not kept, and the next image is read."""
  from beam_tfrecord.sources.cvat import document
  bound = MAX_OBJECTS_PER_IMAGE
  box = b'<box label="dog" occluded="0" xtl="1" ytl="2" xbr="5" ybr="6" z_order="0"/>'
  # each image of _doc has one box already
  data = _in_image(_in_image(_doc(3), "im_000.jpg", box * (bound - 1)), "im_001.jpg",
                   box * bound)
  kept = {}
  image_item = document._RangeReader._image

  def spy(reader, element, elements):
    kept[element.get("name")] = len(element)
    return image_item(reader, element, elements)
  monkeypatch.setattr(document._RangeReader, "_image", spy)
  items = _items(data)
  assert _names(items) == ["im_000.jpg", "im_002.jpg"]
  assert len(items[1][1].objects) == bound
  assert _rejected(items) == [("too_many_objects", "image", "im_001.jpg")]
  assert f"image 'im_001.jpg' has {bound + 1:,} elements" in items[2][1].message
  assert kept == {"im_000.jpg": bound, "im_001.jpg": bound, "im_002.jpg": 1}


# ---------------------------------------------------------------------------------------------
# Conversions


def _ids(images):
  return {n: i for i, n in enumerate(sorted({b[0] for im in images for b in im.boxes}), 1)}


@pytest.mark.e2e
def test_task_export_detected_and_converted(dataset, tmp_path, capsys):
  """A task export (its subset 'default'): every image to train, boxes to 1e-5, occluded as
  image/object/truncated, ids from sorted label names, no errors."""
  xml = write_cvat(dataset.images, dataset.image_dir, tmp_path / "export", occluded=True)
  run = convert(["--input", str(xml), "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert "detected: cvat (CVAT XML 1.1)" in run.stdout
  assert run.manifest["format"] == "cvat" and run.errors == []
  ids = dataset.sorted_name_ids()
  assert run.manifest["label_map"] == ids
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, ids, lambda im: "train")
  for im in dataset.images:
    ex = run.by_filename()[im.file_name]
    assert ex["image/source_id"] == im.file_name.encode()
    if im.boxes:
      assert ex["image/object/truncated"] == [i % 2 for i in range(len(im.boxes))]


@pytest.mark.e2e
def test_project_export_folder_subsets_are_splits(small_dataset, tmp_path, capsys):
  """A project export folder (images/<Subset>/<name>): --format auto finds annotations.xml,
  each image's subset is its split, lower-cased."""
  ds = small_dataset
  export = tmp_path / "project"
  write_cvat(ds.images, ds.image_dir, export, kind="project")
  assert sorted(os.listdir(export / "images")) == ["Train", "Validation"]
  run = convert(["--input", str(export), "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert "detected: cvat (annotations.xml)" in run.stdout
  split_of = {"train": "train", "val": "validation"}
  assert layouts.split_counts(run) == dict(collections.Counter(split_of[im.split]
                                                               for im in ds.images))
  layouts.check_od_examples(run, ds.images, ds.image_dir, _ids(ds.images),
                            lambda im: split_of[im.split])
  assert {e["filename"] for e in run.examples} == {
      f"{layouts_cvat.SUBSETS[im.split]}/{im.file_name}" for im in ds.images}
  assert run.errors == []


@pytest.mark.e2e
def test_bad_elements_and_files_become_error_records(small_dataset, tmp_path, monkeypatch):
  """Unknown and empty labels, a group of two labels, bad coordinates: object errors; points,
  polylines, tags and skeletons: warnings naming the shape and the file; a file cut short:
  one file error, its images before the cut converted. A job export read in many small byte
  ranges; the rest converted, each image once."""
  ds = small_dataset
  first, second = ds.images[:3], ds.images[3:]
  target = first[0].file_name
  extra = {target: [
      ("box", box_attrs("zebra", 1, 1, 9, 9)),
      ("box", box_attrs("", 1, 1, 9, 9)),
      ("box", OrderedDict([("label", "cat"), ("occluded", "0"), ("xtl", "1"), ("ytl", "?"),
                           ("xbr", "5"), ("ybr", "5")])),
      ("box", box_attrs("cat", 1, 1, 9, 9, group=2)),
      ("polygon", polygon_attrs("dog", [(1, 1), (5, 1), (5, 5)], group=2)),
      ("points", OrderedDict([("label", "cat"), ("source", "manual"), ("occluded", "0"),
                              ("points", "3.00,4.00"), ("z_order", "0")])),
      ("polyline", OrderedDict([("label", "dog"), ("source", "manual"), ("occluded", "0"),
                                ("points", "3.00,4.00;5.00,6.00"), ("z_order", "0")])),
      ("tag", OrderedDict([("label", "cat"), ("source", "manual")])),
      ("skeleton", OrderedDict([("label", "cat"), ("source", "manual"), ("z_order", "0")])),
  ]}
  labels = ["cat", "dog", "person"]
  good = write_cvat(first, ds.image_dir, tmp_path / "job", kind="job", labels=labels,
                    extra=extra)
  cut = write_cvat(second, ds.image_dir, tmp_path / "cut", labels=labels)
  text = cut.read_bytes()
  cut.write_bytes(text[:text.index(f'name="{second[2].file_name}"'.encode()) + 10])
  monkeypatch.setattr(byte_ranges, "RANGE_BYTES", 300)  # the job's file is read in ~15 ranges
  # a file-level error fails the run unless --max-error-rate accepts rejections
  run = convert(["--format", "cvat", "--input", str(good), "--input", str(cut),
                 "--max-error-rate", "1", "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0
  read = first + second[:2]
  layouts.check_od_examples(run, read, ds.image_dir, _ids(read), lambda im: "train")
  got = sorted((e["reason"], e["level"], e["key"]) for e in run.errors)
  assert got == sorted(
      [(r, "object", target) for r in ("unknown_label", "missing_label", "wrong_type",
                                       "group_labels_differ")]
      + [("unsupported_shape", "warning", target)] * 4
      + [("malformed_xml", "file", str(cut))])
  for error in run.errors_where(reason="unsupported_shape"):
    assert error["source"] == str(good) and str(good) in error["message"]
  assert {e["message"].split(" ", 1)[0] for e in run.errors_where(
      reason="unsupported_shape")} == {"<points>", "<polyline>", "<tag>", "<skeleton>"}
  (broken,) = run.errors_where(reason="malformed_xml")  # in the cut file's last range
  assert re.search(r"\d image\(s\) of the range from byte \d+ were read before it, the rest "
                   "is not", broken["message"]), broken


@pytest.mark.e2e
def test_an_image_over_a_budget_is_rejected_alone(small_dataset, tmp_path):
  """A task export (real budgets) where one image holds a 4 MB attribute value, one nests too
  deep and one has MAX_OBJECTS_PER_IMAGE + 1 boxes: each is one image error naming it, and
  every other image of the file is converted with its boxes."""
  ds = small_dataset
  big, deep, many = ds.images[1], ds.images[3], ds.images[4]
  label = ds.images[0].boxes[0][0] if ds.images[0].boxes else "cat"
  box = box_attrs(label, 1, 1, 9, 9)
  over = byte_ranges.MAX_ELEMENT_BYTES + 2 * byte_ranges.CHUNK_BYTES  # read a chunk at a time
  extra = {big.file_name: [("box", box, [("note", "x" * over)])],
           deep.file_name: [("box", box, [("note", "DEEP")])],
           many.file_name: [("box", box)] * (MAX_OBJECTS_PER_IMAGE + 1)}
  xml = write_cvat(ds.images, ds.image_dir, tmp_path / "export", extra=extra)
  xml.write_bytes(xml.read_bytes().replace(b">DEEP<", b">" + b"<a>" * 40 + b"</a>" * 40 + b"<"))
  run = convert(["--input", str(xml), "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0, run.stderr
  kept = [im for im in ds.images if im not in (big, deep, many)]
  layouts.check_od_examples(run, kept, ds.image_dir, run.manifest["label_map"],
                            lambda im: "train")
  assert sorted((e["reason"], e["level"], e["key"], e["source"]) for e in run.errors) == sorted(
      [("too_large", "image", big.file_name, str(xml)),
       ("too_deep", "image", deep.file_name, str(xml)),
       ("too_many_objects", "image", many.file_name, str(xml))])
  for error in run.errors:
    assert f"image {error['key']!r}" in error["message"], error


@pytest.mark.e2e
def test_polygons_and_groups_become_masks(small_dataset, tmp_path):
  """--include-masks: a polygon's mask is its inside, a group's the union of its parts, a
  box's its rectangle; the box of a group surrounds all its parts."""
  ds = small_dataset
  empty = next(im for im in ds.images if im.file_name == "img_0004.jpg")  # 256 x 256
  boxed = next(im for im in ds.images if len(im.boxes) == 1)
  extra = {empty.file_name: [
      ("polygon", polygon_attrs("cat", [(20, 20), (120, 20), (20, 120)])),
      ("polygon", polygon_attrs("dog", [(150, 10), (200, 10), (200, 60), (150, 60)], group=3)),
      ("box", box_attrs("dog", 150, 200, 250, 250, occluded=1, group=3)),
  ]}
  xml = write_cvat(ds.images, ds.image_dir, tmp_path / "export", extra=extra)
  run = convert(["--input", str(xml), "--include-masks", "--output", str(tmp_path / "out"),
                 RUNNER])
  assert run.code == 0 and run.errors == []
  ex = run.by_filename()[empty.file_name]
  assert ex["image/object/class/text"] == [b"cat", b"dog"]
  assert ex["image/object/truncated"] == [0, 1]
  box = [ex[f"image/object/bbox/{k}"][1] * 256 for k in ("xmin", "ymin", "xmax", "ymax")]
  assert np.allclose(box, [150, 10, 250, 250], atol=1e-3)
  cat, dog = (np.array(Image.open(io.BytesIO(m))) for m in ex["image/object/mask"])
  assert cat.shape == dog.shape == (256, 256)
  assert cat[40, 40] == 1 and cat[100, 100] == 0 and cat[30, 110] == 0 and cat[110, 30] == 0
  assert dog[30, 170] == 1 and dog[220, 200] == 1 and dog[120, 200] == 0 and dog[30, 100] == 0
  assert cat.sum() == pytest.approx(100 * 100 / 2, rel=0.05)
  assert dog.sum() == pytest.approx(50 * 50 + 100 * 50, rel=0.06)
  (label, x0, y0, x1, y1) = boxed.boxes[0]
  (rect,) = (np.array(Image.open(io.BytesIO(m)))
             for m in run.by_filename()[boxed.file_name]["image/object/mask"])
  assert rect[int((y0 + y1) / 2), int((x0 + x1) / 2)] == 1 and rect[int(y1) + 2, int(x1) + 2] == 0
  assert rect.sum() == pytest.approx((x1 - x0) * (y1 - y0), rel=0.15)


def test_bad_command_lines_exit_2_with_one_line(small_dataset, tmp_path, capsys):
  ds = small_dataset
  xml = write_cvat(ds.images, ds.image_dir, tmp_path / "export", save_images=False)
  old = tmp_path / "old.xml"
  old.write_bytes(xml.read_bytes().replace(b"<version>1.1", b"<version>1.0"))
  dtd = tmp_path / "dtd.xml"
  dtd.write_bytes(xml.read_bytes().replace(
      b"?>", b'?>\n<!DOCTYPE annotations [<!ENTITY who "cvat">]>', 1))
  voc_xml = tmp_path / "voc.xml"
  voc_xml.write_text("<annotation><filename>a.jpg</filename></annotation>")
  (tmp_path / "empty").mkdir()
  cases = [
      ([str(tmp_path / "missing.xml")], "no such file"),
      ([str(voc_xml)], "not a CVAT XML file"),
      ([str(old)], "version 1.0"),
      ([str(dtd)], f"--input {dtd}: the XML declares a DTD or entities (DTDForbidden): DTDs "
                   "and entities are refused (unsafe XML)"),
      ([str(tmp_path / "empty")], "annotations.xml: no such file"),
      ([str(xml), "--images", str(tmp_path / "nowhere")], "no such directory"),
      ([str(xml), "--csv-normalized"], "--csv-normalized applies to --format csv only"),
  ]
  for args, text in cases:
    out = tmp_path / "out"
    run = convert(["--format", "cvat", "--input", *args, "--output", str(out)], capsys)
    assert run.code == EXIT_USAGE, args
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], (args, run.stderr)
    assert not out.exists()


def test_format_auto_finds_a_cvat_xml_with_a_dtd_and_refuses_it_in_one_line(
    small_dataset, tmp_path, capsys):
  """--format auto: a CVAT XML that declares a DTD is still a CVAT XML (found as one, not
  'cannot tell the format'), and the run refuses it as --format cvat does: one line, exit 2."""
  from beam_tfrecord.sources import detect
  xml = write_cvat(small_dataset.images, small_dataset.image_dir, tmp_path / "export",
                   save_images=False)
  dtd = tmp_path / "dtd.xml"
  dtd.write_bytes(xml.read_bytes().replace(
      b"?>", b'?>\n<!DOCTYPE annotations [\n  <!ENTITY who "cvat">\n]>', 1))
  assert detect.detect([str(dtd)]).format == "cvat"
  out = tmp_path / "out"
  run = convert(["--input", str(dtd), "--output", str(out)], capsys)
  assert run.code == EXIT_USAGE
  lines = run.stderr.strip().splitlines()
  assert len(lines) == 1 and "DTDs and entities are refused (unsafe XML)" in lines[0], \
      run.stderr
  assert not out.exists()


def test_other_layouts_are_not_taken_for_cvat(dataset, tmp_path):
  images, image_dir = dataset.images, dataset.image_dir
  paths = [str(dataset.voc_dir), str(dataset.coco_file("train")), str(dataset.csv_file("val")),
           str(layouts.write_ultralytics(images, image_dir, tmp_path / "u")),
           str(layouts.write_darknet(images, image_dir, tmp_path / "d")),
           str(layouts.write_raccoon(images, image_dir, tmp_path / "raccoon")),
           str(tmp_path / "raccoon" / "annotations"),
           str(layouts.write_class_folders(images[:4], image_dir, tmp_path / "folders"))]
  paths += [str(p) for p in (dataset.voc_dir / "Annotations").glob("*.xml")][:3]
  for kind in ("coco", "csv", "voc", "yolo"):
    root = layouts.write_roboflow(images, image_dir, tmp_path / f"rf-{kind}", kind)
    paths += [str(root), str(root / "train")]
  for path in paths:
    assert "cvat" not in [f for f, _ in detect.candidates(path)], path
  # VOC's detection (which now looks into an annotations.xml) still finds LabelImg folders
  assert voc.detect(str(tmp_path / "raccoon")) == "XMLs in annotations/"
  assert voc.detect(str(tmp_path / "raccoon" / "annotations")) == "XMLs"
  # an annotations-only CVAT export is cvat alone; beside VOC XMLs, VOC's still fit
  export = tmp_path / "only"
  write_cvat(images[:3], image_dir, export, save_images=False)
  assert detect.candidates(str(export)) == [("cvat", "annotations.xml")]
  shutil.copy(next((dataset.voc_dir / "Annotations").glob("*.xml")), export / "x.xml")
  assert [f for f, _ in detect.candidates(str(export))] == ["voc", "cvat"]


def test_task_export_folder_is_detected_as_cvat(small_dataset, tmp_path):
  export = tmp_path / "task"
  write_cvat(small_dataset.images, small_dataset.image_dir, export)
  assert detect.detect([str(export)]).format == "cvat"
