"""--classes and --class-map: the pure selection, then every source end to end, read back with
TensorFlow (layouts.check_od_examples) and compared with the annotations the selection keeps."""
from __future__ import annotations

import collections
import dataclasses
from typing import Dict, Optional

import layouts
import pytest
from bad_data import convert

from beam_tfrecord.prepare import class_selection
from beam_tfrecord.prepare.select import select_image
from beam_tfrecord.records.model import Box, ImageAnnotation, ObjectAnnotation

# ---------------------------------------------------------------------------------------------
# Pure functions


def test_parse_and_target():
  assert class_selection.parse(None, None) is None
  sel = class_selection.parse("cat, dog,person", "cat=pet,dog=pet")
  assert sel.keep == {"cat", "dog", "person"}
  assert [sel.target(n) for n in ("cat", "dog", "person", "car")] == ["pet", "pet", "person",
                                                                      None]
  only_map = class_selection.parse(None, "motorbike=motorcycle")
  assert only_map.keep is None and only_map.target("car") == "car"
  assert only_map.target("motorbike") == "motorcycle"
  assert sel.named() == ["cat", "dog", "person"]


@pytest.mark.parametrize("classes,class_map,message", [
    ("a,,b", None, "an empty class name"),
    ("", None, "an empty class name"),
    (None, "cat", "give OLD=NEW"),
    (None, "cat=", "give OLD=NEW"),
    (None, "cat=pet,cat=animal", "renames 'cat' twice"),
    ("dog", "cat=pet", "which --classes does not keep"),
])
def test_parse_refuses(classes, class_map, message):
  with pytest.raises(ValueError, match=message):
    class_selection.parse(classes, class_map)


def test_unknown_names_and_message():
  sel = class_selection.parse(None, "horse=pony,cat=pet")
  assert class_selection.unknown_names(sel, ["cat", "dog"]) == ["horse"]
  line = class_selection.unknown_message(["horse"], ["dog", "cat"])
  assert line == "'horse' is not a class of the source; it has: cat, dog"
  many = class_selection.unknown_message(["x", "y"], [f"c{i:03d}" for i in range(50)], limit=3)
  assert many == "'x', 'y' are not classes of the source; it has: c000, c001, c002 ... (50 in all)"


def test_renumber_is_contiguous_in_source_order():
  # COCO-like ids with gaps, a merge (pet takes the place of its first member, cat=17)
  pairs = [("person", 1), ("pet", 18), ("pet", 17), ("car", 3)]
  assert class_selection.renumber(pairs, 1) == {"person": 1, "car": 2, "pet": 3}
  assert class_selection.renumber(pairs, 0) == {"person": 0, "car": 1, "pet": 2}


def _ann(objects=(), labels=()) -> ImageAnnotation:
  return ImageAnnotation(key="a.jpg", uri="/r/a.jpg", source_id="a.jpg", source="s",
                         objects=tuple(ObjectAnnotation(n, Box(0, 0, 1, 1)) for n in objects),
                         labels=tuple(labels))


def test_select_image_drops_renames_and_counts():
  sel = class_selection.parse("cat,dog", "cat=pet,dog=pet")
  [kept], excluded = select_image(_ann(["cat", "person", "dog", "person"]), sel)
  assert [o.label for o in kept.objects] == ["pet", "pet"] and excluded == {"person": 2}
  [background], excluded = select_image(_ann(["person"]), sel)  # kept, without objects
  assert background.objects == () and excluded == {"person": 1}
  same = _ann(["cat"])
  assert select_image(same, class_selection.parse("cat", None)) == ([same], {})
  # image-level labels: an image left without a class is not written (nothing to label it)
  assert select_image(_ann(labels=["person"]), sel) == ([], {"person": 1})
  [relabelled], _ = select_image(_ann(labels=["dog"]), sel)
  assert relabelled.labels == ("pet",)


# ---------------------------------------------------------------------------------------------
# Every source, end to end

def _selected(images, keep: Optional[set], rename: Dict[str, str]):
  """The sample images as the selection leaves them (background images stay)."""
  result = []
  for im in images:
    boxes = [(rename.get(b[0], b[0]),) + tuple(b[1:]) for b in im.boxes
             if keep is None or b[0] in keep]
    result.append(dataclasses.replace(im, boxes=boxes))
  return result


def _excluded(images, keep: set) -> Dict[str, int]:
  return dict(collections.Counter(b[0] for im in images for b in im.boxes
                                  if keep is not None and b[0] not in keep))


