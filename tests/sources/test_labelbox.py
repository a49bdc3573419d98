"""sources/labelbox.py: Labelbox export v2 NDJSON. Pure parse and lookup functions first, then
conversions through the CLI on the in-process runner, read back with TensorFlow.

Fixtures are written by tests/layouts_labelbox.py from the generated sample images, laid out
as a Labelbox export is (see its docstring for what was looked up).
"""
from __future__ import annotations

import io
import json
import os

import layouts
import layouts_labelbox as lb
import numpy as np
import pytest
from bad_data import RUNNER, convert
from PIL import Image

from beam_tfrecord.records.model import Box, InputError
from beam_tfrecord.sources import labelbox

TRAIN = lambda im: "train"  # noqa: E731  (export v2 has no splits)


def _row(im, objects=None, **kwargs):
  """One data row of the sample image `im` as the fixture writes it (a dict)."""
  kwargs.setdefault("external_id", im.file_name)
  kwargs.setdefault("global_key", im.file_name)
  kwargs.setdefault("row_data", f"https://storage.googleapis.com/b/{im.file_name}")
  if objects is None:
    objects = [lb.box_object(im, i, b) for i, b in enumerate(im.boxes)]
  return lb.data_row(im, objects, **kwargs)


def _image(name="a.jpg", width=64, height=48, boxes=(("cat", 2, 3, 30, 20),)):
  from beam_tfrecord import sample
  return sample.SampleImage(name, width, height, "jpeg", list(boxes), "train", 1)


# ---------------------------------------------------------------------------------------------
# Pure functions


def test_parse_data_row_boxes_polygons_size_and_names():
  im = _image(boxes=[("Traffic light", 2, 3, 30.5, 20), ("dog", 10, 11, 40, 44.25)])
  doc = _row(im, [lb.box_object(im, 0, im.boxes[0]), lb.polygon_object(im, 1, im.boxes[1])],
             global_key="key.jpg", row_data="https://h/x/some%20file.jpg?sig=1")
  assert doc["projects"][lb.PROJECT_ID]["labels"][0]["annotations"]["objects"][0]["value"] == \
      "traffic_light"
  row = labelbox.parse_data_row(json.loads(json.dumps(doc)))
  assert row.id == doc["data_row"]["id"] and row.name == "a.jpg"
  assert (row.width, row.height) == (64, 48)
  assert row.candidates == (("external_id", "a.jpg"), ("global_key", "key.jpg"),
                            ("row_data file name", "some file.jpg"))
  assert [(o.label, o.box, o.segmentation) for o in row.objects] == [
      ("Traffic light", Box(2, 3, 30.5, 20), None), ("dog", Box(10, 11, 40, 44.25), None)]
  assert row.problems == ()
  masked = labelbox.parse_data_row(doc, include_masks=True)
  assert masked.objects[0].segmentation is None  # a box has no polygon
  assert json.loads(masked.objects[1].segmentation) == [[10, 11, 40, 11, 40, 44.25, 10, 44.25]]
  # the same names are tried once; an export without external_id names rows by global_key
  same = labelbox.parse_data_row(_row(im, external_id=None, global_key="a.jpg",
                                      row_data="gs://b/a.jpg"))
  assert same.candidates == (("global_key", "a.jpg"),) and same.name == "a.jpg"


