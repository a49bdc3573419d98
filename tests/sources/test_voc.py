"""sources/voc.py: parse_xml on standard and unusual documents, image sets and splits, property
tests (a result or InputError, never anything else), and a conversion of train and trainval."""
from __future__ import annotations

import os

import bad_data as bd
import pytest
from fuzzing import FUZZ, returns_or_input_error
from hypothesis import example, given
from hypothesis import strategies as st

from beam_tfrecord.records.model import Box, InputError, ObjectAnnotation
from beam_tfrecord.sources import voc

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


# ---------------------------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=600))
@example(b"<annotation><filename>a</filename></annotation>")
@example(b'<?xml version="1.0" encoding="UTF-16"?><annotation/>')
@example(b'<?xml version="1.0" encoding="cp1252"?><annotation><filename>\xe9</filename>'
         b'</annotation>')
@example(bd.billion_laughs_xml("a.jpg"))
@example(bd.external_entity_xml("a.jpg"))
@example(b'<!DOCTYPE a [<!ENTITY % p SYSTEM "file:///etc/passwd"> %p;]><annotation/>')
@example(b"<annotation xmlns='urn:x'><filename>a</filename></annotation>")
def test_voc_parse_xml_arbitrary_bytes(data):
  result = returns_or_input_error(voc.parse_xml, data)
  if result is not None:
    assert isinstance(result[0], str) and result[0]


xml_text = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
numberish = (st.floats().map(repr) | st.integers().map(str) | xml_text |
             st.sampled_from(["", " 12 ", "1e5", "0x10", "-0", "nan", "1_000", "١٢"]))


def _escape(text: str) -> str:
  from xml.sax.saxutils import escape
  return escape(text)


@st.composite
def voc_documents(draw):
  parts = ["<annotation>"]
  if draw(st.booleans()):
    parts.append(f"<filename>{_escape(draw(xml_text))}</filename>")
  if draw(st.booleans()):
    parts.append(f"<size><width>{_escape(draw(numberish))}</width>"
                 f"<height>{_escape(draw(numberish))}</height></size>")
  for _ in range(draw(st.integers(0, 3))):
    parts.append("<object>")
    if draw(st.booleans()):
      parts.append(f"<name>{_escape(draw(xml_text))}</name>")
    for tag in ("difficult", "truncated"):
      if draw(st.booleans()):
        parts.append(f"<{tag}>{_escape(draw(numberish))}</{tag}>")
    if draw(st.booleans()):
      parts.append("<bndbox>")
      for tag in ("xmin", "ymin", "xmax", "ymax"):
        if draw(st.integers(0, 9)):
          parts.append(f"<{tag}>{_escape(draw(numberish))}</{tag}>")
      parts.append("</bndbox>")
    parts.append("</object>")
  parts.append("</annotation>")
  return "".join(parts).encode("utf-8")


@FUZZ
@given(voc_documents())
def test_voc_parse_xml_wrong_contents(data):
  result = returns_or_input_error(voc.parse_xml, data)
  if result is not None:
    filename, width, height, objects = result
    assert filename and all(isinstance(o, ObjectAnnotation) for o in objects)


_VOC_ENCODING = ()  # was a strict xfail: fixed in sources/voc.py


@pytest.mark.parametrize("document", [
    pytest.param(bd.voc_xml("a.jpg", [], ("inf", 3)), id="width-inf"),
    pytest.param(bd.voc_xml("a.jpg", [], (3, "1e999")), id="height-1e999"),
    pytest.param(bd.voc_xml("a.jpg", [dict(name="x", xmin=1, ymin=1, xmax=2, ymax=2,
                                           difficult="inf")]), id="difficult-inf"),
    pytest.param(b'<?xml version="1.0" encoding="no-such-codec"?><annotation/>',
                 marks=_VOC_ENCODING, id="unknown-encoding"),
    pytest.param(b'<?xml version="1.0" encoding="rot13"?><annotation/>', marks=_VOC_ENCODING,
                 id="non-text-encoding"),
    pytest.param(b'<?xml version="1.0" encoding="utf-32"?><annotation/>', marks=_VOC_ENCODING,
                 id="multibyte-encoding"),
])
def test_voc_documents_that_escape_parse_xml(document):
  returns_or_input_error(voc.parse_xml, document)


# ---------------------------------------------------------------------------------------------
# Conversions
# ---------------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_voc_train_and_trainval_only_make_a_val_split(tmp_path):
  voc = tmp_path / "VOC"
  names = [f"im{i}" for i in range(5)]
  for name in names:
    bd.write_bytes(str(voc / "JPEGImages" / f"{name}.jpg"), bd.jpeg())
    bd.write_bytes(str(voc / "Annotations" / f"{name}.xml"), bd.voc_xml(
        f"{name}.jpg", [{"name": "cat", "xmin": 2, "ymin": 2, "xmax": 20, "ymax": 20}], size=(64, 48)))
  sets = voc / "ImageSets" / "Main"
  sets.mkdir(parents=True)
  (sets / "train.txt").write_text("im0\nim1\nim2\n")
  (sets / "trainval.txt").write_text("\n".join(names) + "\n")
  run_ = bd.convert(["--format", "voc", "--input", str(voc), "--output", str(tmp_path / "o")])
  assert run_.code == 0 and not run_.errors
  assert {e["filename"]: e["split"] for e in run_.examples} == {
      "im0.jpg": "train", "im1.jpg": "train", "im2.jpg": "train", "im3.jpg": "val",
      "im4.jpg": "val"}
  picked = bd.convert(["--format", "voc", "--input", str(voc), "--output",
                       str(tmp_path / "p"), "--image-sets", "train"])
  assert picked.code == 0 and len(picked.examples) == 3
  assert {e["reason"] for e in picked.errors} == {"excluded_by_image_sets"}
  assert {e["level"] for e in picked.errors} == {"warning"}