def _check(run, images, image_dir, keep, rename, ids):
  assert run.code == 0, run.stderr
  assert run.manifest["label_map"] == ids
  layouts.check_od_examples(run, _selected(images, keep, rename), image_dir, ids)
  excluded = _excluded(images, keep)
  assert run.manifest["excluded_classes"] == excluded
  assert run.manifest["errors"]["by_reason"].get("excluded_class", 0) == sum(excluded.values())
  assert run.manifest["errors"]["by_level"].get("warning", 0) >= sum(excluded.values())
  # counted, never listed one by one
  assert not [e for e in run.errors if e["reason"] == "excluded_class"]
  if excluded:
    assert f"excluded by --classes: {sum(excluded.values())} objects" in run.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("fmt", ["coco", "voc", "csv"])
def test_merge_and_subset_on_file_sources(dataset, tmp_path, capsys, fmt):
  """cat=pet,dog=pet over person, dog, cat: one class pet; person dropped and counted; ids
  contiguous from 1 (COCO's category ids are renumbered in their order)."""
  run = convert([f"--format={fmt}", *dataset.inputs(fmt), "--output", str(tmp_path / "out"),
                 "--classes", "cat,dog", "--class-map", "cat=pet,dog=pet"], capsys)
  _check(run, dataset.images, dataset.image_dir, {"cat", "dog"}, {"cat": "pet", "dog": "pet"},
         {"pet": 1})


@pytest.mark.e2e
def test_rename_only_keeps_every_class_and_renumbers(dataset, tmp_path, capsys):
  run = convert(["--format=coco", *dataset.inputs("coco"), "--output", str(tmp_path / "out"),
                 "--class-map", "person=human"], capsys)
  names = sorted(dataset.coco_category_ids(), key=dataset.coco_category_ids().get)
  renamed = ["human" if n == "person" else n for n in names]
  ids = {n: i for i, n in enumerate(renamed, start=1)}
  _check(run, dataset.images, dataset.image_dir, None, {"person": "human"}, ids)
  assert "excluded_classes" in run.manifest and run.manifest["excluded_classes"] == {}


@pytest.mark.e2e
def test_yolo_subset_keeps_the_class_order(dataset, tmp_path, capsys):
  """YOLO names person, dog, cat (ids 1..3): keeping person and cat gives person 1, cat 2."""
  yaml_path = layouts.write_ultralytics(dataset.images, dataset.image_dir, tmp_path / "src")
  run = convert(["--input", str(yaml_path), "--output", str(tmp_path / "out"),
                 "--classes", "person,cat"], capsys)
  _check(run, dataset.images, dataset.image_dir, {"person", "cat"}, {}, {"person": 1, "cat": 2})


@pytest.mark.e2e
def test_class_folders_drop_the_images_of_excluded_classes(small_dataset, tmp_path, capsys):
  root = layouts.write_class_folders(small_dataset.images, small_dataset.image_dir,
                                     tmp_path / "folders")
  classes = sorted({layouts.image_class(im) for im in small_dataset.images})
  keep = classes[:2]
  run = convert(["--input", str(root), "--output", str(tmp_path / "out"),
                 "--classes", ",".join(keep), "--class-map", f"{keep[0]}=first"], capsys)
  assert run.code == 0, run.stderr
  names = {keep[0]: "first", keep[1]: keep[1]}
  expected = collections.Counter(names[layouts.image_class(im)] for im in small_dataset.images
                                 if layouts.image_class(im) in keep)
  got = collections.Counter(e["image/class/text"].decode() for e in run.examples)
  assert got == expected
  ids = {"first": 0, keep[1]: 1}  # folders are numbered in sorted order, from 0
  assert run.manifest["label_map"] == ids
  assert all(e["image/class/label"] == ids[e["image/class/text"].decode()]
             for e in run.examples)
  dropped = collections.Counter(layouts.image_class(im) for im in small_dataset.images
                                if layouts.image_class(im) not in keep)
  assert run.manifest["excluded_classes"] == dict(dropped)


@pytest.fixture(scope="module")
def csv_output(dataset, tmp_path_factory):
  """A plain CSV conversion, made once: each test that needs one overwrites its own copy."""
  out = tmp_path_factory.mktemp("class-selection") / "out"
  first = convert(["--format=csv", *dataset.inputs("csv"), "--output", str(out)])
  assert first.code == 0
  return out


@pytest.mark.e2e
@pytest.mark.parametrize("option", [["--classes", "person,zebra"],
                                    ["--class-map", "zebra=horse"]])
