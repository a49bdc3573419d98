"""sources/csv.py: the column map, reading rows, parse_row and group_image, and property tests
(a result or InputError, never anything else)."""
from __future__ import annotations

import io

import pytest
from fuzzing import FUZZ, returns_or_input_error
from hypothesis import example, given
from hypothesis import strategies as st

from beam_tfrecord.records.model import (Box, ImageAnnotation, InputError,
                                         ObjectAnnotation)
from beam_tfrecord.sources import csv as csv_source


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


def _group(tmp_path, rows, split=None, offsets=None):
  out = list(csv_source.group_image((("f.csv", split, str(tmp_path), "a.jpg"), rows), False,
                                    offsets=offsets))
  anns = [o for o in out if isinstance(o, ImageAnnotation)]
  return anns, [o.value for o in out if not isinstance(o, ImageAnnotation)]


def test_csv_group_image_keeps_file_order_and_drops_empty_rows(tmp_path):
  cat = ObjectAnnotation("cat", Box(1, 2, 3, 4))
  dog = ObjectAnnotation("dog", Box(5, 6, 7, 8))
  # rows as _ReadPart gives them: ((range start, line), width, height, label, box)
  anns, errors = _group(tmp_path, [((0, 9), 10, 8, "dog", (5, 6, 7, 8)),
                                   ((0, 3), 10, 8, "cat", (1, 2, 3, 4)),
                                   ((0, 5), 10, 8, None, None)], "val")
  assert errors == []
  assert anns == [ImageAnnotation(key="a.jpg", uri=str(tmp_path / "a.jpg"), source_id="a.jpg",
                                  source="f.csv", objects=(cat, dog), split="val", width=10,
                                  height=8)]
  anns, _ = _group(tmp_path, [((0, 2), None, None, None, None)])
  assert anns[0].objects == () and anns[0].width is None


def test_csv_group_image_orders_rows_of_ranges_by_range_then_line(tmp_path):
  """A big file's rows of one image come from several ranges: the range's start orders them
  before the line within the range; the first row's file line names the source."""
  rows = [((5000, 1), None, None, "late", (1, 1, 2, 2)),
          ((100, 7), None, None, "early", (1, 1, 2, 2)),
          ((100, 2), 10, 8, "first", (1, 1, 2, 2))]
  anns, errors = _group(tmp_path, rows, offsets={("f.csv", 100): 1, ("f.csv", 5000): 40})
  assert [o.label for o in anns[0].objects] == ["first", "early", "late"]
  # an image error names the file line of the image's first row: 1 + 2
  out = list(csv_source.group_image((("f.csv", None, str(tmp_path), "../x.jpg"), rows), False,
                                    offsets={("f.csv", 100): 1, ("f.csv", 5000): 40}))
  assert [(o.value.source, o.value.reason) for o in out] == [("f.csv:3", "path_traversal")]


def test_csv_group_image_reports_inconsistent_sizes(tmp_path):
  anns, errors = _group(tmp_path, [((0, 2), 10, 8, None, None), ((0, 3), 12, 8, None, None)])
  assert [e.reason for e in errors] == ["inconsistent_size"]
  assert [e.source for e in errors] == ["f.csv:2"]
  assert (anns[0].width, anns[0].height) == (None, None)


def test_csv_group_image_listing_labels_and_normalized_boxes(tmp_path):
  out = list(csv_source.group_image(
      (("f.csv", None, str(tmp_path), "a.jpg"),
       [((0, 2), None, None, "dog", None), ((0, 3), None, None, "cat", None),
        ((0, 4), None, None, "dog", None)]), False))
  assert out[0].labels == ("dog", "cat") and out[0].objects == ()
  out = list(csv_source.group_image(
      (("f.csv", None, str(tmp_path), "a.jpg"), [((0, 2), None, None, "c", (0.1, 0.2, 0.3, 0.4))]),
      False, normalized=True))
  assert out[0].objects == (ObjectAnnotation("c", Box(0.1, 0.2, 0.3, 0.4, normalized=True)),)


# ---------------------------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------------------------


