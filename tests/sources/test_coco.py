"""sources/coco.py: the parse functions on COCO entries (no pipeline), ReadCoco's two joins
(one worker and one pass, the in-process runner's _JoinFile, and the distributed one, a task per
section and CoGroupByKey) giving the same records on real pipelines, and category id 0."""
from __future__ import annotations

import dataclasses
import io
import json
import os

import apache_beam as beam
import layouts
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from bad_data import Coco, convert, jpeg
from conftest import transform_labels

from beam_tfrecord.records import batches
from beam_tfrecord.errors import EXIT_USAGE, UsageError
from beam_tfrecord.records.model import Box, ImageAnnotation, InputError
from beam_tfrecord.sources import coco
from beam_tfrecord.sources.coco import ReadCoco

# The 80 COCO 2017 categories with their real ids: 1..90 with ten gaps.
COCO_CATEGORIES = [
    (1, "person"), (2, "bicycle"), (3, "car"), (4, "motorcycle"), (5, "airplane"), (6, "bus"),
    (7, "train"), (8, "truck"), (9, "boat"), (10, "traffic light"), (11, "fire hydrant"),
    (13, "stop sign"), (14, "parking meter"), (15, "bench"), (16, "bird"), (17, "cat"),
    (18, "dog"), (19, "horse"), (20, "sheep"), (21, "cow"), (22, "elephant"), (23, "bear"),
    (24, "zebra"), (25, "giraffe"), (27, "backpack"), (28, "umbrella"), (31, "handbag"),
    (32, "tie"), (33, "suitcase"), (34, "frisbee"), (35, "skis"), (36, "snowboard"),
    (37, "sports ball"), (38, "kite"), (39, "baseball bat"), (40, "baseball glove"),
    (41, "skateboard"), (42, "surfboard"), (43, "tennis racket"), (44, "bottle"),
    (46, "wine glass"), (47, "cup"), (48, "fork"), (49, "knife"), (50, "spoon"), (51, "bowl"),
    (52, "banana"), (53, "apple"), (54, "sandwich"), (55, "orange"), (56, "broccoli"),
    (57, "carrot"), (58, "hot dog"), (59, "pizza"), (60, "donut"), (61, "cake"), (62, "chair"),
    (63, "couch"), (64, "potted plant"), (65, "bed"), (67, "dining table"), (70, "toilet"),
    (72, "tv"), (73, "laptop"), (74, "mouse"), (75, "remote"), (76, "keyboard"),
    (77, "cell phone"), (78, "microwave"), (79, "oven"), (80, "toaster"), (81, "sink"),
    (82, "refrigerator"), (84, "book"), (85, "clock"), (86, "vase"), (87, "scissors"),
    (88, "teddy bear"), (89, "hair drier"), (90, "toothbrush"),
]


def _reason(excinfo) -> str:
  return excinfo.value.reason


# =============================================================================================
# COCO
# =============================================================================================

def _coco_doc():
  """A COCO document with sections in an unusual order and an image without annotations."""
  return {
      "annotations": [
          {"id": 1, "image_id": 42, "category_id": 90, "bbox": [10, 20, 30, 40], "area": 1200.5,
           "iscrowd": 0, "segmentation": [[10, 20, 40, 20, 40, 60]]},
          {"id": 2, "image_id": 42, "category_id": 1, "bbox": [0.5, 1.25, 99.5, 50.0],
           "area": 4975.0, "iscrowd": 1, "segmentation": {"counts": [1, 2], "size": [80, 100]}},
          {"id": 3, "image_id": 7, "category_id": 88, "bbox": [1, 2, 3, 4], "area": 12,
           "iscrowd": 0},
      ],
      "info": {"description": "has a nested key called images", "images": ["not", "these"]},
      "categories": [{"id": i, "name": n, "supercategory": "x"} for i, n in COCO_CATEGORIES],
      "images": [
          {"id": 42, "file_name": "a/b/000042.jpg", "width": 100, "height": 80,
           "license": 3, "coco_url": "http://example.invalid/x.jpg"},
          {"id": 7, "file_name": "000007.png", "width": 640.0, "height": 480},
          {"id": 99, "file_name": "no_objects.jpg"},
      ],
      "licenses": [],
  }


def _stream(doc, section):
  return list(coco.stream_section(io.BytesIO(json.dumps(doc).encode("utf-8")), section))