def test_a_class_the_source_lacks_is_exit_2_and_touches_nothing(dataset, csv_output, tmp_path,
                                                                 capsys, option):
  import shutil
  out = tmp_path / "out"
  shutil.copytree(csv_output, out, symlinks=True)
  before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
  run = convert(["--format=csv", *dataset.inputs("csv"), "--output", str(out), "--overwrite",
                 *option], capsys)
  assert run.code == 2
  last = run.stderr.strip().splitlines()[-1]
  have = ", ".join(dataset.class_names())
  assert f"'zebra' is not a class of the source; it has: {have}" in last, last
  after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
  assert after == before


def test_malformed_options_are_exit_2(dataset, tmp_path, capsys):
  run = convert(["--format=csv", *dataset.inputs("csv"), "--output", str(tmp_path / "out"),
                 "--class-map", "cat"], capsys)
  assert run.code == 2 and "--class-map 'cat': give OLD=NEW" in run.stderr
  assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# --class-map maps every class at once, never along a chain


def test_class_map_is_simultaneous_not_a_chain():
  sel = class_selection.parse(None, "cat=dog,dog=person")
  assert [sel.target(n) for n in ("cat", "dog", "person")] == ["dog", "person", "person"]
  [image], _ = select_image(_ann(["cat", "dog", "person"]), sel)
  assert [o.label for o in image.objects] == ["dog", "person", "person"]  # cat is not person


@pytest.mark.e2e
def test_class_map_is_simultaneous_end_to_end(dataset, tmp_path, capsys):
  """cat=dog,dog=person: the cats are written as dog, the dogs as person (not cat -> dog ->
  person); read back with TensorFlow."""
  run = convert(["--format=csv", *dataset.inputs("csv"), "--output", str(tmp_path / "out"),
                 "--class-map", "cat=dog,dog=person"], capsys)
  _check(run, dataset.images, dataset.image_dir, None, {"cat": "dog", "dog": "person"},
         {"dog": 1, "person": 2})
  source = collections.Counter(b[0] for im in dataset.images for b in im.boxes)
  written = collections.Counter(t.decode() for e in run.examples
                                for t in e["image/object/class/text"])
  assert source["cat"] and source["dog"]
  assert written == {"dog": source["cat"], "person": source["dog"] + source["person"]}


# ---------------------------------------------------------------------------------------------
# A name the source does not declare: found at launch where the classes are known cheaply


def test_undeclared_message_names_the_closest():
  sel = class_selection.parse("person,dgo", None)
  assert class_selection.undeclared_message(sel, None, "x") is None  # unknown: the run checks
  assert class_selection.undeclared_message(sel, {"cat", "dog", "person"}, "its COCO "
                                            "categories") == (
      "--classes 'dgo' (closest: 'dog') is not a class of the source (its COCO categories)")
  far = class_selection.parse(None, "zebra=horse,caat=pet")
  assert class_selection.undeclared_message(far, {"cat", "dog"}, "its class folders") == (
      "--class-map 'caat' (closest: 'cat'), 'zebra' are not classes of the source (its class "
      "folders); it has: cat, dog")
  # a --label-map holds the classes written: what the selection keeps, renamed
  renamed = class_selection.parse("cat,dog", "cat=pett")
  assert class_selection.undeclared_message(renamed, {"cat", "dog"}, "w", {"pet", "dog"},
                                            "l.pbtxt") == (
      "--label-map l.pbtxt has no class 'pett' (closest: 'pet'), which --classes/--class-map "
      "keep: every object of it would be rejected (unknown_class)")
  assert class_selection.undeclared_message(class_selection.parse("cat,dog", "cat=pet"),
                                            {"cat", "dog"}, "w", {"pet", "dog"}) is None


