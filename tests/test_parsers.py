"""Parsing unit tests per annotation format: COCO, Pascal VOC, TF OD CSV. No pipeline runs."""
from __future__ import annotations

import dataclasses
import io
import json
import os

import pytest

from beam_tfrecord.records.model import (Box, ImageAnnotation, InputError,
                                         ObjectAnnotation)
from beam_tfrecord.sources import coco
from beam_tfrecord.sources import csv as csv_source
from beam_tfrecord.sources import voc

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
  anns = [o for o in out if isinstance(o, ImageAnnotation)]
  errors = [o.value for o in out if not isinstance(o, ImageAnnotation)]
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


# =============================================================================================
# Pascal VOC
# =============================================================================================

STANDARD_VOC = b"""<annotation>
  <folder>VOC2012</folder>
  <filename>2008_000008.jpg</filename>
  <path>/home/annotator/VOC2012/JPEGImages/2008_000008.jpg</path>
  <source><database>The VOC2008 Database</database></source>
  <size><width>500</width><height>442</height><depth>3</depth></size>
  <segmented>0</segmented>
  <object>
    <name>horse</name><pose>Left</pose><truncated>0</truncated><difficult>0</difficult>
    <bndbox><xmin>53</xmin><ymin>87</ymin><xmax>471</xmax><ymax>420</ymax></bndbox>
  </object>
  <object>
    <name>person</name><pose>Unspecified</pose><truncated>1</truncated><difficult>1</difficult>
    <bndbox><xmin>158</xmin><ymin>44</ymin><xmax>289</xmax><ymax>167</ymax></bndbox>
  </object>
</annotation>"""

# Same content, every element in another order, float coordinates, optional tags missing.
SHUFFLED_VOC = """<annotation>
  <object>
    <bndbox><ymax>420.0</ymax><xmax>471.5</xmax><ymin>87.25</ymin><xmin>53.75</xmin></bndbox>
    <name>horse</name>
  </object>
  <size><depth>3</depth><height>442</height><width>500</width></size>
  <object>
    <difficult>1</difficult>
    <bndbox><xmin>158</xmin><xmax>289</xmax><ymin>44</ymin><ymax>167</ymax></bndbox>
    <truncated>0</truncated>
    <name>chat noir é</name>
    <pose>Frontal</pose>
  </object>
  <path>C:\\Users\\someone\\elsewhere.jpg</path>
  <filename>2008_000008.jpg</filename>
  <folder>../../etc</folder>
</annotation>""".encode("utf-8")


def test_voc_parse_standard_document():
  filename, width, height, objects = voc.parse_xml(STANDARD_VOC)
  assert (filename, width, height) == ("2008_000008.jpg", 500, 442)
  assert objects == [
      ObjectAnnotation(label="horse", box=Box(53, 87, 471, 420), difficult=False,
                       truncated=False, pose="Left"),
      ObjectAnnotation(label="person", box=Box(158, 44, 289, 167), difficult=True,
                       truncated=True, pose="Unspecified"),
  ]


def test_voc_fields_by_tag_name_in_any_order_with_floats():
  filename, width, height, objects = voc.parse_xml(SHUFFLED_VOC)
  # <folder> and <path> are ignored: only <filename> names the image
  assert (filename, width, height) == ("2008_000008.jpg", 500, 442)
  horse, cat = objects
  assert horse == ObjectAnnotation(label="horse", box=Box(53.75, 87.25, 471.5, 420.0))
  assert (horse.difficult, horse.truncated, horse.pose) == (None, None, None)
  assert cat == ObjectAnnotation(label="chat noir é", box=Box(158, 44, 289, 167),
                                 difficult=True, truncated=False, pose="Frontal")


def test_voc_without_size_and_without_objects():
  filename, width, height, objects = voc.parse_xml(
      b"<annotation><filename> spaced.png </filename></annotation>")
  assert (filename, width, height, objects) == ("spaced.png", None, None, [])


