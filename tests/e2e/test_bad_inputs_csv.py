"""The TF OD CSV bad-input corpus (one run, several files), and CSV inputs refused before running:
every input is converted correctly or reported with a reason."""
from __future__ import annotations

import collections
import os

import bad_data as bd
import pytest
from bad_checks import check_report_format, from_source

# ============================================================================================
# TF OD CSV corpus (one run, several files)

CSV_HEADER = "filename,width,height,class,xmin,ymin,xmax,ymax\n"
# rows of main.csv: (row text, image file it names or None, parses?, expected reason or None)
CSV_ROWS = [
    ("plain.jpg,64,48,cat,4,4,24,20", "plain.jpg", True, None),
    ('"my photo (1), copy.jpg",64,48,café ☕,4,4,24,20', "my photo (1), copy.jpg", True, None),
    ("ñ 猫.jpg,64,48,猫,4,4,24,20", "ñ 猫.jpg", True, None),
    ("no_objects.jpg,64,48,,,,,", "no_objects.jpg", True, None),
    ("wt.jpg,64,48,cat,4,4,24,20", "wt.jpg", True, None),
    ("wt.jpg,64,48,cat,abc,1,10,10", "wt.jpg", False, "wrong_type"),
    ("wt.jpg,abc,48,cat,1,1,10,10", "wt.jpg", False, "wrong_type"),
    ("wt.jpg,64.5,48,cat,1,1,10,10", "wt.jpg", False, "wrong_type"),
    (",64,48,cat,1,1,5,5", None, False, "missing_field"),
    ("mf.jpg,64,48,cat,4,4,24,20", "mf.jpg", True, None),
    ("mf.jpg,64,48,,1,1,5,5", "mf.jpg", False, "missing_field"),
    ("mf.jpg,64,48,cat,1,,5,5", "mf.jpg", False, "missing_field"),
    ("nan.jpg,64,48,cat,4,4,24,20", "nan.jpg", True, None),
    ("nan.jpg,64,48,cat,nan,1,5,5", "nan.jpg", True, "bbox_not_finite"),
    ("nan.jpg,64,48,cat,1,1,inf,5", "nan.jpg", True, "bbox_not_finite"),
    ("nan.jpg,64,48,cat,1,1,1e400,5", "nan.jpg", True, "bbox_not_finite"),
    ("box.jpg,64,48,cat,4,4,24,20", "box.jpg", True, None),
    ("box.jpg,64,48,cat,5,5,5,9", "box.jpg", True, "bbox_empty"),
    ("box.jpg,64,48,cat,9,5,5,9", "box.jpg", True, "bbox_empty"),
    ("box.jpg,64,48,cat,70,50,80,60", "box.jpg", True, "bbox_outside"),
    ("box.jpg,64,48,cat,50,30,90,60", "box.jpg", True, None),  # clipped
    ("../outside/outside.jpg,64,48,cat,4,4,24,20", "../outside/outside.jpg", True, None),
    ("ABSOLUTE,64,48,cat,4,4,24,20", "ABSOLUTE", True, None),
    ("link_out.jpg,64,48,cat,4,4,24,20", "link_out.jpg", True, None),
    ("missing.jpg,64,48,cat,4,4,24,20", "missing.jpg", True, None),
    ("size.jpg,64,48,cat,4,4,24,20", "size.jpg", True, None),
    ("size.jpg,65,48,cat,4,4,24,20", "size.jpg", True, None),   # inconsistent_size warning
    ("trunc_line.jpg,64,48,cat,4,4,24,20", "trunc_line.jpg", True, None),
    ("trunc_line.jpg,64,48,cat,1,2,3", "trunc_line.jpg", False, "malformed_row"),  # no \n
]
CSV_IMAGE_ERRORS = {
    "../outside/outside.jpg": ("locate", "path_traversal"),
    "ABSOLUTE": ("locate", "absolute_path"),
    "link_out.jpg": ("locate", "symlink_escape"),
    "missing.jpg": ("locate", "missing_image"),
}
CSV_OK_IMAGES = {"plain.jpg": 1, "my photo (1), copy.jpg": 1, "ñ 猫.jpg": 1, "no_objects.jpg": 0,
                 "wt.jpg": 1, "mf.jpg": 1, "nan.jpg": 1, "box.jpg": 2, "size.jpg": 2,
                 "trunc_line.jpg": 1}
