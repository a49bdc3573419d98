"""The Pascal VOC bad-input corpus (one run), and documents that used to kill the pipeline: every
input is converted correctly or reported with a reason."""
from __future__ import annotations

import collections
import json
import os

import bad_data as bd
import numpy as np
import pytest
from bad_checks import DUPLICATE_WARNINGS, check_report_format

# ============================================================================================
# Pascal VOC corpus (one run)

# xml stem -> (xml bytes factory (given the image dir and outside file), expected)
# expected: ("ok", objects_written, [object reasons]) or ("image", stage, {reasons})


def _obj(name="cat", box=(4, 4, 24, 20), **extra):
  return dict(name=name, xmin=box[0], ymin=box[1], xmax=box[2], ymax=box[3], **extra)


VOC_CASES = {
    "ok": (lambda c: bd.voc_xml("ok.jpg", [_obj(), _obj("café ☕", (30, 20, 40, 30),
                                                       difficult=1, truncated=0,
                                                       pose="Left")], (64, 48)),
           ("ok", 2, [])),
    "unicode_name": (lambda c: bd.voc_xml("ñandú (2) 猫 & co.jpg", [_obj()], (64, 48)),
                     ("ok", 1, [])),
    "latin1": (lambda c: ('<?xml version="1.0" encoding="ISO-8859-1"?><annotation>'
                          "<filename>latin1.jpg</filename><object><name>caf\xe9</name><bndbox>"
                          "<xmin>4</xmin><ymin>4</ymin><xmax>24</xmax><ymax>20</ymax>"
                          "</bndbox></object></annotation>").encode("latin-1"),
               ("ok", 1, [])),
    "bom": (lambda c: b"\xef\xbb\xbf" + bd.voc_xml("bom.jpg", [_obj()]), ("ok", 1, [])),
    "no_objects": (lambda c: bd.voc_xml("no_objects.jpg", [], (64, 48)), ("ok", 0, [])),
    "float_coords": (lambda c: bd.voc_xml("float_coords.jpg", [_obj(box=(4.5, 4.25, 24.75,
                                                                         20.5))]),
                     ("ok", 1, [])),
    "nan": (lambda c: bd.voc_xml("nan.jpg", [_obj(), _obj(box=("nan", 1, 5, 5))]),
            ("ok", 1, ["bbox_not_finite"])),
    "inf": (lambda c: bd.voc_xml("inf.jpg", [_obj(), _obj(box=(1, 1, "inf", 5))]),
            ("ok", 1, ["bbox_not_finite"])),
    "zero": (lambda c: bd.voc_xml("zero.jpg", [_obj(), _obj(box=(5, 5, 5, 9))]),
             ("ok", 1, ["bbox_empty"])),
    "inverted": (lambda c: bd.voc_xml("inverted.jpg", [_obj(), _obj(box=(20, 5, 10, 9))]),
                 ("ok", 1, ["bbox_empty"])),
    "outside": (lambda c: bd.voc_xml("outside.jpg", [_obj(), _obj(box=(70, 50, 90, 60))]),
                ("ok", 1, ["bbox_outside"])),
    "partly": (lambda c: bd.voc_xml("partly.jpg", [_obj(), _obj(box=(50, 30, 90, 60))]),
               ("ok", 2, [])),
    "malformed": (lambda c: b"<annotation><filename>malformed.jpg</filenme></annotation>",
                  ("image", "parse", {"malformed_xml"})),
    "truncated": (lambda c: bd.voc_xml("truncated.jpg", [_obj()])[:60],
                  ("image", "parse", {"malformed_xml"})),
    "empty": (lambda c: b"", ("image", "parse", {"malformed_xml"})),
    "binary": (lambda c: bytes(range(256)), ("image", "parse", {"malformed_xml"})),
    "wrong_root": (lambda c: bd.voc_xml("wrong_root.jpg", [_obj()], root_tag="doc"),
                   ("image", "parse", {"malformed_xml"})),
    "billion_laughs": (lambda c: bd.billion_laughs_xml("billion_laughs.jpg"),
                       ("image", "parse", {"unsafe_xml"})),
    "external_entity": (lambda c: bd.external_entity_xml("external_entity.jpg"),
                        ("image", "parse", {"unsafe_xml"})),
    "external_entity_local": (lambda c: bd.external_entity_xml(
        "external_entity_local.jpg", "file://" + c["secret"]), ("image", "parse", {"unsafe_xml"})),
    "width_abc": (lambda c: bd.voc_xml("width_abc.jpg", [_obj()], ("abc", 48)),
                  ("image", "parse", {"wrong_type"})),
    "xmin_abc": (lambda c: bd.voc_xml("xmin_abc.jpg", [_obj(), _obj(box=("abc", 1, 5, 5))]),
                 ("image", "parse", {"wrong_type"})),
    "difficult_bad": (lambda c: bd.voc_xml("difficult_bad.jpg", [_obj(difficult="maybe")]),
                      ("image", "parse", {"wrong_type"})),
    "no_filename": (lambda c: bd.voc_xml(None, [_obj()]), ("image", "parse", {"missing_field"})),
    "no_name": (lambda c: bd.voc_xml("no_name.jpg", [_obj(name=None)]),
                ("image", "parse", {"missing_field"})),
    "no_bndbox": (lambda c: bd.voc_xml("no_bndbox.jpg", [{"name": "cat"}]),
                  ("image", "parse", {"missing_field"})),
    "no_xmax": (lambda c: bd.voc_xml("no_xmax.jpg", [{"name": "cat", "xmin": 1, "ymin": 1,
                                                        "ymax": 5}]),
                ("image", "parse", {"missing_field"})),
    "traversal": (lambda c: bd.voc_xml("../outside/outside.jpg", [_obj()]),
                  ("image", "locate", {"path_traversal"})),
    "absolute": (lambda c: bd.voc_xml(c["outside"], [_obj()]), ("image", "locate",
                                                                 {"absolute_path"})),
    "symlink": (lambda c: bd.voc_xml("link_out.jpg", [_obj()]),
                ("image", "locate", {"symlink_escape"})),
    "missing": (lambda c: bd.voc_xml("missing.jpg", [_obj()]),
                ("image", "locate", {"missing_image"})),
    "truncated_image": (lambda c: bd.voc_xml("truncated_image.jpg", [_obj()]),
                        ("image", "decode", {"truncated_image", "corrupt_image"})),
    "dup_a": (lambda c: bd.voc_xml("dup.jpg", [_obj()]), ("ok", 1, [])),
    "dup_b": (lambda c: bd.voc_xml("dup.jpg", [_obj("dog")]), ("duplicate", None, None)),
}
VOC_IMAGE_FILES = ("ok.jpg", "ñandú (2) 猫 & co.jpg", "latin1.jpg", "bom.jpg", "no_objects.jpg",
                   "float_coords.jpg", "nan.jpg", "inf.jpg", "zero.jpg", "inverted.jpg",
                   "outside.jpg", "partly.jpg", "width_abc.jpg", "xmin_abc.jpg",
                   "difficult_bad.jpg", "no_name.jpg", "no_bndbox.jpg", "no_xmax.jpg", "dup.jpg",
                   "malformed.jpg", "truncated.jpg", "wrong_root.jpg", "billion_laughs.jpg",
                   "external_entity.jpg", "external_entity_local.jpg")
