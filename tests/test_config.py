"""config.py: how --images pairs with --input (ConvertConfig.input_image_roots), and the
conversions that depend on it: two COCO datasets with one unprefixed --images each keep their
own pixels; an --images that would be ignored or would override another is refused."""
from __future__ import annotations

import hashlib
import os
import re

import bad_data as bd
import pytest

from beam_tfrecord.config import ConvertConfig, resolve
from beam_tfrecord.errors import EXIT_USAGE, UsageError


def config(inputs, images, fmt="coco") -> ConvertConfig:
  return ConvertConfig(format=fmt, inputs=list(inputs), images=list(images), output="/o")


def test_one_unprefixed_images_is_every_inputs_root():
  assert config(["train=a.json", "val=b.json"], ["imgs"]).input_image_roots() == [
      ("train", "a.json", "imgs"), ("val", "b.json", "imgs")]


def test_unprefixed_images_pair_with_inputs_in_order():
  assert config(["train=a/x.json", "val=b/y.json"], ["a/img", "b/img"]).file_inputs() == [
      ("train", "a/x.json", "a/img"), ("val", "b/y.json", "b/img")]
  # two inputs of one split, each with its own images: what SPLIT= cannot say
  assert config(["train=a.json", "train=b.json"], ["A", "B"]).file_inputs() == [
      ("train", "a.json", "A"), ("train", "b.json", "B")]


def test_split_images_and_the_file_directory_default():
  assert config(["train=d/a.json", "val=e/b.json"], ["train=T"]).file_inputs() == [
      ("train", "d/a.json", "T"), ("val", "e/b.json", "e")]


@pytest.mark.parametrize("inputs, images, words", [
    (["a.json", "b.json", "c.json"], ["A", "B"], "2 --images without SPLIT= for 3 --input"),
    (["a.json"], ["A", "B"], "2 --images without SPLIT= for 1 --input"),
    (["train=a.json", "val=b.json"], ["A", "B", "train=T"], "not both"),
    (["train=a.json", "train=b.json"], ["train=A", "train=B"], "given twice"),
    (["train=a.json"], ["val=V"], "no --input has the split val"),
    (["a.json"], ["train=T"], "no --input has the split train"),
])
def test_images_that_would_be_overridden_or_ignored_are_refused(inputs, images, words):
  with pytest.raises(ValueError, match=words):
    config(inputs, images).input_image_roots()
  with pytest.raises(UsageError, match=words):  # before anything runs
    resolve(config(inputs, images))


@pytest.mark.parametrize("fmt", ["yolo", "folders"])
def test_images_refused_where_the_format_finds_its_images(tmp_path, fmt):
  with pytest.raises(UsageError, match=f"--format {fmt} finds its images itself"):
    resolve(ConvertConfig(format=fmt, inputs=[str(tmp_path)], images=[str(tmp_path)],
                          output=str(tmp_path / "out")))


def test_voc_with_one_input_takes_one_images():
  with pytest.raises(ValueError, match="2 --images without SPLIT= for 1 --input"):
    config(["VOC"], ["A", "B"], fmt="voc").input_image_roots()
  assert config(["train=v1", "val=v2"], ["A", "B"], fmt="voc").input_image_roots() == [
      ("train", "v1", "A"), ("val", "v2", "B")]


# --- conversions ---------------------------------------------------------------------------

def _coco(root: str, tag: str, color) -> dict:
  """A COCO export as tools write them: images/img_00.jpg... (names shared with the other
  dataset, pixels not) plus one name of its own; one box each."""
  images = os.path.join(root, tag, "images")
  coco = bd.Coco(images, [(1, "cat"), (2, "dog")])
  names = [f"img_{i:02d}.jpg" for i in range(3)] + [f"{tag}_only.jpg"]
  for i, name in enumerate(names):
    coco.image(i + 1, name, bd.jpeg((60 + 4 * i, 40), color=color), 60 + 4 * i, 40)
    coco.ann(i + 1, 1 + i % 2, [4, 4, 20, 16])
  return {"json": coco.write(os.path.join(root, tag, "instances.json")), "images": images,
          "names": names}


def _sha(data: bytes) -> str:
  return hashlib.sha256(data).hexdigest()


@pytest.mark.e2e
def test_two_coco_inputs_keep_their_own_images(tmp_path, capsys):
  a = _coco(str(tmp_path), "a", (200, 30, 30))
  b = _coco(str(tmp_path), "b", (30, 30, 200))
  run = bd.convert(["--format", "coco", "--input", f"train={a['json']}", "--input",
                    f"val={b['json']}", "--images", a["images"], "--images", b["images"],
                    "--output", str(tmp_path / "out")], capsys)
  assert run.code == 0, run.stderr
  assert run.errors == []
  for split, ds in (("train", a), ("val", b)):
    written = {e["filename"]: _sha(e["image/encoded"]) for e in run.examples
               if e["split"] == split}
    with_source = {}
    for name in ds["names"]:
      with open(os.path.join(ds["images"], name), "rb") as f:
        with_source[name] = _sha(f.read())
    assert written == with_source, split


@pytest.mark.e2e
def test_images_count_mismatch_is_one_line_and_exit_2(tmp_path, capsys):
  a = _coco(str(tmp_path), "a", (200, 30, 30))
  b = _coco(str(tmp_path), "b", (30, 30, 200))
  out = tmp_path / "out"
  run = bd.convert(["--format", "coco", "--input", f"train={a['json']}", "--input",
                    f"val={b['json']}", "--images", a["images"], "--images", b["images"],
                    "--images", a["images"], "--output", str(out)], capsys)
  assert run.code == EXIT_USAGE
  assert run.stderr.splitlines() == [
      "beam-tfrecord: error: 3 --images without SPLIT= for 2 --input: give one for all "
      "inputs, one per --input (paired in order), or SPLIT=DIR"]
  assert not out.exists()


@pytest.mark.parametrize("settings, words", [
    ({"file_format": "parquet"}, "--file-format must be one of tfrecord, array_record"),
    ({"file_format": "array_record", "sink": "beam"}, "needs --sink shards"),
    ({"index_files": True, "file_format": "array_record"}, "--index-files indexes TFRecord"),
    ({"index_files": True, "sink": "beam"}, "--index-files indexes TFRecord"),
])
def test_record_file_settings_that_cannot_be_written_are_refused(settings, words):
  with pytest.raises(ValueError, match=re.escape(words)):
    ConvertConfig(format="coco", inputs=["a.json"], output="/o", **settings).validate()


def test_array_record_names_its_shards_and_tfds_files():
  """The default names end in .array_record; --layout tfds names them as TFDS does."""
  flat = resolve(ConvertConfig(format="coco", inputs=["a.json"], output="/o",
                               file_format="array_record"))
  assert flat.shard_name_template == "{split}-{index:05d}-of-{num_shards:05d}.array_record"
  tfds = resolve(ConvertConfig(format="coco", inputs=["a.json"], output="/o", layout="tfds",
                               dataset_name="boxes", file_format="array_record"))
  assert tfds.shard_name_template.format(split="train", index=0, num_shards=2) == \
      "boxes-train.array_record-00000-of-00002"