def test_voc_empty_optional_flags_are_absent():
  doc = (b"<annotation><filename>a.jpg</filename><object><name>cat</name><difficult/>"
         b"<truncated></truncated><pose></pose><bndbox><xmin>1</xmin><ymin>2</ymin>"
         b"<xmax>3</xmax><ymax>4</ymax></bndbox></object></annotation>")
  [obj] = voc.parse_xml(doc)[3]
  assert (obj.difficult, obj.truncated, obj.pose) == (None, None, None)


@pytest.mark.parametrize("doc,reason", [
    (b"<annotation><filename>a.jpg</filename>", "malformed_xml"),
    (b"<notannotation><filename>a.jpg</filename></notannotation>", "malformed_xml"),
    (b"<annotation><size><width>1</width></size></annotation>", "missing_field"),
    (b"<annotation><filename>a.jpg</filename><object><bndbox><xmin>1</xmin><ymin>1</ymin>"
     b"<xmax>2</xmax><ymax>2</ymax></bndbox></object></annotation>", "missing_field"),
    (b"<annotation><filename>a.jpg</filename><object><name>cat</name></object></annotation>",
     "missing_field"),
    (b"<annotation><filename>a.jpg</filename><object><name>cat</name><bndbox><xmin>1</xmin>"
     b"<ymin>1</ymin><xmax>2</xmax></bndbox></object></annotation>", "missing_field"),
    (b"<annotation><filename>a.jpg</filename><object><name>cat</name><bndbox><xmin>one</xmin>"
     b"<ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object></annotation>", "wrong_type"),
    (b"<annotation><filename>a.jpg</filename><object><name>cat</name><difficult>yes</difficult>"
     b"<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object>"
     b"</annotation>", "wrong_type"),
    (b"<annotation><filename>a.jpg</filename><size><width>wide</width><height>2</height>"
     b"</size></annotation>", "wrong_type"),
])
def test_voc_parse_errors(doc, reason):
  with pytest.raises(InputError) as e:
    voc.parse_xml(doc)
  assert e.value.reason == reason and e.value.stage == "parse"


def test_voc_refuses_entity_expansion():
  bomb = (b'<?xml version="1.0"?><!DOCTYPE annotation [<!ENTITY a "aaaaaaaaaa">'
          b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
          b"<annotation><filename>&b;</filename></annotation>")
  with pytest.raises(InputError) as e:
    voc.parse_xml(bomb)
  assert e.value.reason == "unsafe_xml"


def test_voc_infinite_size_is_an_input_error():
  with pytest.raises(InputError):
    voc.parse_xml(b"<annotation><filename>a.jpg</filename><size><width>inf</width>"
                  b"<height>10</height></size></annotation>")


def test_voc_parse_image_set():
  text = "2008_000002\n\n  2008_000003  -1\r\n2008_000007 1\n2008_000008   0  \n"
  assert voc.parse_image_set(text) == ["2008_000002", "2008_000003", "2008_000007",
                                       "2008_000008"]
  assert voc.parse_image_set("") == []


def _image_sets(root, names):
  main = root / "ImageSets" / "Main"
  main.mkdir(parents=True)
  for name in names:
    (main / f"{name}.txt").write_text("x\n")
  (main / "README").write_text("not a list")
  return main


def test_voc_split_files_lists_image_sets_without_class_lists(tmp_path):
  main = _image_sets(tmp_path, ["train", "val", "trainval", "test", "aeroplane_train",
                                "aeroplane_trainval", "dog_val", "person_test"])
  splits = voc.split_files(str(tmp_path))
  assert list(splits) == ["test", "train", "trainval", "val"]
  for name, uri in splits.items():
    assert os.path.samefile(uri, main / f"{name}.txt")
  assert voc.split_names(splits) == ["test", "train", "val"]  # trainval is their union