VOC_SECRET = "TOP-SECRET-CONTENT-42"


def _voc_objects(xml: bytes) -> int:
  return xml.count(b"<object>")


@pytest.fixture(scope="module")
def voc_run(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("voc"))
  voc = os.path.join(root, "VOC")
  jpeg_dir = os.path.join(voc, "JPEGImages")
  outside = bd.write_bytes(os.path.join(root, "outside", "outside.jpg"), bd.jpeg())
  secret = bd.write_bytes(os.path.join(root, "secret.txt"), VOC_SECRET.encode())
  for name in VOC_IMAGE_FILES:
    bd.write_bytes(os.path.join(jpeg_dir, name), bd.jpeg())
  bd.write_bytes(os.path.join(jpeg_dir, "truncated_image.jpg"), bd.truncated_tail(bd.jpeg()))
  os.symlink(outside, os.path.join(jpeg_dir, "link_out.jpg"))
  context = {"outside": outside, "secret": secret}
  xmls = {}
  for stem, (make, _) in VOC_CASES.items():
    xmls[stem] = make(context)
    bd.write_bytes(os.path.join(voc, "Annotations", stem + ".xml"), xmls[stem])
  run = bd.convert(["--format", "voc", "--input", voc, "--output", os.path.join(root, "out")])
  run.xmls = xmls
  run.voc = voc
  return run


def _voc_source(run, stem):
  return os.path.join(run.voc, "Annotations", stem + ".xml")


def test_voc_run_finishes_and_reports(voc_run):
  assert voc_run.code == 0
  check_report_format(voc_run)


@pytest.mark.parametrize("stem", list(VOC_CASES))
def test_voc_case(voc_run, stem):
  expected = VOC_CASES[stem][1]
  errors = [e for e in voc_run.errors if e["source"] == _voc_source(voc_run, stem)]
  if expected[0] == "ok":
    _, objects, reasons = expected
    filename = {"unicode_name": "ñandú (2) 猫 & co.jpg", "dup_a": "dup.jpg"}.get(
        stem, stem + ".jpg")
    example = voc_run.by_filename()[filename]
    assert example["image/filename"] == filename.encode("utf-8")
    assert len(example["image/object/bbox/xmin"]) == objects
    if stem != "dup_a":
      assert sorted(e["reason"] for e in errors) == sorted(reasons)
      assert all(e["level"] == "object" for e in errors)
  elif expected[0] == "image":
    _, stage, reasons = expected
    assert len(errors) == 1, errors
    assert errors[0]["stage"] == stage and errors[0]["reason"] in reasons, errors[0]
    assert errors[0]["level"] == "image"
  else:  # the second annotation of dup.jpg
    assert [(e["reason"], e["level"]) for e in errors] == [("duplicate_image", "warning")]