csv_values = (st.text(max_size=12) | st.none() | st.just(float("nan")) | st.floats() |
              st.integers(-10**15, 10**15) | st.sampled_from(["inf", "-inf", "nan", "1e400",
                                                              " ", "1.0", "1.5", "0x1"]))
csv_rows = st.dictionaries(st.sampled_from(csv_source.FIELDS) | st.text(max_size=5),
                           csv_values, max_size=12)


@FUZZ
@given(csv_rows)
@example({"filename": "a.jpg", "width": "inf", "class": "c", "xmin": "1", "ymin": "1",
          "xmax": "2", "ymax": "2"})
def test_csv_parse_row(row):
  result = returns_or_input_error(csv_source.parse_row, row)
  if result is not None:
    filename, width, height, obj, split = result
    assert isinstance(filename, str) and filename.strip()
    assert obj is None or isinstance(obj, ObjectAnnotation)


def test_csv_parse_row_huge_int():
  returns_or_input_error(csv_source.parse_row, {
      "filename": "a.jpg", "class": "c", "xmin": 10**400, "ymin": 1, "xmax": 2, "ymax": 3})


csv_text = st.lists(st.sampled_from(list('ab,,"\n\r\t \x00é1.') + ["filename", "class", "xmin",
                                                                     "nan", "1e400", "\r\n"]),
                    max_size=80).map("".join)


@FUZZ
@given(st.one_of(
    csv_text.map(lambda t: ("filename,width,height,class,xmin,ymin,xmax,ymax\n" + t).encode()),
    csv_text.map(str.encode), st.binary(max_size=300)))
@example(b"filename,width,height,class,xmin,ymin,xmax,ymax\n\"a.jpg,1,2")
@example(b"filename,class,xmin,ymin,xmax,ymax\na,b,c,d,e,f,g,h,i\n")
@example(b"\xff\xfe\x00\x00")
@example(b"filename,filename,class,xmin,ymin,xmax,ymax\n1,2,3,4,5,6,7\n")
def test_csv_read_rows(data):
  column_map = csv_source.parse_column_map(None)
  try:
    for line, row in csv_source.read_rows(io.BytesIO(data), column_map):
      assert isinstance(line, int) and isinstance(row, dict)
      returns_or_input_error(csv_source.parse_row, row)
  except InputError as e:
    assert e.reason in ("malformed_csv", "missing_column")


# ---------------------------------------------------------------------------------------------
# Normalized coordinates (--csv-normalized)
# ---------------------------------------------------------------------------------------------

def test_csv_parse_row_normalized_boxes():
  [(_, row)] = _rows("filename,class,xmin,ymin,xmax,ymax\na.jpg,cat,0.1,0.2,0.5,0.75\n")
  obj = csv_source.parse_row(row, normalized=True)[3]
  assert obj.box == Box(0.1, 0.2, 0.5, 0.75, normalized=True)
  assert csv_source.parse_row(row)[3].box == Box(0.1, 0.2, 0.5, 0.75)  # pixels by default


@pytest.mark.parametrize("boxes,expected", [
    ([(0.1, 0.2, 0.5, 0.75), (0, 0, 1.5, 1)], True),
    ([(0.1, 0.2, 0.5, 0.75), (1, 1, 12, 9)], False),        # one pixel box is enough
    ([(-0.5, 0.2, 0.5, 0.75)], False),
    ([(float("nan"), 0.2, 0.5, 0.75)], True),              # non-finite: rejected anyway
    ([], False),                                           # no box: nothing to judge
])
def test_csv_coordinate_range_looks_normalized(boxes, expected):
  seen = csv_source.CoordinateRange()
  for box in boxes:
    seen.add(Box(*box))
  assert seen.looks_normalized() is expected


def _normalized_csv(tmp_path, rows):
  import bad_data as bd
  for name in ("a.jpg", "b.jpg"):
    bd.write_bytes(str(tmp_path / name), bd.jpeg((64, 48)))
  path = tmp_path / "labels.csv"
  path.write_text("filename,width,height,class,xmin,ymin,xmax,ymax\n"
                  + "".join(f"{r}\n" for r in rows))
  return str(path)