def test_objects_that_cannot_be_read_and_kinds_without_a_box():
  im = _image()
  good = lb.box_object(im, 0, im.boxes[0])
  point = {"feature_id": "f1", "name": "nose", "annotation_kind": "ImagePoint",
           "point": {"x": 3.0, "y": 4.0}}
  line = {"feature_id": "f2", "name": "edge", "annotation_kind": "ImagePolyline",
          "line": [{"x": 1.0, "y": 1.0}, {"x": 5.0, "y": 5.0}]}
  mask = {"feature_id": "f3", "name": "sky", "annotation_kind": "ImageSegmentationMask",
          "mask": {"url": "https://api.labelbox.com/masks/x"}}
  bad = [{**good, "bounding_box": {"top": 1.0, "left": 1.0, "height": 2.0}},
         {**good, "bounding_box": {"top": 1.0, "left": "1", "height": 2.0, "width": 3.0}},
         {**good, "bounding_box": {"top": 1.0, "left": 1.0, "height": -2.0, "width": 3.0}},
         {**good, "name": ""},
         {**lb.polygon_object(im, 1, im.boxes[0]), "polygon": [{"x": 1.0, "y": 2.0}] * 2},
         {**lb.polygon_object(im, 1, im.boxes[0]),
          "polygon": [{"x": 1.0, "y": 2.0}, {"x": float("nan"), "y": 2.0}, {"x": 3.0}]},
         "not an object"]
  row = labelbox.parse_data_row(_row(im, [good, point, line, mask] + bad), source="e.ndjson")
  assert [o.label for o in row.objects] == ["cat"]
  assert [(i, e.reason, level) for i, e, level in row.problems] == [
      (1, "unsupported_shape", "warning"), (2, "unsupported_shape", "warning"),
      (3, "unsupported_shape", "warning"), (4, "missing_field", "object"),
      (5, "wrong_type", "object"), (6, "bad_bbox", "object"), (7, "missing_field", "object"),
      (8, "malformed_shape", "object"), (9, "wrong_type", "object"), (10, "wrong_type", "object")]
  messages = [e.message for _, e, _ in row.problems]
  assert messages[0] == ("object 1 of e.ndjson is an ImagePoint, which has no box: only "
                         "ImageBoundingBox and ImagePolygon are converted")
  assert "ImagePolyline" in messages[1] and "ImageSegmentationMask" in messages[2]
  assert "lacks width" in messages[3] and "bounding_box.left is '1'" in messages[4]


@pytest.mark.parametrize("change, reason", [
    (lambda d: d.pop("data_row"), "missing_field"),
    (lambda d: d["data_row"].update(id="", external_id=None, global_key=None), "missing_field"),
    (lambda d: d.pop("projects"), "missing_field"),
    (lambda d: d["projects"][lb.PROJECT_ID].update(labels=[]), "no_label"),
    (lambda d: d["projects"][lb.PROJECT_ID]["labels"].append(
        dict(d["projects"][lb.PROJECT_ID]["labels"][0])), "several_labels"),
    (lambda d: d["projects"].update(other={"name": "p2", "labels": [
        dict(d["projects"][lb.PROJECT_ID]["labels"][0])]}), "several_labels"),
    (lambda d: d["projects"][lb.PROJECT_ID]["labels"][0]["performance_details"].update(
        skipped=True), "skipped_label"),
    (lambda d: d["media_attributes"].update(mime_type="video/mp4"), "unsupported_media"),
    (lambda d: d["projects"][lb.PROJECT_ID]["labels"][0]["annotations"].update(
        frames={}), "unsupported_media"),
    (lambda d: d["projects"][lb.PROJECT_ID]["labels"][0]["annotations"].update(
        objects={}), "wrong_type"),
])
def test_rows_that_cost_their_image(change, reason):
  doc = _row(_image())
  change(doc)
  with pytest.raises(InputError) as e:
    labelbox.parse_data_row(doc)
  assert e.value.reason == reason


def test_several_labels_names_the_projects():
  doc = _row(_image())
  doc["projects"]["cproject2"] = {"name": "p2", "labels": [
      doc["projects"][lb.PROJECT_ID]["labels"][0]]}
  with pytest.raises(InputError, match=f"2 labels \\(in projects {lb.PROJECT_ID}, cproject2\\)"):
    labelbox.parse_data_row(doc)


def test_media_size_that_is_no_size_is_unknown():
  doc = _row(_image())
  doc["media_attributes"].update(width="64", height=-3)
  row = labelbox.parse_data_row(doc)
  assert (row.width, row.height) == (None, None)
  doc.pop("media_attributes")
  assert labelbox.parse_data_row(doc).width is None