@pytest.mark.parametrize("member_of,scope,expected", [
    # train, val and trainval: the union is no split; nobody is rejected for being in it
    (["train", "trainval"], ["train", "val", "trainval", "test"], ("train", "")),
    (["val", "trainval"], ["train", "val", "trainval", "test"], ("val", "")),
    (["test"], ["train", "val", "trainval", "test"], ("test", "")),
    # only train and trainval: val = trainval - train
    (["trainval"], ["train", "trainval"], ("val", "")),
    (["train", "trainval"], ["train", "trainval"], ("train", "")),
    # only val and trainval: train = trainval - val
    (["trainval"], ["val", "trainval"], ("train", "")),
    # trainval alone is a split of its own
    (["trainval"], ["trainval", "test"], ("trainval", "")),
    # explicit --image-sets train,val: test is out of scope
    (["test"], ["train", "val"], (None, "not_in_split")),
    # a real conflict: two lists that are no union of each other
    (["train", "test"], ["train", "val", "test"], (None, "several_splits")),
    ([], ["train", "val"], (None, "not_in_split")),
])
def test_voc_resolve_split(member_of, scope, expected):
  assert voc.resolve_split(member_of, scope) == expected


def test_voc_split_names_derive_the_missing_part():
  assert voc.split_names(["train", "trainval"]) == ["train", "val"]
  assert voc.split_names(["trainval", "test"]) == ["test", "trainval"]
  assert voc.split_names(["train", "val", "trainval"]) == ["train", "val"]


def test_voc_split_files_without_image_sets(tmp_path):
  assert voc.split_files(str(tmp_path)) == {}


# =============================================================================================
# TF OD CSV
# =============================================================================================

def test_csv_parse_column_map_defaults_and_renames():
  default = csv_source.parse_column_map(None)
  assert default == {f: f for f in csv_source.FIELDS}
  assert csv_source.parse_column_map("") == default
  mapping = csv_source.parse_column_map(" filename = path ,class=label,split=subset")
  assert mapping == {**default, "filename": "path", "class": "label", "split": "subset"}


@pytest.mark.parametrize("text", ["filename", "filename=", "=path", "file=path",
                                  "filename=path,,class=label", "klass=label"])
def test_csv_parse_column_map_errors(text):
  with pytest.raises(ValueError):
    csv_source.parse_column_map(text)


def _rows(text, mapping=None):
  return list(csv_source.read_rows(io.BytesIO(text.encode("utf-8")),
                                   csv_source.parse_column_map(mapping)))


def test_csv_read_rows_standard_layout():
  text = ("filename,width,height,class,xmin,ymin,xmax,ymax\n"
          "a.jpg,320,240,cat,1.5,2,30,40.25\n"
          "b.png,100,80,,,,,\n")
  rows = _rows(text)
  assert [line for line, _ in rows] == [2, 3]
  assert rows[0][1] == {"filename": "a.jpg", "width": "320", "height": "240", "class": "cat",
                        "xmin": "1.5", "ymin": "2", "xmax": "30", "ymax": "40.25"}
  assert csv_source.parse_row(rows[0][1]) == (
      "a.jpg", 320, 240, ObjectAnnotation(label="cat", box=Box(1.5, 2.0, 30.0, 40.25)), None)
  # a row with an empty class and box: an image without objects
  assert csv_source.parse_row(rows[1][1]) == ("b.png", 100, 80, None, None)


def test_csv_read_rows_renamed_reordered_columns_and_split():
  text = ("notes,y2,label,x1,subset,path,x2,y1,h,w\n"
          "hello,40,dog,1,val,img/a.jpg,30,2,240,320\n"
          "n/a,,,,train,img/b.jpg,,,80,100\n"
          "00,7,cat,5,,c.jpg,6,1,,\n")
  mapping = ("filename=path,class=label,xmin=x1,ymin=y1,xmax=x2,ymax=y2,width=w,height=h,"
             "split=subset")
  parsed = [csv_source.parse_row(row) for _, row in _rows(text, mapping)]
  assert parsed == [
      ("img/a.jpg", 320, 240, ObjectAnnotation("dog", Box(1.0, 2.0, 30.0, 40.0)), "val"),
      ("img/b.jpg", 100, 80, None, "train"),
      ("c.jpg", None, None, ObjectAnnotation("cat", Box(5.0, 1.0, 6.0, 7.0)), None),
  ]