NORMALIZED_ROWS = ["a.jpg,64,48,cat,0.125,0.25,0.5,0.75", "a.jpg,64,48,dog,0.5,0.5,1,1",
                   "b.jpg,64,48,cat,0.25,0.125,0.75,0.5"]


@pytest.mark.e2e
def test_csv_normalized_coordinates_warn_once_and_read_with_the_option(tmp_path):
  import bad_data as bd
  csv_path = _normalized_csv(tmp_path, NORMALIZED_ROWS)
  run = bd.convert(["--format", "csv", "--input", csv_path, "--output", str(tmp_path / "o")])
  assert run.code == 0
  [warning] = run.errors  # one per file, not per row
  assert (warning["reason"], warning["level"], warning["source"]) == (
      "looks_normalized", "warning", csv_path)
  assert "--csv-normalized" in warning["message"]

  fixed = bd.convert(["--format", "csv", "--input", csv_path, "--output", str(tmp_path / "n"),
                      "--csv-normalized"])
  assert fixed.code == 0 and fixed.errors == []
  written = fixed.by_filename()
  expected = {"a.jpg": [(0.125, 0.25, 0.5, 0.75), (0.5, 0.5, 1, 1)],
              "b.jpg": [(0.25, 0.125, 0.75, 0.5)]}
  for name, boxes in expected.items():
    example = written[name]
    got = list(zip(*(example[f"image/object/bbox/{k}"] for k in ("xmin", "ymin", "xmax",
                                                                  "ymax"))))
    assert got == [pytest.approx(b) for b in boxes]


@pytest.mark.e2e
def test_csv_pixel_coordinates_do_not_warn(tmp_path):
  import bad_data as bd
  csv_path = _normalized_csv(tmp_path, ["a.jpg,64,48,cat,8,12,32,36", "b.jpg,64,48,cat,1,1,1.5,1.5"])
  run = bd.convert(["--format", "csv", "--input", csv_path, "--output", str(tmp_path / "o")])
  assert run.code == 0 and run.errors == []


def test_csv_normalized_is_refused_for_other_formats(tmp_path, capsys):
  import bad_data as bd
  (tmp_path / "cls" / "cat").mkdir(parents=True)
  bd.write_bytes(str(tmp_path / "cls" / "cat" / "a.jpg"), bd.jpeg())
  run = bd.convert(["--format", "folders", "--input", str(tmp_path / "cls"), "--output",
                    str(tmp_path / "o"), "--csv-normalized"], capsys)
  assert run.code == 2 and not (tmp_path / "o").exists()
  assert run.stderr.count("\n") == 1 and "--csv-normalized applies to --format csv" in run.stderr


def test_a_line_over_the_budget_is_refused_after_the_rows_before_it():
  """A CSV line longer than MAX_LINE_CHARS (one huge field, or millions of commas) is an
  error of the file, read MAX_LINE_CHARS + 1 characters at a time; the rows before it stay."""
  header = "filename,width,height,class,xmin,ymin,xmax,ymax\n"
  good = "a.jpg,64,48,cat,1,1,10,10\n"
  for bomb in ("," * (csv_source.MAX_LINE_CHARS + 5), "x" * (3 * csv_source.MAX_LINE_CHARS)):
    rows = csv_source.read_rows(io.BytesIO((header + good + bomb).encode()),
                                csv_source.parse_column_map(None))
    assert next(rows)[1]["filename"] == "a.jpg"
    with pytest.raises(InputError) as e:
      next(rows)
    assert e.value.reason == "too_large" and "line 3" in e.value.message
  at_limit = "b.jpg,64,48,cat,1,1,10,10" + "," * (csv_source.MAX_LINE_CHARS - 27) + "\r\n"
  rows = list(csv_source.read_rows(io.BytesIO((header + at_limit).encode()),
                                   csv_source.parse_column_map(None)))
  assert [row["filename"] for _, row in rows] == ["b.jpg"]