def test_load_line_budgets(monkeypatch):
  from beam_tfrecord.sources.labelbox import ndjson as labelbox  # where the budget is read
  assert labelbox.load_line(b'{"data_row": {"id": "x"}}') == {"data_row": {"id": "x"}}
  for raw, reason in ((b'{"data_row": ', "malformed_json"), (b"[1, 2]", "malformed_json"),
                      (b"\xff\xfe{}", "malformed_json"),
                      (b'{"a": ' * 65 + b"1" + b"}" * 65, "too_deep"),
                      (b"[" * 100_000 + b"]" * 100_000, "too_deep")):
    with pytest.raises(InputError) as e:
      labelbox.load_line(raw)
    assert e.value.reason == reason, raw[:20]
  assert labelbox.load_line(b'{"a": ' * 63 + b"1" + b"}" * 63)  # 64 levels: within
  monkeypatch.setattr(labelbox, "MAX_LINE_BYTES", 10)
  with pytest.raises(InputError, match="over the 10"):
    labelbox.load_line(b'{"a": 12345}')


def test_locate_order_and_refusals(tmp_path):
  root = tmp_path / "images"
  (root / "sub").mkdir(parents=True)
  for name in ("ext.jpg", "key.jpg", "file.jpg", "sub/x.jpg"):
    (root / name).write_bytes(b"x")
  row = lambda **kw: labelbox.DataRow(  # noqa: E731
      "id1", "n", tuple(kw.get("candidates", ())), kw.get("row_data"), None, None, (), ())
  both = [("external_id", "ext.jpg"), ("global_key", "key.jpg"),
          ("row_data file name", "file.jpg")]
  assert labelbox.locate(row(candidates=both), str(root)) == ("ext.jpg", str(root / "ext.jpg"))
  assert labelbox.locate(row(candidates=[("external_id", "gone.jpg")] + both[1:]),
                         str(root)) == ("key.jpg", str(root / "key.jpg"))
  assert labelbox.locate(row(candidates=[("external_id", "gone.jpg"),
                                         ("row_data file name", "file.jpg")]),
                         str(root))[0] == "file.jpg"
  assert labelbox.locate(row(candidates=[("external_id", "sub/x.jpg")]), str(root))[0] == \
      "sub/x.jpg"
  # a name leaving the root is never looked up, and said so
  outside = tmp_path / "secret.jpg"
  outside.write_bytes(b"x")
  with pytest.raises(InputError) as e:
    labelbox.locate(row(candidates=[("external_id", "../secret.jpg"),
                                    ("global_key", str(outside))]), str(root))
  assert e.value.reason == "missing_image"
  assert "external_id '../secret.jpg' (path_traversal)" in e.value.message
  assert "(absolute_path)" in e.value.message and "--images" in e.value.message
  missing = [("external_id", "gone.jpg")]
  with pytest.raises(InputError) as e:
    labelbox.locate(row(candidates=missing, row_data="https://h/gone.jpg"), str(root))
  assert e.value.reason == "unreachable_url"
  assert e.value.message == (f"row_data https://h/gone.jpg is a URL this tool does not fetch, "
                             f"and none of external_id 'gone.jpg' is under {root}: download "
                             "the images and give their folder as --images")
  for data in ("gs://bucket/gone.jpg", str(outside)):
    with pytest.raises(InputError) as e:
      labelbox.locate(row(candidates=missing, row_data=data), str(root))
    assert e.value.reason == "absolute_path" and "--allow-absolute-paths" in e.value.message
    assert labelbox.locate(row(candidates=missing, row_data=data), str(root), True) == \
        (data, data)
  with pytest.raises(InputError) as e:
    labelbox.locate(row(row_data="relative/gone.jpg"), str(root))
  assert e.value.reason == "missing_image"


def test_row_data_names():
  assert labelbox.row_data_name("https://s.io/a/b%20c.jpg?X-Goog-Signature=ab/cd") == "b c.jpg"
  assert labelbox.row_data_name("gs://bucket/dir/d.png") == "d.png"
  assert labelbox.row_data_name("/data/x/e.jpg") == "e.jpg"
  assert labelbox.row_data_name("C:\\Users\\me\\f.jpg") == "f.jpg"
  assert labelbox.row_data_name("https://s.io/") is None and labelbox.row_data_name(None) is None