def test_coco_stream_section_reads_each_top_level_array():
  doc = _coco_doc()
  assert _stream(doc, "images") == doc["images"]
  assert [a["id"] for a in _stream(doc, "annotations")] == [1, 2, 3]
  cats = _stream(doc, "categories")
  assert [(c["id"], c["name"]) for c in cats] == COCO_CATEGORIES
  # the nested info.images is not the top-level section
  assert all(isinstance(i, dict) for i in _stream(doc, "images"))
  assert _stream(doc, "nonexistent") == []


def test_coco_stream_section_numbers_are_python_numbers():
  doc = _coco_doc()
  bbox = _stream(doc, "annotations")[1]["bbox"]
  assert bbox == [0.5, 1.25, 99.5, 50.0]
  assert all(isinstance(v, float) for v in bbox)  # use_float: no Decimal
  assert isinstance(_stream(doc, "images")[0]["width"], int)


def test_coco_stream_section_from_a_file(tmp_path):
  path = tmp_path / "instances.json"
  path.write_text(json.dumps(_coco_doc(), ensure_ascii=False), encoding="utf-8")
  with open(path, "rb") as f:
    ids = [coco.parse_category(c)[0] for c in coco.stream_section(f, "categories")]
  assert ids == [i for i, _ in COCO_CATEGORIES]


def test_coco_categories_keep_noncontiguous_ids():
  parsed = [coco.parse_category(c) for c in _stream(_coco_doc(), "categories")]
  assert parsed == COCO_CATEGORIES
  ids = [i for i, _ in parsed]
  assert len(ids) == 80 and min(ids) == 1 and max(ids) == 90
  assert sorted(set(range(1, 91)) - set(ids)) == [12, 26, 29, 30, 45, 66, 68, 69, 71, 83]


def test_coco_parse_image():
  images = [coco.parse_image(r) for r in _stream(_coco_doc(), "images")]
  assert images == [(42, "a/b/000042.jpg", 100, 80), (7, "000007.png", 640, 480),
                    (99, "no_objects.jpg", None, None)]
  assert all(isinstance(v, int) for v in images[1][2:])


@pytest.mark.parametrize("record,reason", [
    ({"file_name": "a.jpg"}, "missing_field"),
    ({"id": 1}, "missing_field"),
    ({"id": "1", "file_name": "a.jpg"}, "wrong_type"),
    ({"id": True, "file_name": "a.jpg"}, "wrong_type"),
    ({"id": 1.5, "file_name": "a.jpg"}, "wrong_type"),
    ({"id": 1, "file_name": 5}, "wrong_type"),
    ({"id": 1, "file_name": "a.jpg", "width": "640"}, "wrong_type"),
    ({"id": 1, "file_name": "a.jpg", "height": 480.5}, "wrong_type"),
    (["not", "an", "object"], "wrong_type"),
])
def test_coco_parse_image_errors(record, reason):
  with pytest.raises(InputError) as e:
    coco.parse_image(record)
  assert e.value.reason == reason and e.value.stage == "parse"


def test_coco_parse_annotation_bbox_is_xywh():
  anns = [coco.parse_annotation(r) for r in _stream(_coco_doc(), "annotations")]
  image_id, category_id, box, crowd, area = anns[0]
  assert (image_id, category_id, crowd, area) == (42, 90, False, 1200.5)
  assert box == Box(xmin=10.0, ymin=20.0, xmax=40.0, ymax=60.0)  # xmax = x + w, ymax = y + h
  image_id, category_id, box, crowd, area = anns[1]
  assert (image_id, category_id, crowd, area) == (42, 1, True, 4975.0)
  assert box == Box(0.5, 1.25, 100.0, 51.25)
  assert anns[2][:2] == (7, 88) and anns[2][4] == 12.0


def test_coco_parse_annotation_optional_fields():
  image_id, category_id, box, crowd, area = coco.parse_annotation(
      {"image_id": 3, "category_id": 18, "bbox": [1, 2, 3, 4]})
  assert (image_id, category_id, box, crowd, area) == (3, 18, Box(1, 2, 4, 6), False, None)
  assert coco.parse_annotation({"image_id": 3, "category_id": 18, "bbox": [1, 2, 3, 4],
                                "iscrowd": True})[3] is True