def test_voc_missing_annotations_reports_listed_ids_without_xml():
  lists = {"train": "/v/ImageSets/Main/train.txt", "val": "/v/ImageSets/Main/val.txt"}
  joined = {"xml": [], "lists": [["train", "val"]]}
  [error] = voc.missing_annotations(("c", joined), ["train", "val"], lists)
  assert (error.reason, error.level, error.source) == ("missing_annotation", "image",
                                                       lists["train"])
  assert "'c'" in error.message and "c.xml" in error.message
  # an XML is there, or only lists that were not chosen name it: nothing to report
  assert voc.missing_annotations(("c", {"xml": ["/v/Annotations/c.xml"], "lists": [["train"]]}),
                                 ["train"], lists) == []
  assert voc.missing_annotations(("c", {"xml": [], "lists": [["val"]]}), ["train"], lists) == []


def test_voc_annotation_files_any_case_without_hidden(tmp_path):
  for name in ("a.xml", "B.XML", "c.Xml", "._a.xml", "notes.txt"):
    bd.write_bytes(str(tmp_path / "Annotations" / name), b"<annotation/>")
  found = voc.annotation_files(str(tmp_path))
  assert [os.path.basename(f) for f in found] == ["B.XML", "a.xml", "c.Xml"]


@pytest.mark.e2e
def test_voc_directory_reads_upper_case_xml_and_reports_listed_ids_without_xml(tmp_path):
  """Annotations/A.XML is read (as a folder of XMLs reads it); an ImageSets id without its
  XML is a missing_annotation image error, so --strict fails instead of losing the image."""
  voc_dir = tmp_path / "VOC"
  box = [{"name": "cat", "xmin": 2, "ymin": 2, "xmax": 20, "ymax": 20}]
  for stem, xml_name in (("A", "A.XML"), ("b", "b.xml")):
    bd.write_bytes(str(voc_dir / "JPEGImages" / f"{stem}.jpg"), bd.jpeg())
    bd.write_bytes(str(voc_dir / "Annotations" / xml_name),
                   bd.voc_xml(f"{stem}.jpg", box, size=(64, 48)))
  bd.write_bytes(str(voc_dir / "JPEGImages" / "c.jpg"), bd.jpeg())  # listed, no XML
  sets = voc_dir / "ImageSets" / "Main"
  sets.mkdir(parents=True)
  (sets / "train.txt").write_text("A\nb\nc\n")
  run = bd.convert(["--format", "voc", "--input", str(voc_dir), "--output", str(tmp_path / "o")])
  assert run.code == 0
  assert {e["filename"]: e["split"] for e in run.examples} == {"A.jpg": "train",
                                                               "b.jpg": "train"}
  assert [(e["reason"], e["level"], e["source"]) for e in run.errors] == [
      ("missing_annotation", "image", str(sets / "train.txt"))]
  assert "'c'" in run.errors[0]["message"]
  strict = bd.convert(["--format", "voc", "--input", str(voc_dir), "--output",
                       str(tmp_path / "s"), "--strict"])
  assert strict.code == 3
  assert [e["reason"] for e in strict.errors] == ["missing_annotation"]


def test_voc_directory_of_upper_case_xmls_passes_the_input_check(tmp_path):
  bd.write_bytes(str(tmp_path / "Annotations" / "A.XML"), bd.voc_xml("A.jpg"))
  voc.check_input([str(tmp_path)])  # before: "has no Annotations/*.xml"


def test_parse_xml_budgets(tmp_path):
  """Depth and size budgets of one annotation XML (memory stays proportional to the file:
  tests/e2e/test_parser_budgets.py): a valid document nested too deep is refused, not
  converted; a file over MAX_XML_BYTES is read to MAX_XML_BYTES + 1 bytes only."""
  deep = 2 * voc.MAX_XML_DEPTH
  data = (b"<annotation><filename>a.jpg</filename>" + b"<x>" * deep + b"</x>" * deep
          + b"</annotation>")
  with pytest.raises(InputError) as e:
    voc.parse_xml(data)
  assert e.value.reason == "too_deep"
  shallow = voc.MAX_XML_DEPTH - 1
  assert voc.parse_xml(b"<annotation><filename>a.jpg</filename>" + b"<x>" * shallow
                       + b"</x>" * shallow + b"</annotation>")[0] == "a.jpg"
  big = bd.voc_xml("a.jpg", prolog="<!--" + "x" * voc.MAX_XML_BYTES + "-->")
  with pytest.raises(InputError) as e:
    voc.parse_xml(big)
  assert e.value.reason == "too_large"
  (tmp_path / "big.xml").write_bytes(big)
  with pytest.raises(InputError) as e:
    voc.read_xml(str(tmp_path / "big.xml"))
  assert e.value.reason == "too_large"
  (tmp_path / "ok.xml").write_bytes(bd.voc_xml("a.jpg"))
  assert voc.read_xml(str(tmp_path / "ok.xml")) == bd.voc_xml("a.jpg")