def test_read_range_every_line_once_wherever_the_file_is_cut(monkeypatch):
  lines = [b'{"n": %d, "pad": "%s"}' % (i, b"x" * (i * 7 % 23)) for i in range(40)]
  data = b"\xef\xbb\xbf" + b"\n".join(lines[:20]) + b"\r\n" + b"\n".join(lines[20:])
  for step in (1, 5, 17, 64, 1000, len(data)):
    got = []
    for start in range(0, len(data), step):
      got += [line for _, line in labelbox.read_range(io.BytesIO(data), start,
                                                      min(len(data), start + step))]
    assert got == lines, step
  # a line over the limit is one error, read past, and the next line is read
  long = b"\n".join([lines[0], b"y" * 50, lines[1]]) + b"\n"
  got = list(labelbox.read_range(io.BytesIO(long), 0, len(long), limit=30))
  assert got[0] == (1, lines[0]) and got[2] == (3, lines[1])
  assert got[1][0] == 2 and got[1][1].reason == "too_large"


def test_detect_and_check_on_heads(tmp_path, small_dataset):
  from beam_tfrecord.errors import UsageError
  ds = small_dataset
  export = lb.write_labelbox(ds.images, ds.image_dir, tmp_path / "lb")
  assert labelbox.detect(str(export)) == "Labelbox export v2 NDJSON"
  assert labelbox.detect(str(tmp_path / "lb")) == "Labelbox export v2 export-result.ndjson"
  assert labelbox.export_file(str(tmp_path / "lb")) == str(export)  # what a folder input reads
  labelbox.check_input(str(export))
  rows = [json.loads(line) for line in export.read_text().splitlines()]
  cases = {
      "array.json": (json.dumps(rows), "a JSON array of data rows"),
      "v1.json": (json.dumps([{"ID": "x", "Labeled Data": "https://h/a.jpg", "Label": {}}]),
                  "legacy export v1"),
      "coco.json": (ds.coco_file("train").read_text(), "use --format coco"),
      "other.ndjson": ('{"dataRow": {"id": "x"}, "uuid": "u"}\n', "not a Labelbox export v2"),
      "text.ndjson": ("hello\n", "it is not JSON"),
  }
  for name, (text, message) in cases.items():
    (tmp_path / name).write_text(text)
    assert labelbox.detect(str(tmp_path / name)) is None, name
    with pytest.raises(UsageError, match=message):
      labelbox.check_input(str(tmp_path / name))
  # a first data row without `projects` (a data-row-only Catalog export) is not detected
  (tmp_path / "noprojects.ndjson").write_text(json.dumps(rows[0]["data_row"] and
                                                         {"data_row": rows[0]["data_row"]}))
  assert labelbox.detect(str(tmp_path / "noprojects.ndjson")) is None
  (tmp_path / "lb" / "second.ndjson").write_text(export.read_text())
  assert labelbox.detect(str(tmp_path / "lb")) is None  # two exports: which one?
  with pytest.raises(UsageError, match="holding 2 .ndjson files"):
    labelbox.export_file(str(tmp_path / "lb"))


def test_other_formats_fixtures_are_not_labelbox(tmp_path, small_dataset):
  ds = small_dataset
  images, image_dir = ds.images, ds.image_dir
  paths = [ds.coco_file("train"), ds.csv_file("val"), ds.voc_dir, ds.root,
           layouts.write_ultralytics(images, image_dir, tmp_path / "ultralytics"),
           layouts.write_darknet(images, image_dir, tmp_path / "darknet"),
           layouts.write_raccoon(images, image_dir, tmp_path / "raccoon"),
           layouts.write_class_folders(images, image_dir, tmp_path / "folders")]
  for kind in ("coco", "csv", "voc", "yolo"):
    root = layouts.write_roboflow(images, image_dir, tmp_path / f"roboflow-{kind}", kind)
    paths += [root, root / "train"] + sorted((root / "train").iterdir())
  for path in paths:
    assert labelbox.detect(str(path)) is None, path


# ---------------------------------------------------------------------------------------------
# Pipelines