@pytest.mark.parametrize("record,reason", [
    ({"category_id": 1, "bbox": [0, 0, 1, 1]}, "missing_field"),
    ({"image_id": 1, "bbox": [0, 0, 1, 1]}, "missing_field"),
    ({"image_id": 1, "category_id": 1}, "missing_field"),
    ({"image_id": 1, "category_id": 1, "bbox": [0, 0, 1]}, "wrong_type"),
    ({"image_id": 1, "category_id": 1, "bbox": "0,0,1,1"}, "wrong_type"),
    ({"image_id": 1, "category_id": 1, "bbox": [0, 0, "1", 1]}, "wrong_type"),
    ({"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, True]}, "wrong_type"),
    ({"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "iscrowd": 2}, "wrong_type"),
    ({"image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "area": "big"}, "wrong_type"),
    ({"image_id": 1, "category_id": "cat", "bbox": [0, 0, 1, 1]}, "wrong_type"),
])
def test_coco_parse_annotation_errors(record, reason):
  with pytest.raises(InputError) as e:
    coco.parse_annotation(record)
  assert e.value.reason == reason


@pytest.mark.parametrize("record,reason", [
    ({"name": "cat"}, "missing_field"),
    ({"id": 1}, "missing_field"),
    ({"id": 1, "name": ""}, "wrong_type"),
    ({"id": 1, "name": 3}, "wrong_type"),
    ({"id": "one", "name": "cat"}, "wrong_type"),
])
def test_coco_parse_category_errors(record, reason):
  with pytest.raises(InputError) as e:
    coco.parse_category(record)
  assert e.value.reason == reason


def _join(tmp_path, image_id, images, objects, categories):
  """Objects as parse_annotation gives them, shipped as ReadCoco does: one chunk, plain boxes,
  no annotation id or segmentation (annotation_extras)."""
  uri = str(tmp_path / "instances.json")
  chunk = tuple((i, c, dataclasses.astuple(box), crowd, area, None, None)
                for i, c, box, crowd, area in objects)
  out = list(coco.join_image(((uri, image_id), {"image": images, "objects": [chunk]}),
                             {(uri, k): v for k, v in categories.items()}, False))
  anns = batches.annotations([o for o in out if type(o) is tuple])  # a batch's tuples
  errors = [o.value for o in out if type(o) is not tuple]
  return uri, anns, errors


def test_coco_join_image_without_annotations_keeps_the_image(tmp_path):
  uri, anns, errors = _join(tmp_path, 99, [("val", str(tmp_path), "no_objects.jpg", None, None)],
                            [], dict((i, n) for i, n in COCO_CATEGORIES))
  assert errors == []
  assert anns == [ImageAnnotation(key="no_objects.jpg", uri=str(tmp_path / "no_objects.jpg"),
                                  source_id="99", source=uri, objects=(), split="val")]


def test_coco_join_image_maps_category_ids_to_names(tmp_path):
  doc = _coco_doc()
  parsed = [coco.parse_annotation(a) for a in doc["annotations"] if a["image_id"] == 42]
  uri, anns, errors = _join(tmp_path, 42, [(None, str(tmp_path), "a/b/000042.jpg", 100, 80)],
                            [(i, *p[1:]) for i, p in enumerate(parsed)], dict(COCO_CATEGORIES))
  assert errors == []
  [ann] = anns
  assert (ann.key, ann.source_id, ann.width, ann.height, ann.split) == \
      ("a/b/000042.jpg", "42", 100, 80, None)
  expected = {("toothbrush", Box(10, 20, 40, 60), False, 1200.5),
              ("person", Box(0.5, 1.25, 100.0, 51.25), True, 4975.0)}
  # objects keep the order of the annotation file
  assert [(o.label, o.box, o.is_crowd, o.area) for o in ann.objects] == [
      e for p in parsed for e in expected if e[1] == p[2]]


def test_coco_join_image_reports_unknown_category_and_unknown_image(tmp_path):
  objects = [(0, 12, Box(0, 0, 1, 1), False, None), (1, 1, Box(0, 0, 2, 2), False, None)]
  uri, anns, errors = _join(tmp_path, 5, [(None, str(tmp_path), "x.jpg", 4, 4)], objects,
                            dict(COCO_CATEGORIES))
  assert [o.label for o in anns[0].objects] == ["person"]
  assert [e.reason for e in errors] == ["unknown_category_id"]
  uri, anns, errors = _join(tmp_path, 6, [], objects, dict(COCO_CATEGORIES))
  # one record per annotation that lost its image
  assert anns == [] and [e.reason for e in errors] == ["unknown_image_id"] * 2


def test_coco_join_image_rejects_path_escaping_the_root(tmp_path):
  uri, anns, errors = _join(tmp_path, 1, [(None, str(tmp_path), "../secret.jpg", 4, 4)], [], {})
  assert anns == [] and [e.reason for e in errors] == ["path_traversal"]


@pytest.mark.parametrize("record", [
    {"image_id": 3, "category_id": 18, "bbox": [1, 2.5, 3, 4]},
    {"image_id": 3, "category_id": 18, "bbox": [1, 2, 3, 4], "iscrowd": True, "area": 7},
    {"image_id": 3, "category_id": 18, "bbox": [1, 2, 3, 4], "iscrowd": 1.0, "area": 7.5},
    {"image_id": 3.0, "category_id": 18, "bbox": [1, 2, 3, 4]},     # integral float id
    {"image_id": 3, "category_id": 18, "bbox": (1, 2, 3, 4)},       # not a list: checked path
    {"image_id": 3, "category_id": 18, "bbox": [1, 2, 3, float("nan")]},
])
def test_coco_annotation_fast_path_equals_the_checked_one(record):
  """annotation_fields checks the usual entry by exact types and sends the rest through
  _checked_annotation: both must give the same fields for every entry the checks accept."""
  assert repr(coco.annotation_fields(record)) == repr(coco._checked_annotation(record))
  assert [type(v) for v in coco.annotation_fields(record)[2]] == [float] * 4


@pytest.mark.parametrize("record", [
    {"id": 1, "file_name": "a.jpg"}, {"id": 1, "file_name": "a.jpg", "width": 3, "height": 4},
    {"id": 1.0, "file_name": "a.jpg", "width": 3.0}, {"id": 1, "file_name": "a.jpg",
                                                      "width": None}])
def test_coco_image_fast_path_equals_the_checked_one(record):
  assert repr(coco.parse_image(record)) == repr(coco._checked_image(record))


# =============================================================================================
# ReadCoco's two joins give the same records
# =============================================================================================


def _write(root, name: str, doc) -> str:
  path = os.path.join(root, name)
  with open(path, "w", encoding="utf-8") as f:
    f.write(doc if isinstance(doc, str) else json.dumps(doc))
  return path


def _files(root) -> dict:
  images = os.path.join(root, "images")
  os.makedirs(images)
  for i in range(4):
    with open(os.path.join(images, f"{i}.jpg"), "wb") as f:
      f.write(jpeg())
  good = {
      "images": [{"id": i, "file_name": f"{i}.jpg", "width": 64, "height": 48} for i in range(4)]
      + [{"id": 2, "file_name": "2.jpg"}, {"id": 9, "file_name": "../escape.jpg"},
         {"id": "x", "file_name": "bad id"}],
      "annotations": [
          {"id": 10, "image_id": 0, "category_id": 1, "bbox": [1, 2, 30, 20], "area": 600.0},
          {"id": 11, "image_id": 0, "category_id": 2, "bbox": [5, 5, 10, 10], "iscrowd": 1},
          {"image_id": 1, "category_id": 1, "bbox": [0.5, 0.25, 10.75, 3]},
          {"id": 12, "image_id": 1, "category_id": 2, "bbox": [1, 1, 2, 2]},
          {"id": 13, "image_id": 3, "category_id": 7, "bbox": [1, 1, 2, 2]},
          {"id": 14, "image_id": 42, "category_id": 1, "bbox": [1, 1, 2, 2]},
          {"id": 15, "image_id": 3, "category_id": 1, "bbox": "oops"},
      ],
      "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"},
                     {"id": 2, "name": "canine"}, {"id": 0, "name": "dataset"}],
  }
  text = json.dumps(good)
  return {
      "good": _write(root, "good.json", good),
      "truncated": _write(root, "truncated.json", text[:text.index('"categories"') + 40]),
      "images_not_array": _write(root, "images_object.json",
                                 dict(good, images={"id": 0, "file_name": "0.jpg"})),
      "no_categories": _write(root, "no_categories.json",
                              {k: v for k, v in good.items() if k != "categories"}),
      "not_an_object": _write(root, "list.json", "[1, 2, 3]"),
      "nan": _write(root, "nan.json", text.replace('"area": 600.0', '"area": NaN')),
      # beyond ijson's 64-bit integers: read by the json.load fallback, and not packable
      "big_id": _write(root, "big_id.json", text.replace('"id": 12,', f'"id": {2 ** 70},')),
      "big_id_images_object": _write(root, "big_id_images_object.json", json.dumps(dict(
          good, images={"id": 0}, annotations=good["annotations"] + [
              {"id": 2 ** 70, "image_id": 1, "category_id": 2, "bbox": [1, 1, 2, 2]}]))),
      # json would read these where streaming does not, or differently: streamed
      "images_twice": _write(root, "twice.json", text[:-1] + ', "images": [{"id": 7, '
                             '"file_name": "3.jpg"}]}'),
      "nan_no_categories": _write(root, "nan_no_categories.json", json.dumps(
          {k: v for k, v in good.items() if k != "categories"}).replace('"area": 600.0',
                                                                       '"area": NaN')),
      # too deep where nothing is read (ignored), and one over-deep annotation (rejected alone)
      "deep": _write(root, "deep.json", text[:-1] + ', "info": ' + "[" * 40 + "]" * 40 + "}"),
      "deep_entry": _write(root, "deep_entry.json", text.replace(
          '"area": 600.0', '"area": 600.0, "attributes": ' + "[" * 40 + "]" * 40, 1)),
      "big_exponent": _write(root, "big_exponent.json", text.replace('"area": 600.0',
                                                                     '"area": 1e400')),
      "trailing": _write(root, "trailing.json", text + " {}"),
      "bom": _write(root, "bom.json", "\ufeff" + text),
      "odd_strings": _write(root, "odd_strings.json", text.replace(
          '"bad id"', '"[{bad id\\" ]"').replace('"2.jpg"', '"2\\u002ejpg"')),
      "images": images,
  }


WHOLE = ["good", "no_categories", "images_not_array"]
STREAMED = ["truncated", "not_an_object", "nan", "big_id", "big_id_images_object", "images_twice", "nan_no_categories", "deep",
            "deep_entry", "big_exponent", "trailing", "bom", "odd_strings"]
# Every file the joins are compared on, with include_masks: one ReadCoco branch each.
CASES = [(name, False) for name in WHOLE + STREAMED] + [("seg", True)]
STREAMED_AGAIN = ("truncated", "nan")  # where only ijson can tell: streamed again


def _coco_files(root: str) -> dict:
  """_files, and `seg`: the good file with a polygon segmentation."""
  files = _files(root)
  with open(files["good"], encoding="utf-8") as f:
    doc = json.load(f)
  doc["annotations"][0]["segmentation"] = [[1, 2, 30, 2, 30, 20]]
  files["seg"] = _write(root, "seg.json", doc)
  return files


def _read_all(files, out_root: str, join_in_worker: bool) -> None:
  """One pipeline with one independent ReadCoco branch per case file. Each branch's images,
  errors and categories are tagged with the case and the kind, then written as JSON lines
  by one WriteToText (three writes a branch would be most of the pipeline)."""
  os.makedirs(out_root)
  with TestPipeline("FnApiRunner") as p:
    lines = []
    for name, include_masks in CASES:
      out = p | f"Read[{name}]" >> ReadCoco([("train", files[name], files["images"])],
                                            drop_background=True, include_masks=include_masks,
                                            join_in_worker=join_in_worker)
      images = out.images | f"Each[{name}]" >> beam.FlatMap(batches.annotations)  # batches
      for kind, pcoll, text in (("images", images, repr),
                                ("errors", out.errors, lambda e: e.to_json()),
                                ("categories", out.categories, repr)):
        lines.append(pcoll | f"Text[{name}][{kind}]" >> beam.Map(
            lambda value, case=name, kind=kind, text=text: json.dumps([case, kind, text(value)])))
    _ = (tuple(lines) | "AllLines" >> beam.Flatten()
         | "Write" >> beam.io.WriteToText(os.path.join(out_root, "lines"), num_shards=1))


def _results(out_root: str) -> dict:
  """{case: {'images': [...], 'errors': [...], 'categories': [...]}}, sorted text lines."""
  results = {name: {"images": [], "errors": [], "categories": []} for name, _ in CASES}
  [found] = [n for n in os.listdir(out_root) if n.startswith("lines")]
  with open(os.path.join(out_root, found), encoding="utf-8") as f:
    for line in f.read().splitlines():
      name, kind, text = json.loads(line)
      results[name][kind].append(text)
  for kinds in results.values():
    for lines in kinds.values():
      lines.sort()
  return results


def _build_files(target) -> None:
  os.makedirs(str(target))
  files = _coco_files(str(target))
  with open(os.path.join(str(target), "files.json"), "w", encoding="utf-8") as f:
    json.dump(files, f)


def _build_join(files: dict, join_in_worker: bool):
  """Both joins' outputs of every case, one pipeline a join. The in-worker one also records
  the files it read with fast_sections and with ijson's stream_sections (wrappers that call
  the real functions, so the records are unchanged)."""
  def build(target) -> None:
    root = str(target)
    if not join_in_worker:
      _read_all(files, root, join_in_worker=False)
      return
    from beam_tfrecord.sources.coco import workers
    calls = {"fast": [], "streamed": []}
    real_fast, real_stream = workers.fast_sections, workers.stream_sections
    name_of = lambda f: (os.path.realpath(f.name) if isinstance(getattr(f, "name", None), str)
                         else repr(type(f)))
    with pytest.MonkeyPatch.context() as mp:
      mp.setattr(workers, "fast_sections",
                 lambda f, *a, **k: calls["fast"].append(name_of(f)) or real_fast(f, *a, **k))
      mp.setattr(workers, "stream_sections", lambda f, *a, **k: calls["streamed"].append(
          name_of(f)) or real_stream(f, *a, **k))
      _read_all(files, root, join_in_worker=True)
    with open(os.path.join(root, "calls.json"), "w", encoding="utf-8") as f:
      json.dump(calls, f)
  return build


@pytest.fixture(scope="module")
def joins(shared):
  """Built once per session across xdist workers (then only read); the two pipelines in
  opposite orders on odd and even workers, so that two workers build them side by side."""
  import types
  with open(os.path.join(str(shared.build("coco_join_files", _build_files)), "files.json"),
            encoding="utf-8") as f:
    files = json.load(f)
  order = [True, False]
  if int("0" + "".join(c for c in os.environ.get("PYTEST_XDIST_WORKER", "") if c.isdigit())) % 2:
    order.reverse()
  roots = {in_worker: str(shared.build(f"coco_join_{'in_worker' if in_worker else 'distributed'}",
                                       _build_join(files, in_worker)))
           for in_worker in order}
  with open(os.path.join(roots[True], "calls.json"), encoding="utf-8") as f:
    built = json.load(f)
  by_path = {os.path.realpath(path): name for name, path in files.items()}
  calls = {kind: [by_path.get(path, path) for path in paths] for kind, paths in built.items()}
  return types.SimpleNamespace(files=files, fast=calls["fast"], streamed=calls["streamed"],
                               in_worker=_results(roots[True]),
                               distributed=_results(roots[False]))


@pytest.mark.e2e
@pytest.mark.parametrize("name", WHOLE + STREAMED)
def test_both_joins_give_the_same_images_errors_and_categories(joins, name):
  in_worker = joins.in_worker[name]
  distributed = joins.distributed[name]
  assert in_worker == distributed
  if name == "good":  # the file was really read: images, objects, every kind of error
    assert len(in_worker["images"]) == 4
    reasons = {json.loads(e)["reason"] for e in in_worker["errors"]}
    assert {"duplicate_image_id", "path_traversal", "wrong_type", "unknown_category_id",
            "unknown_image_id", "duplicate_category_id", "background_category"} <= reasons
    assert len(in_worker["categories"]) == 2
  elif name == "big_id":
    assert str(2 ** 70) in "".join(in_worker["images"])
  elif name == "images_twice":  # both arrays read, as streaming reads them
    assert any("source_id='7'" in line for line in in_worker["images"])
  elif name in ("deep", "deep_entry"):  # the annotation alone is rejected, once
    good = joins.in_worker["good"]
    deep = [json.loads(e) for e in in_worker["errors"] if "too_deep" in e]
    assert [(e["level"], e["source"][-15:]) for e in deep] == (
        [] if name == "deep" else [("object", "#annotations[0]")])
    assert len(in_worker["errors"]) == len(good["errors"]) + len(deep)
    assert len(in_worker["images"]) == len(good["images"])
  elif name not in ("nan", "big_exponent", "odd_strings", "bom", "images_twice",
                    "nan_no_categories"):
    file_errors = [e for e in in_worker["errors"] if json.loads(e)["level"] == "file"]
    assert len(file_errors) == 1, file_errors  # one problem, said once


def test_the_in_process_runner_joins_every_file_in_a_worker_whatever_its_size(tmp_path):
  """_JoinFile spills (bounded memory): no size limit sends a large file to the per-section
  tasks on the in-process runner; elsewhere every file goes through them."""
  files = _files(str(tmp_path))
  for join_in_worker, wanted, unwanted in ((True, "JoinFiles", "Stream"),
                                           (False, "Stream", "JoinFiles")):
    p = beam.Pipeline("FnApiRunner")
    _ = p | ReadCoco([("train", files["good"], files["images"]),
                      ("val", files["truncated"], files["images"])],
                     join_in_worker=join_in_worker)
    labels = transform_labels(p)
    assert any(label.endswith(wanted) for label in labels), labels
    assert not any(label.endswith(unwanted) for label in labels), labels


@pytest.mark.e2e
def test_both_joins_carry_segmentations_alike(joins):
  assert joins.in_worker["seg"] == joins.distributed["seg"]
  # the segmentation was carried (as compact JSON), not dropped by both
  assert any("segmentation='[[1,2,30,2,30,20]]'" in line
             for line in joins.in_worker["seg"]["images"])


def test_nesting_depth_is_counted_like_the_streaming_parser():
  from beam_tfrecord.sources.coco.scan import MAX_DEPTH, _deeper_than
  nested = lambda depth: ("[" * (depth - 1) + "]" * (depth - 1)).encode()
  assert not _deeper_than(b'{"a": ' + nested(MAX_DEPTH) + b"}", MAX_DEPTH)
  assert _deeper_than(b'{"a": ' + nested(MAX_DEPTH + 1) + b"}", MAX_DEPTH)
  assert _deeper_than(b'{"a": "x\\"["}', MAX_DEPTH)  # unsure: an escaped quote
  assert not _deeper_than(b'{"a": [{"b": []}], "c": {}}', 4)
  assert _deeper_than(b'{"a": [{"b": []}], "c": {}}', 3)


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["good", "truncated", "nan", "images_not_array"])
def test_the_in_worker_join_streams_with_the_fast_path_and_ijson_where_only_it_can_tell(
    joins, name):
  """The in-worker join reads a file with fast_sections. Where only ijson can tell (a
  truncated file, NaN), the file is streamed again by ijson and the entries not given yet
  follow. Same records as the distributed join."""
  cases = {case for case, _ in CASES}
  assert set(joins.fast) <= cases and set(joins.streamed) <= cases, (joins.fast, joins.streamed)
  assert joins.in_worker[name] == joins.distributed[name]
  assert name in joins.fast
  streamed = [case for case in joins.streamed if case == name]
  assert bool(streamed) == (name in STREAMED_AGAIN), joins.streamed


# =============================================================================================
# Category id 0
# =============================================================================================


@pytest.mark.e2e
def test_category_zero_in_use_needs_a_label_map(tmp_path, capsys):
  images = tmp_path / "export" / "train"
  coco = Coco(str(images), [(0, "cells"), (1, "rbc")])
  coco.image(0, "a.jpg", jpeg((64, 48)), width=64, height=48)
  coco.ann(0, 0, [1, 2, 10, 10])
  coco.ann(0, 1, [20, 20, 10, 10])
  path = coco.write(str(images / "_annotations.coco.json"))
  out = tmp_path / "out"
  run = convert(["--input", path, "--output", str(out)], capsys)
  assert run.code == EXIT_USAGE
  assert "category id 0" in run.stderr and "--label-map" in run.stderr
  assert not out.exists()
  label_map = layouts.write_label_map(tmp_path / "map.pbtxt", {"cells": 2, "rbc": 1})
  run = convert(["--input", path, "--label-map", str(label_map), "--output", str(out)])
  assert run.code == 0
  (example,) = run.examples
  assert example["image/object/class/text"] == [b"cells", b"rbc"]
  assert example["image/object/class/label"] == [2, 1]


def test_category_zero_verdict_fails_a_file_that_uses_it_else_warns_of_each_dropped():
  used = list(coco.category_zero("a.json", 5, [(0, "cells")]))
  assert [(e.reason, e.level, e.key, e.source) for e in used] == [
      (coco.CATEGORY_ZERO_USED, "file", "a.json", "a.json#annotations[5]")]
  assert "category id 0" in used[0].message and "--label-map" in used[0].message
  unused = list(coco.category_zero("a.json", None, [(3, "b"), (1, "cells")]))
  assert [(e.reason, e.level, e.source) for e in unused] == [
      ("background_category", "warning", "a.json#categories[1]"),
      ("background_category", "warning", "a.json#categories[3]")]
  assert "'cells'" in unused[0].message and "used by no annotation" in unused[0].message
  assert list(coco.category_zero("a.json", None, [])) == []
  notes = ("a.json", [("defined", 1, "cells"), ("used", 9), ("used", 4)])
  assert [e.source for e in coco._zero_verdict(notes)] == ["a.json#annotations[4]"]
  from beam_tfrecord.finalize.manifest import USAGE_REASONS
  assert coco.CATEGORY_ZERO_USED in USAGE_REASONS  # the reason that fails the run


def test_check_input_streams_deep_nesting_in_constant_memory(tmp_path, monkeypatch):
  """The launcher's check walks ijson's flat events (ijson.parse's prefixes made 20,000 '['
  cost 1.2 GB): a nesting bomb before `images` is left to the pipeline (too_deep) at once,
  past MAX_DEPTH, not after walking it all, and `images` after a deep but allowed value is
  still found."""
  import resource

  import ijson
  events, basic_parse = [], ijson.basic_parse

  def counted(*args, **kwargs):
    for event in basic_parse(*args, **kwargs):
      events.append(event[0])
      yield event

  monkeypatch.setattr(ijson, "basic_parse", counted)
  bomb = "[" * 20_000 + "]" * 20_000
  path = tmp_path / "bomb.json"
  path.write_text('{"info": %s, "images": []}' % bomb)
  before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  coco.check_input(str(path))  # returns: the pipeline reports too_deep
  assert 0 < len(events) <= coco.MAX_DEPTH + 2  # {, "info", one "[" a level: then it stopped
  assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # kB
  nested = "[" * (coco.MAX_DEPTH - 2) + "]" * (coco.MAX_DEPTH - 2)
  path.write_text('{"info": %s, "images": []}' % nested)
  with pytest.raises(UsageError, match="`images` array is empty"):
    coco.check_input(str(path))


def test_an_image_with_too_many_annotations_is_rejected_and_collected_no_further(tmp_path):
  """Issue 30 (objects per image): past MAX_OBJECTS_PER_IMAGE annotations the image is one
  too_many_objects error, and the chunks after the bound are not even read."""
  from beam_tfrecord.sources.base import MAX_OBJECTS_PER_IMAGE
  from beam_tfrecord.sources.coco.join import join_image
  (tmp_path / "a.jpg").write_bytes(b"\xff\xd8\xff\xd9")
  chunk = lambda start, n: tuple((i, 1, (1.0, 1.0, 5.0, 5.0), False, None, i, None)
                                 for i in range(start, start + n))

  def chunks(total):
    yield chunk(0, MAX_OBJECTS_PER_IMAGE)
    yield chunk(MAX_OBJECTS_PER_IMAGE, total - MAX_OBJECTS_PER_IMAGE)
    raise AssertionError("read past the bound")

  image = [("train", str(tmp_path), "a.jpg", 8, 8)]
  out = list(join_image((("x.json", 1), {"image": image, "objects": chunks(
      MAX_OBJECTS_PER_IMAGE + 1)}), {("x.json", 1): "cat"}, False))
  assert [(o.tag, o.value.reason, o.value.level, o.value.key) for o in out] == [
      ("errors", "too_many_objects", "image", "a.jpg")]
  at_bound = list(join_image((("x.json", 1), {"image": image, "objects": [chunk(
      0, MAX_OBJECTS_PER_IMAGE)]}), {("x.json", 1): "cat"}, False))
  [annotation] = batches.annotations(at_bound)
  assert len(annotation.objects) == MAX_OBJECTS_PER_IMAGE