def test_coco_categories_are_read_only_when_the_head_holds_them():
  import json

  from beam_tfrecord.sources import declared
  from beam_tfrecord.sources.coco.head import LAUNCH_HEAD_BYTES
  categories = [{"id": 1, "name": "cat", "supercategory": {"deep": [[1]]}},
                {"id": 2, "name": "dog", "keypoints": ["name"]}]
  first = json.dumps({"categories": categories, "images": [], "annotations": []}).encode()
  assert declared.coco_categories(first) == {"cat", "dog"}
  # the official layout, categories last: past the head of a large file, not known
  images = [{"id": i, "file_name": f"{i:012d}.jpg", "width": 640, "height": 480}
            for i in range(LAUNCH_HEAD_BYTES // 60)]
  last = json.dumps({"images": images, "annotations": [], "categories": categories}).encode()
  assert len(last) > LAUNCH_HEAD_BYTES
  assert declared.coco_categories(last[:LAUNCH_HEAD_BYTES]) is None
  cut = json.dumps({"categories": categories}).encode()[:-3]  # the head ends inside them
  assert declared.coco_categories(cut) is None
  assert declared.coco_categories(b'{"categories": {"name": "x"}}') is None
  assert declared.coco_categories(b"[" * 100_000 + b'"categories"') is None


def _typo_sources(dataset, root):
  """(format, convert arguments, where the names come from, a typo, its closest) per format
  whose classes are known at launch, written as the real tools write them."""
  import layouts_cvat
  import layouts_openimages as oi
  import layouts_yolo_keras as lk
  yaml_path = layouts.write_ultralytics(dataset.images, dataset.image_dir, root / "yolo")
  folders = layouts.write_class_folders(dataset.images, dataset.image_dir, root / "folders")
  xml = layouts_cvat.write_cvat(dataset.images, dataset.image_dir, root / "cvat")
  oi_root = oi.write_openimages(dataset.images, dataset.image_dir, root / "oi")
  keras = lk.write_yolo_keras(dataset.images, dataset.image_dir, root / "keras")
  label_map = layouts.write_label_map(root / "map.pbtxt", dataset.sorted_name_ids())
  return {
      "coco": (["--format=coco", *dataset.inputs("coco")], "its COCO categories"),
      "yolo": (["--input", str(yaml_path)], "the names of its dataset yaml"),
      "folders": (["--input", str(folders)], "its class folders"),
      "cvat": (["--format=cvat", "--input", str(xml)], "the labels of its <meta>"),
      "openimages": (["--input", f"train={oi_root / 'oidv6-train-annotations-bbox.csv'}",
                      "--images", f"train={oi_root / 'train'}"], "its class descriptions"),
      "yolo-keras": (["--input", str(keras / "2007_train.txt"), "--allow-absolute-paths",
                      "--classes-file", str(keras / "model_data" / "voc_classes.txt")],
                     "its classes file"),
      "label-map": (["--format=csv", *dataset.inputs("csv"), "--label-map", str(label_map)],
                    None),
  }


@pytest.mark.parametrize("source", ["coco", "yolo", "folders", "cvat", "openimages",
                                    "yolo-keras", "label-map"])
@pytest.mark.parametrize("option", ["--classes", "--class-map"])
def test_a_typo_is_exit_2_before_anything_runs(dataset, tmp_path, capsys, monkeypatch,
                                               source, option):
  """One line naming the typo and the closest declared name, exit 2, no output directory, and
  no pipeline built: the names were checked at launch, not after the whole conversion."""
  from beam_tfrecord.cli import convert as convert_command

  def no_pipeline(*args, **kwargs):
    raise AssertionError("the pipeline was built")

  monkeypatch.setattr(convert_command, "build_pipeline", no_pipeline)
  args, where = _typo_sources(dataset, tmp_path / "src")[source]
  right, typo = ("Dog", "Dgo") if source == "openimages" else ("dog", "dgo")
  selection = [option, f"{right},{typo}" if option == "--classes" else f"{typo}=pet"]
  out = tmp_path / "out"
  run = convert([*args, "--output", str(out), *selection], capsys)
  assert run.code == 2 and run.stderr.count("\n") == 1, run.stderr
  if where:
    assert run.stderr == (f"beam-tfrecord: error: {option} '{typo}' (closest: '{right}') is "
                          f"not a class of the source ({where})\n")
  else:  # CSV declares nothing: the label map holds the classes the run can write
    missing = typo if option == "--classes" else "pet"
    assert run.stderr.startswith(f"beam-tfrecord: error: --label-map {tmp_path / 'src'}/"
                                 f"map.pbtxt has no class '{missing}'")
  assert not out.exists()


@pytest.mark.parametrize("fmt", ["voc", "csv"])
def test_sources_that_declare_nothing_leave_the_check_to_the_run(dataset, fmt):
  from beam_tfrecord.config import ConvertConfig
  from beam_tfrecord.sources import declared, registry
  inputs = [a.split("=", 1)[1] for a in dataset.inputs(fmt) if a.startswith("--input=")]
  config = ConvertConfig(format=fmt, inputs=inputs or [str(dataset.voc_dir)], output="/o",
                         classes="dgo")
  assert declared.declared_classes(registry.options_of(config)) is None