@pytest.mark.e2e
def test_export_detected_and_converted(dataset, tmp_path, capsys):
  """The export file, --format auto, --images: every image back (found by external_id) with
  its bytes, size, boxes and polygons' boxes, in 'train'; ids from sorted names; the data row
  id as source_id; no error."""
  export = lb.write_labelbox(dataset.images, dataset.image_dir, tmp_path / "lb",
                             polygon_every=2)
  run = convert(["--input", str(export), "--images", str(tmp_path / "lb" / "images"),
                 "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert "detected: labelbox (Labelbox export v2 NDJSON)" in run.stdout
  assert run.manifest["format"] == "labelbox" and run.manifest["schema"] == "od_api"
  ids = dataset.sorted_name_ids()
  assert run.manifest["label_map"] == ids
  assert layouts.split_counts(run) == {"train": len(dataset.images)}
  layouts.check_od_examples(run, dataset.images, dataset.image_dir, ids, TRAIN)
  rows = {json.loads(line)["data_row"]["external_id"]: json.loads(line)["data_row"]["id"]
          for line in export.read_text(encoding="utf-8").splitlines()}
  assert {e["filename"]: e["image/source_id"].decode() for e in run.examples} == rows
  assert run.errors == []


@pytest.mark.e2e
def test_lookup_by_global_key_row_data_and_split_inputs(small_dataset, tmp_path, capsys):
  """Two SPLIT= exports: one names images by global_key (no external_id), the other only by
  row_data (a gs:// path: its file name under --images comes first). The same export with
  local row_data and no images under --images reads row_data, with --allow-absolute-paths."""
  ds = small_dataset
  train = [im for im in ds.images if im.split == "train"]
  val = [im for im in ds.images if im.split == "val"]
  a = lb.write_labelbox(train, ds.image_dir, tmp_path / "a", key="global_key")
  b = lb.write_labelbox(val, ds.image_dir, tmp_path / "b", key="row_data", row_data="gs")
  run = convert(["--format", "labelbox", "--input", f"train={a}", "--input", f"val={b}",
                 "--images", f"train={tmp_path / 'a' / 'images'}",
                 "--images", f"val={tmp_path / 'b' / 'images'}",
                 "--output", str(tmp_path / "out"), RUNNER], capsys)
  assert run.code == 0, run.stderr
  ids = ds.sorted_name_ids()
  layouts.check_od_examples(run, ds.images, ds.image_dir, ids)
  assert run.errors == []
  local = lb.write_labelbox(ds.images, ds.image_dir, tmp_path / "c", key="row_data",
                            row_data="local", copy_images=False)
  refused = convert(["--format", "labelbox", "--input", str(local), "--output",
                     str(tmp_path / "refused"), RUNNER], capsys)
  assert refused.code == 4  # every image refused: nothing written
  assert {(e["reason"], e["level"]) for e in refused.errors} == {("absolute_path", "image")}
  assert len(refused.errors) == len(ds.images)
  run = convert(["--format", "labelbox", "--input", str(local), "--allow-absolute-paths",
                 "--output", str(tmp_path / "abs"), RUNNER], capsys)
  assert run.code == 0, run.stderr
  layouts.check_od_examples(run, ds.images, ds.image_dir, ids, TRAIN)
  assert {e["filename"] for e in run.examples} == {
      str((ds.image_dir / im.file_name).resolve()) for im in ds.images}


@pytest.mark.e2e
def test_bad_rows_become_error_records(small_dataset, tmp_path, capsys):
  """Lines that are no data row, rows that cost their image, objects that cannot be read and
  kinds without a box: each one record, at its level, with FILE:LINE; the rest converted."""
  ds = small_dataset
  export = lb.write_labelbox(ds.images, ds.image_dir, tmp_path / "lb")
  lines = export.read_text(encoding="utf-8").splitlines()
  boxed = [im for im in ds.images if im.boxes]
  first, second, third = boxed[:3]
  doc = json.loads(lines[ds.images.index(first)])
  objects = doc["projects"][lb.PROJECT_ID]["labels"][0]["annotations"]["objects"]
  objects += [{"feature_id": "p", "name": "nose", "annotation_kind": "ImagePoint",
               "point": {"x": 3.0, "y": 4.0}},
              {**objects[0], "bounding_box": {"top": 1.0, "left": 1.0}}]
  lines[ds.images.index(first)] = json.dumps(doc)
  doc = json.loads(lines[ds.images.index(second)])
  doc["projects"]["cother"] = {"name": "p2", "labels": doc["projects"][lb.PROJECT_ID]["labels"]}
  lines[ds.images.index(second)] = json.dumps(doc)
  doc = json.loads(lines[ds.images.index(third)])
  doc["data_row"]["row_data"] = f"https://storage.googleapis.com/b/{third.file_name}"
  (tmp_path / "lb" / "images" / third.file_name).unlink()  # not downloaded
  lines[ds.images.index(third)] = json.dumps(doc)
  lines += ['{"data_row": {"id": "cbroken"', "", "[1, 2]"]
  export.write_text("\n".join(lines) + "\n", encoding="utf-8")
  images = str(tmp_path / "lb" / "images")
  run = convert(["--format", "labelbox", "--input", str(export), "--images", images,
                 "--output", str(tmp_path / "out"), RUNNER], capsys)
  assert run.code == 0, run.stderr
  line = lambda im: f"{export}:{ds.images.index(im) + 1}"  # noqa: E731
  n = len(ds.images)
  assert sorted((e["reason"], e["level"], e["source"], e["key"]) for e in run.errors) == sorted([
      ("unsupported_shape", "warning", line(first), first.file_name),
      ("missing_field", "object", line(first), first.file_name),
      ("several_labels", "image", line(second), second.file_name),
      ("unreachable_url", "image", line(third), third.file_name),
      ("malformed_json", "image", f"{export}:{n + 1}", str(export)),
      ("malformed_json", "image", f"{export}:{n + 3}", str(export))])
  [shape] = run.errors_where(reason="unsupported_shape")
  assert shape["message"] == (f"object {len(first.boxes)} of {export} is an ImagePoint, which "
                              "has no box: only ImageBoundingBox and ImagePolygon are converted")
  assert "--images" in run.errors_where(reason="unreachable_url")[0]["message"]
  kept = [im for im in ds.images if im not in (second, third)]
  layouts.check_od_examples(run, kept, ds.image_dir, ds.sorted_name_ids(), TRAIN)


@pytest.mark.e2e
def test_big_export_read_in_ranges(small_dataset, tmp_path):
  """A file cut in ranges of 700 bytes (each line ~2 kB, so ranges without a line start too):
  every row read once, and error line numbers are the file's."""
  import apache_beam as beam
  from apache_beam.testing.test_pipeline import TestPipeline
  from apache_beam.testing.util import assert_that, equal_to
  ds = small_dataset
  export = lb.write_labelbox(ds.images, ds.image_dir, tmp_path / "lb")
  lines = export.read_text(encoding="utf-8").splitlines()
  lines[3] = "not json"
  export.write_text("\n".join(lines + [lines[0]]) + "\n", encoding="utf-8")
  expected = [(im.file_name, len(im.boxes)) for i, im in enumerate(ds.images) if i != 3]
  with TestPipeline(runner="FnApiRunner", argv=[]) as p:
    out = p | labelbox.ReadLabelbox([(None, str(export), str(tmp_path / "lb" / "images"))],
                                    split_bytes=700)
    assert_that(out.images | beam.Map(lambda a: (a.key, len(a.objects))),
                equal_to(expected + [expected[0]]), label="Images")
    assert_that(out.errors | beam.Map(lambda e: (e.reason, e.source)),
                equal_to([("malformed_json", f"{export}:4")]), label="Errors")


@pytest.mark.e2e
def test_polygons_become_masks(small_dataset, tmp_path):
  """--include-masks: each ImagePolygon rasterized at the image size; pixels inside the
  polygon are 1 and outside 0."""
  ds = small_dataset
  export = lb.write_labelbox(ds.images, ds.image_dir, tmp_path / "lb", polygon_every=1)
  boxed = next(im for im in ds.images if len(im.boxes) >= 1)
  doc = json.loads(export.read_text().splitlines()[ds.images.index(boxed)])
  triangle = [(10.0, 10.0), (boxed.width - 10.0, 10.0), (10.0, boxed.height - 10.0)]
  doc["projects"][lb.PROJECT_ID]["labels"][0]["annotations"]["objects"][0]["polygon"] = [
      {"x": x, "y": y} for x, y in triangle]
  lines = export.read_text().splitlines()
  lines[ds.images.index(boxed)] = json.dumps(doc)
  export.write_text("\n".join(lines) + "\n")
  run = convert(["--format", "labelbox", "--input", str(export), "--images",
                 str(tmp_path / "lb" / "images"), "--include-masks", "--output",
                 str(tmp_path / "out"), RUNNER])
  assert run.code == 0 and run.errors == []
  assert "image/object/mask" in run.manifest["features"]
  for im in ds.images:
    example = run.by_filename()[im.file_name]
    decoded = [np.asarray(Image.open(io.BytesIO(png))) for png in example["image/object/mask"]]
    assert len(decoded) == len(im.boxes)
    for i, (mask, box) in enumerate(zip(decoded, im.boxes)):
      assert mask.shape == (im.height, im.width) and set(np.unique(mask)) <= {0, 1}
      if im is boxed and i == 0:  # the triangle: in along its two legs, out past its hypotenuse
        w, h = im.width, im.height
        assert mask[12, 12] == mask[12, w * 3 // 4] == mask[h * 3 // 4, 12] == 1
        assert mask[h * 3 // 4, w * 3 // 4] == mask[5, 5] == mask[h - 5, w // 2] == 0
        assert mask.sum() == pytest.approx((w - 20) * (h - 20) / 2, rel=0.05)
        continue
      _, x0, y0, x1, y1 = box
      cx, cy = int((x0 + x1) / 2), int((y0 + y1) / 2)
      assert mask[cy, cx] == 1, (im.file_name, box)
      outside = np.ones_like(mask, dtype=bool)
      outside[max(0, int(y0) - 1):int(y1) + 2, max(0, int(x0) - 1):int(x1) + 2] = False
      assert not mask[outside].any(), (im.file_name, box)
  boxed_ex = run.by_filename()[boxed.file_name]
  assert abs(boxed_ex["image/object/bbox/xmax"][0] - (boxed.width - 10) / boxed.width) < 1e-6


@pytest.mark.e2e
def test_media_size_differing_from_the_header_is_a_warning(small_dataset, tmp_path):
  ds = small_dataset
  export = lb.write_labelbox(ds.images, ds.image_dir, tmp_path / "lb")
  lines = export.read_text().splitlines()
  im = ds.images[0]
  doc = json.loads(lines[0])
  doc["media_attributes"]["width"] = im.width * 2
  lines[0] = json.dumps(doc)
  export.write_text("\n".join(lines) + "\n")
  run = convert(["--format", "labelbox", "--input", str(export), "--images",
                 str(tmp_path / "lb" / "images"), "--output", str(tmp_path / "out"), RUNNER])
  assert run.code == 0
  [warning] = run.errors
  assert (warning["reason"], warning["level"], warning["key"]) == (
      "size_mismatch", "warning", im.file_name)
  assert f"annotation says {im.width * 2}x{im.height}" in warning["message"]
  layouts.check_od_examples(run, ds.images, ds.image_dir, ds.sorted_name_ids(), TRAIN)


def test_bad_command_lines_are_one_line_and_exit_2(small_dataset, tmp_path, capsys):
  ds = small_dataset
  export = lb.write_labelbox(ds.images, ds.image_dir, tmp_path / "lb")
  (tmp_path / "two").mkdir()
  for name in ("a.ndjson", "b.ndjson"):
    (tmp_path / "two" / name).write_text(export.read_text())
  (tmp_path / "array.json").write_text(json.dumps(
      [json.loads(line) for line in export.read_text().splitlines()]))
  cases = [
      (["--input", str(tmp_path / "missing.ndjson")], "no such file"),
      (["--input", str(tmp_path / "two")], "holding 2 .ndjson files"),
      (["--input", str(tmp_path / "array.json")], "write one data row per line"),
      (["--input", str(ds.coco_file("train"))], "use --format coco"),
      (["--input", str(export), "--images", str(tmp_path / "nowhere")], "no such directory"),
      (["--input", str(export), "--classes-file", str(export)], "--format yolo-keras only"),
  ]
  for args, message in cases:
    out = tmp_path / f"out{len(os.listdir(tmp_path))}"
    run = convert(["--format", "labelbox", *args, "--output", str(out), RUNNER], capsys)
    assert run.code == 2, args
    assert message in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not out.exists()