CSV_BROKEN = (CSV_HEADER + "b1.jpg,64,48,cat,4,4,24,20\nb2.jpg,64,48,cat,4,4,24,20\n"
              "b2.jpg,64,48,cat,1,1,5,5,extra,fields\nb3.jpg,64,48,cat,4,4,24,20\n"
              "b3.jpg,64,48,cat,1,1,5")
CSV_OTHER_FILES = {  # file -> bytes; each one is a file-level error
    "latin1.csv": (CSV_HEADER + "plain.jpg,64,48,caf\xe9,4,4,24,20\n").encode("latin-1"),
    "open_quote.csv": (CSV_HEADER + 'q1.jpg,64,48,cat,4,4,24,20\n"q2.jpg,64,48,cat,1').encode(),
}
CSV_FILE_REASONS = {"latin1.csv": "malformed_csv", "open_quote.csv": "malformed_csv"}
CSV_REFUSED_FILES = {  # file -> (bytes, what the one-line error says); exit 2 before running
    "nocolumn.csv": (b"filename,width,height,class,xmin,ymin,ymax\nplain.jpg,64,48,cat,1,1,5\n",
                     "CSV has no column(s) ['xmax']"),
    "empty.csv": (b"", "is empty"),
    "header_only.csv": (CSV_HEADER.encode(), "has a header but no rows"),
}


@pytest.mark.parametrize("name", list(CSV_REFUSED_FILES))
def test_csv_input_refused_before_running(tmp_path, capsys, name):
  data, says = CSV_REFUSED_FILES[name]
  path = bd.write_bytes(str(tmp_path / name), data)
  good = bd.write_bytes(str(tmp_path / "good.csv"),
                        (CSV_HEADER + "plain.jpg,64,48,cat,4,4,24,20\n").encode())
  bd.write_bytes(str(tmp_path / "plain.jpg"), bd.jpeg())
  output = str(tmp_path / "out")
  run = bd.convert(["--format", "csv", "--input", good, "--input", path, "--output", output],
                   capsys)
  assert run.code == 2
  [line] = run.stderr.strip().splitlines()
  assert path in line and says in line
  assert not os.path.exists(output)


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("csv"))
  image_dir = os.path.join(root, "images")
  outside = bd.write_bytes(os.path.join(root, "outside", "outside.jpg"), bd.jpeg())
  for name in list(CSV_OK_IMAGES) + ["b1.jpg", "b2.jpg", "b3.jpg", "q1.jpg", "q2.jpg"]:
    bd.write_bytes(os.path.join(image_dir, name), bd.jpeg())
  os.symlink(outside, os.path.join(image_dir, "link_out.jpg"))
  rows = [r.replace("ABSOLUTE", outside) for r, _, _, _ in CSV_ROWS]
  main = bd.write_bytes(os.path.join(root, "main.csv"),
                        (CSV_HEADER + "\n".join(rows)).encode("utf-8"))
  broken = bd.write_bytes(os.path.join(root, "broken.csv"), CSV_BROKEN.encode())
  others = {name: bd.write_bytes(os.path.join(root, name), data)
            for name, data in CSV_OTHER_FILES.items()}
  args = ["--format", "csv", "--images", image_dir, "--output", os.path.join(root, "out")]
  for path in [main, broken] + list(others.values()):
    args += ["--input", path]
  run = bd.convert(args)
  run.paths = {"main": main, "broken": broken, "outside": outside, **others}
  return run


def test_csv_run_finishes_and_reports(csv_run):
  """The corpus holds broken files (file-level errors): the run finishes, reports every
  error, and fails with exit 4 ('incomplete', issue 30 item 5) rather than exit 0."""
  run = csv_run
  assert run.code == 4
  assert run.manifest["outcome"] == "incomplete"
  assert run.manifest["errors"]["by_level"]["file"] >= 1
  check_report_format(run)