def test_csv_split_column_used_when_present_without_mapping():
  text = "filename,class,xmin,ymin,xmax,ymax,split\na.jpg,cat,1,2,3,4,test\n"
  [(_, row)] = _rows(text)
  assert csv_source.parse_row(row)[4] == "test"


def test_csv_width_and_height_columns_are_optional():
  [(_, row)] = _rows("filename,class,xmin,ymin,xmax,ymax\na.jpg,cat,1,2,3,4\n")
  assert csv_source.parse_row(row)[1:3] == (None, None)


def test_csv_class_names_are_kept_as_text():
  text = "filename,class,xmin,ymin,xmax,ymax\na.jpg,NaN,1,2,3,4\nb.jpg,007,1,2,3,4\n"
  labels = [csv_source.parse_row(row)[3].label for _, row in _rows(text)]
  assert labels == ["NaN", "007"]


def test_csv_missing_column_is_an_input_error():
  with pytest.raises(InputError) as e:
    _rows("filename,label,xmin,ymin,xmax,ymax\na.jpg,cat,1,2,3,4\n")
  assert e.value.reason == "missing_column" and "class" in e.value.message


def test_csv_empty_file_is_an_input_error():
  with pytest.raises(InputError) as e:
    _rows("")
  assert e.value.reason == "malformed_csv"


@pytest.mark.parametrize("row,reason", [
    ({"filename": "", "class": "cat", "xmin": "1", "ymin": "1", "xmax": "2", "ymax": "2"},
     "missing_field"),
    ({"filename": "a.jpg", "class": "", "xmin": "1", "ymin": "1", "xmax": "2", "ymax": "2"},
     "missing_field"),
    ({"filename": "a.jpg", "class": "cat", "xmin": "1", "ymin": "", "xmax": "2", "ymax": "2"},
     "missing_field"),
    ({"filename": "a.jpg", "class": "cat", "xmin": "one", "ymin": "1", "xmax": "2",
      "ymax": "2"}, "wrong_type"),
    ({"filename": "a.jpg", "width": "320.5", "class": "", "xmin": "", "ymin": "", "xmax": "",
      "ymax": ""}, "wrong_type"),
    ({"filename": "a.jpg", "height": "1e400", "class": "", "xmin": "", "ymin": "", "xmax": "",
      "ymax": ""}, "wrong_type"),
])
def test_csv_parse_row_errors(row, reason):
  with pytest.raises(InputError) as e:
    csv_source.parse_row(row)
  assert e.value.reason == reason


def test_csv_parse_row_whole_number_sizes():
  row = {"filename": "a.jpg", "width": "320.0", "height": "240", "class": "", "xmin": "",
         "ymin": "", "xmax": "", "ymax": ""}
  assert csv_source.parse_row(row)[:3] == ("a.jpg", 320, 240)


def _group(tmp_path, rows, split=None):
  out = list(csv_source.group_image((("f.csv", split, str(tmp_path), "a.jpg"), rows), False))
  anns = [o for o in out if isinstance(o, ImageAnnotation)]
  return anns, [o.value for o in out if not isinstance(o, ImageAnnotation)]


def test_csv_group_image_keeps_file_order_and_drops_empty_rows(tmp_path):
  cat = ObjectAnnotation("cat", Box(1, 2, 3, 4))
  dog = ObjectAnnotation("dog", Box(5, 6, 7, 8))
  anns, errors = _group(tmp_path, [(9, 10, 8, dog), (3, 10, 8, cat), (5, 10, 8, None)], "val")
  assert errors == []
  assert anns == [ImageAnnotation(key="a.jpg", uri=str(tmp_path / "a.jpg"), source_id="a.jpg",
                                  source="f.csv", objects=(cat, dog), split="val", width=10,
                                  height=8)]
  anns, _ = _group(tmp_path, [(2, None, None, None)])
  assert anns[0].objects == () and anns[0].width is None


def test_csv_group_image_reports_inconsistent_sizes(tmp_path):
  anns, errors = _group(tmp_path, [(2, 10, 8, None), (3, 12, 8, None)])
  assert [e.reason for e in errors] == ["inconsistent_size"]
  assert (anns[0].width, anns[0].height) == (None, None)


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