def test_voc_values(voc_run):
  ok = voc_run.by_filename()["ok.jpg"]
  assert [t.decode() for t in ok["image/object/class/text"]] == ["cat", "café ☕"]
  assert ok["image/object/difficult"] == [0, 1]
  assert ok["image/object/view"] == [b"Unspecified", b"Left"]
  latin = voc_run.by_filename()["latin1.jpg"]
  assert latin["image/object/class/text"] == ["café".encode("utf-8")]
  floats = voc_run.by_filename()["float_coords.jpg"]
  np.testing.assert_allclose(floats["image/object/bbox/xmin"], [4.5 / 64], rtol=1e-6)
  with open(os.path.join(voc_run.output, "label_map.pbtxt"), encoding="utf-8") as f:
    assert "café ☕" in f.read()
  assert voc_run.manifest["totals"]["clipped_boxes"] == 1


def test_voc_entities_never_expanded(voc_run):
  everything = json.dumps(voc_run.errors) + json.dumps(voc_run.manifest)
  assert VOC_SECRET not in everything
  assert "root:" not in everything
  assert "lollol" not in everything
  for example in voc_run.examples:
    for text in example["image/object/class/text"]:
      assert b"lol" not in text and VOC_SECRET.encode() not in text


def test_voc_accounting(voc_run):
  errors, xmls = voc_run.errors, voc_run.xmls
  levels = collections.Counter(e["level"] for e in errors)
  duplicates = [e for e in errors if e["reason"] in DUPLICATE_WARNINGS]
  assert len(voc_run.examples) + levels["image"] + len(duplicates) == len(xmls)
  lost = 0
  for error in errors:
    if error["level"] == "image" or error["reason"] == "duplicate_image":
      stem = os.path.splitext(os.path.basename(error["source"]))[0]
      lost += _voc_objects(xmls[stem])
  written = sum(len(e["image/object/class/text"]) for e in voc_run.examples)
  assert written + levels["object"] + lost == sum(_voc_objects(x) for x in xmls.values())


# Each document names its own image (NAME): all are converted in one run beside a good one.
BAD_DOCUMENTS = {
    "width-inf": (lambda name: bd.voc_xml(name, [_obj()], ("inf", 48)), "wrong_type"),
    "height-1e999": (lambda name: bd.voc_xml(name, [_obj()], (64, "1e999")), "wrong_type"),
    "difficult-inf": (lambda name: bd.voc_xml(name, [_obj(difficult="inf")]), "wrong_type"),
    "unknown-encoding": (lambda name: b'<?xml version="1.0" encoding="no-such-codec"?>'
                         b"<annotation><filename>" + name.encode() +
                         b"</filename></annotation>", "malformed_xml"),
    "utf-32": (lambda name: b'<?xml version="1.0" encoding="utf-32"?><annotation><filename>'
               + name.encode() + b"</filename></annotation>", "malformed_xml"),
}


@pytest.fixture(scope="module")
def bad_documents_run(tmp_path_factory):
  """A VOC folder of a good a.xml and every BAD_DOCUMENTS document (b-<case>.xml, each with
  its image), converted once; (run, the exception if the conversion itself died)."""
  tmp_path = tmp_path_factory.mktemp("bad_documents")
  voc = tmp_path / "VOC"
  bd.write_bytes(str(voc / "JPEGImages" / "a.jpg"), bd.jpeg())
  bd.write_bytes(str(voc / "Annotations" / "a.xml"), bd.voc_xml("a.jpg", [_obj()], (64, 48)))
  for case, (document, _) in BAD_DOCUMENTS.items():
    bd.write_bytes(str(voc / "JPEGImages" / f"b-{case}.jpg"), bd.jpeg())
    bd.write_bytes(str(voc / "Annotations" / f"b-{case}.xml"), document(f"b-{case}.jpg"))
  try:
    return bd.convert(["--format", "voc", "--input", str(voc), "--output",
                       str(tmp_path / "o")]), None
  except Exception as e:  # the pipeline died
    return None, e


@pytest.mark.parametrize("case", list(BAD_DOCUMENTS))
def test_voc_bad_document_is_reported_not_a_crash(bad_documents_run, case):
  """Each of these XMLs must become one image-level error; the other images convert. (They
  used to kill the whole pipeline: OverflowError/LookupError/ValueError out of parse_xml.)"""
  run, died = bad_documents_run
  if died is not None:
    pytest.fail(f"the conversion crashed: {type(died).__name__}: {str(died)[-300:]}")
  assert run.code == 0
  assert "a.jpg" in run.by_filename()
  assert len(run.errors) == len(BAD_DOCUMENTS), run.errors  # one for each bad document
  [error] = run.errors_about(f"b-{case}.xml")
  assert (error["level"], error["stage"]) == ("image", "parse")
  assert error["reason"] == BAD_DOCUMENTS[case][1], error