@pytest.mark.parametrize("line", range(2, 2 + len(CSV_ROWS)))
def test_csv_row(csv_run, line):
  text, image, parses, reason = CSV_ROWS[line - 2]
  main = csv_run.paths["main"]
  row_errors = [e for e in csv_run.errors if e["source"] == f"{main}:{line}"]
  if not parses:
    assert [(e["stage"], e["reason"], e["level"]) for e in row_errors] == [
        ("parse", reason, "object")]
    assert row_errors[0]["key"] == (image.strip() if image and image.strip() else main)
    return
  if image in CSV_IMAGE_ERRORS:
    stage, expected = CSV_IMAGE_ERRORS[image]
    image = csv_run.paths["outside"] if image == "ABSOLUTE" else image
    [error] = [e for e in csv_run.errors if e["key"] == image]
    assert (error["stage"], error["reason"], error["level"]) == (stage, expected, "image")
    return
  example = csv_run.by_filename()[image]
  assert example["image/filename"] == image.encode("utf-8")
  if reason:
    assert reason in [e["reason"] for e in csv_run.errors_where(key=image, level="object")]


@pytest.mark.parametrize("image", list(CSV_OK_IMAGES))
def test_csv_image(csv_run, image):
  example = csv_run.by_filename()[image]
  assert len(example["image/object/bbox/xmin"]) == CSV_OK_IMAGES[image]
  # rows that do not parse are keyed by the image they name too (they had no key)
  expected_errors = sorted(r for _, i, p, r in CSV_ROWS if i == image and r)
  got = sorted(e["reason"] for e in csv_run.errors_where(key=image) if e["level"] == "object")
  assert got == expected_errors


def test_csv_values(csv_run):
  run = csv_run
  assert run.by_filename()["my photo (1), copy.jpg"]["image/object/class/text"] == [
      "café ☕".encode()]
  assert run.by_filename()["ñ 猫.jpg"]["image/object/class/text"] == ["猫".encode()]
  assert run.manifest["totals"]["clipped_boxes"] == 1
  [warning] = run.errors_where(key="size.jpg")
  assert (warning["reason"], warning["level"]) == ("inconsistent_size", "warning")


@pytest.mark.parametrize("name", list(CSV_OTHER_FILES))
def test_csv_bad_file_is_reported(csv_run, name):
  errors = from_source(csv_run, csv_run.paths[name])
  assert [(e["reason"], e["level"]) for e in errors] == [(CSV_FILE_REASONS[name], "file")]


def test_csv_broken_row_is_reported(csv_run):
  """A row with too many fields (and a cut last line): never a crash, always reported."""
  errors = from_source(csv_run, csv_run.paths["broken"])
  assert errors
  assert all(e["stage"] == "parse" for e in errors)


def test_csv_broken_row_loses_only_that_row(csv_run):
  run, broken = csv_run, csv_run.paths["broken"]
  written = run.by_filename()
  assert all(name in written for name in ("b1.jpg", "b2.jpg", "b3.jpg"))
  errors = from_source(run, broken)
  assert sorted(e["source"] for e in errors) == [f"{broken}:4", f"{broken}:6"]
  assert all(e["level"] == "object" for e in errors)


def test_csv_accounting(csv_run):
  """main.csv: each data row is an object (or an image without objects); nothing is lost."""
  run, main = csv_run, csv_run.paths["main"]
  errors = from_source(run, main)
  images = {i for _, i, p, _ in CSV_ROWS if i and p}
  names = set(CSV_OK_IMAGES)
  examples = [e for e in run.examples if e["filename"] in names]
  levels = collections.Counter(e["level"] for e in errors)
  assert len(examples) + levels["image"] == len(images)
  objects_in = sum(1 for r, _, _, _ in CSV_ROWS if ",,,,," not in r)
  lost = sum(1 for _, i, p, _ in CSV_ROWS if p and i in CSV_IMAGE_ERRORS)
  written = sum(len(e["image/object/class/text"]) for e in examples)
  assert written + levels["object"] + lost == objects_in
