"""Unit tests of the pure modules: sharding, paths, label_map, boxes, images, protos/od_api."""
from __future__ import annotations

import collections
import hashlib
import io
import json
import math
import os
import re
import string

import pytest
from conftest import run_python
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from beam_tfrecord.plan import naming, shard_plan
from beam_tfrecord.prepare import label_map, splitting
from beam_tfrecord.records import boxes, protos
from beam_tfrecord.records.model import (Box, ImageAnnotation, InputError,
                                         ObjectAnnotation)
from beam_tfrecord.schemas import od_api
from beam_tfrecord.storage import paths
from beam_tfrecord.write import images

# =============================================================================================
# sharding
# =============================================================================================

def test_parse_split_fractions_valid():
  assert splitting.parse_split_fractions("train=0.8,val=0.2") == {"train": 0.8, "val": 0.2}
  parsed = splitting.parse_split_fractions(" train = 0.7 , val=0.2,test=0.1 ")
  assert list(parsed) == ["train", "val", "test"]  # order kept: it decides the hash ranges
  assert parsed == pytest.approx({"train": 0.7, "val": 0.2, "test": 0.1})
  assert splitting.parse_split_fractions("all=1") == {"all": 1.0}
  assert splitting.parse_split_fractions("train=1.0,val=0") == {"train": 1.0, "val": 0.0}


@pytest.mark.parametrize("text,match", [
    ("train", "NAME=FRACTION"),
    ("=0.5,val=0.5", "NAME=FRACTION"),
    ("train=0.8,", "NAME=FRACTION"),
    ("train=abc,val=0.5", "bad fraction"),
    ("train=1.5,val=-0.5", "within"),
    ("train=nan", "within"),
    ("train=0.5,train=0.5", "twice"),
    ("train=0.5,val=0.4", "sum to 1"),
    ("train=0.6,val=0.6", "sum to 1"),
    ("", "NAME=FRACTION"),
])
def test_parse_split_fractions_errors(text, match):
  with pytest.raises(ValueError, match=match):
    splitting.parse_split_fractions(text)


@pytest.mark.parametrize("text", ["../escape=1.0", "a/b=1.0"])
def test_parse_split_fractions_rejects_names_that_are_not_file_names(text):
  with pytest.raises(ValueError):
    splitting.parse_split_fractions(text)


def test_hash_unit_range_and_stability():
  values = [splitting.hash_unit(f"img_{i}.jpg") for i in range(1000)]
  assert all(0.0 <= v < 1.0 for v in values)
  # defined by the key's SHA-256, so the same on every machine and Python process
  digest = hashlib.sha256("grå.jpg".encode("utf-8")).digest()
  assert splitting.hash_unit("grå.jpg") == int.from_bytes(digest[:8], "big") / 2.0**64


def test_split_for_key_close_to_fractions_on_10k_keys():
  fractions = {"train": 0.8, "val": 0.1, "test": 0.1}
  keys = [f"images/{i:06d}.jpg" for i in range(10_000)]
  counts = collections.Counter(splitting.split_for_key(k, fractions) for k in keys)
  assert set(counts) == set(fractions)
  for name, fraction in fractions.items():
    sigma = math.sqrt(fraction * (1 - fraction) / len(keys))
    assert abs(counts[name] / len(keys) - fraction) < 4 * sigma, counts
  # deterministic: same answer again, and independent of the order keys are seen in
  assert [splitting.split_for_key(k, fractions) for k in reversed(keys)] == \
      [splitting.split_for_key(k, fractions) for k in keys][::-1]


def test_split_for_key_degenerate_fractions():
  keys = [str(i) for i in range(500)]
  assert {splitting.split_for_key(k, {"train": 1.0, "val": 0.0}) for k in keys} == {"train"}
  assert {splitting.split_for_key(k, {"train": 0.0, "val": 1.0}) for k in keys} == {"val"}


def test_split_for_key_same_in_other_processes():
  """Split assignment may not depend on Python's per-process hash seed."""
  keys = [f"k{i}" for i in range(300)] + ["grå.jpg", "a/b/c.png"]
  fractions = {"train": 0.6, "val": 0.3, "test": 0.1}
  here = [splitting.split_for_key(k, fractions) for k in keys]
  code = ("import json, sys; from beam_tfrecord.prepare import splitting; "
          "keys, fr = json.loads(sys.argv[1]); "
          "print(json.dumps([splitting.split_for_key(k, fr) for k in keys]))")
  for seed in ("0", "1234"):
    result = run_python(["-c", code, json.dumps([keys, fractions])], PYTHONHASHSEED=seed)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == here


@pytest.mark.parametrize("count,total,num_shards,size_mb,expected", [
    (0, 0, None, None, 0),
    (0, 10**9, 4, None, 0),
    (10, 1000, 4, None, 4),
    (3, 1000, 8, None, 3),                           # never more shards than examples
    (10, 0, None, None, 1),                          # never fewer than one
    (100, 10 * 2**20, None, 1.0, 10),
    (100, 10 * 2**20 + 1, None, 1.0, 11),            # ceil
    (100, 10 * 2**20, None, 3.0, 4),
    (5, 10 * 2**20, None, 1.0, 5),
    (1000, 150 * 2**20, None, None, 1),              # default 150 MB
    (1000, 150 * 2**20 + 1, None, None, 2),
])
def test_num_shards_for(count, total, num_shards, size_mb, expected):
  assert shard_plan.num_shards_for(count, total, num_shards, size_mb) == expected


def test_num_shards_for_tiny_shard_size():
  assert shard_plan.num_shards_for(5, 1000, None, 1e-7) == 5


@settings(max_examples=60, deadline=None)
@given(keys=st.sets(st.text(alphabet=string.ascii_letters + "/._-é", min_size=1, max_size=12),
                    min_size=1, max_size=200),
       num_shards=st.integers(min_value=1, max_value=40))
def test_plan_split_balance_within_one(keys, num_shards):
  plan = shard_plan.plan_split("train", [(k, 10) for k in keys], num_shards, None)
  assert plan.num_shards == min(num_shards, len(keys))
  assert plan.count == len(keys) and plan.total_bytes == 10 * len(keys)
  shard_of = {k: plan.shard_of(k) for k in keys}
  counts = collections.Counter(shard_of.values())
  assert sorted(counts) == list(range(plan.num_shards)), "a shard is empty or out of range"
  assert max(counts.values()) - min(counts.values()) <= 1
  assert [counts[i] for i in range(plan.num_shards)] == \
      shard_plan.shard_lengths(len(keys), plan.num_shards)
  # shards are contiguous ranges of the sorted keys
  ordered = sorted(keys)
  assert [shard_of[k] for k in ordered] == sorted(shard_of[k] for k in ordered)


def test_plan_split_by_size_and_duplicates():
  items = [(f"k{i:03d}", 2**20) for i in range(30)] + [("k000", 2**20)]
  plan = shard_plan.plan_split("val", items, None, 8.0)
  assert plan.count == 30
  assert plan.total_bytes == 31 * 2**20
  assert plan.num_shards == math.ceil(31 / 8)
  assert plan.shard_of("k000") == 0 and plan.shard_of("k029") == plan.num_shards - 1
  assert plan.shard_of("a-key-before-all") == 0


def test_shard_name():
  assert naming.shard_name("train", 3, 8) == "train-00003-of-00008.tfrecord"
  assert naming.shard_name("val", 0, 1) == "val-00000-of-00001.tfrecord"
  assert naming.shard_name("test", 12, 100, suffix=".rec") == "test-00012-of-00100.rec"
  names = [naming.shard_name("train", i, 1200) for i in range(1200)]
  assert names == sorted(names)  # lexical order is shard order
  assert all(re.fullmatch(r"train-\d{5}-of-01200\.tfrecord", n) for n in names)


# =============================================================================================
# paths
# =============================================================================================

@pytest.mark.parametrize("name,expected", [
    ("a.jpg", "a.jpg"),
    ("sub/dir/a.jpg", "sub/dir/a.jpg"),
    ("sub\\dir\\a.jpg", "sub/dir/a.jpg"),
    ("./sub/./a.jpg", "sub/a.jpg"),
    ("sub/../a.jpg", "a.jpg"),
    ("grå ü.jpg", "grå ü.jpg"),
])
def test_clean_name_accepts_relative_names(name, expected):
  assert paths.clean_name(name) == expected


@pytest.mark.parametrize("name,reason", [
    ("../a.jpg", "path_traversal"),
    ("..", "path_traversal"),
    ("sub/../../a.jpg", "path_traversal"),
    ("..\\..\\windows\\a.jpg", "path_traversal"),
    ("/etc/passwd", "absolute_path"),
    ("\\\\server\\share\\a.jpg", "absolute_path"),
    ("C:/images/a.jpg", "absolute_path"),
    ("c:\\images\\a.jpg", "absolute_path"),
    ("gs://bucket/a.jpg", "absolute_path"),
    ("s3://bucket/a.jpg", "absolute_path"),
    ("file:///etc/passwd", "absolute_path"),
    ("a\x00.jpg", "unsafe_path"),
    ("", "missing_filename"),
    ("   ", "missing_filename"),
    (None, "missing_filename"),
    (17, "missing_filename"),
])
def test_clean_name_rejects_escapes(name, reason):
  with pytest.raises(InputError) as e:
    paths.clean_name(name)
  assert e.value.reason == reason


def test_resolve_inside_root(tmp_path):
  (tmp_path / "sub").mkdir()
  (tmp_path / "sub" / "a.jpg").write_bytes(b"x")
  assert paths.resolve(str(tmp_path), "sub/a.jpg") == ("sub/a.jpg", str(tmp_path / "sub/a.jpg"))
  assert paths.resolve("gs://bucket/images", "sub/a.jpg") == \
      ("sub/a.jpg", "gs://bucket/images/sub/a.jpg")
  with pytest.raises(InputError) as e:
    paths.resolve("gs://bucket/images", "../other/a.jpg")
  assert e.value.reason == "path_traversal"


def test_resolve_rejects_symlink_pointing_outside(tmp_path):
  root, outside = tmp_path / "root", tmp_path / "outside"
  root.mkdir()
  outside.mkdir()
  (outside / "secret.jpg").write_bytes(b"secret")
  os.symlink(outside / "secret.jpg", root / "link.jpg")
  os.symlink(outside, root / "linkdir")
  for name in ("link.jpg", "linkdir/secret.jpg"):
    with pytest.raises(InputError) as e:
      paths.resolve(str(root), name)
    assert e.value.reason == "symlink_escape" and e.value.stage == "locate"


def test_resolve_allows_symlinks_inside_root_and_a_symlinked_root(tmp_path):
  real = tmp_path / "real"
  (real / "a").mkdir(parents=True)
  (real / "a" / "x.jpg").write_bytes(b"x")
  os.symlink(real / "a" / "x.jpg", real / "alias.jpg")
  os.symlink(real, tmp_path / "rootlink")
  assert paths.resolve(str(real), "alias.jpg")[0] == "alias.jpg"
  assert paths.resolve(str(tmp_path / "rootlink"), "a/x.jpg")[0] == "a/x.jpg"


def test_resolve_allow_absolute(tmp_path):
  assert paths.resolve(str(tmp_path), "gs://b/x.jpg", allow_absolute=True) == \
      ("gs://b/x.jpg", "gs://b/x.jpg")
  assert paths.resolve(str(tmp_path), "/data/x.jpg", allow_absolute=True) == \
      ("/data/x.jpg", "/data/x.jpg")
  with pytest.raises(InputError):
    paths.resolve(str(tmp_path), "/data/x.jpg")
  with pytest.raises(InputError):  # traversal stays forbidden even with allow_absolute
    paths.resolve(str(tmp_path), "../x.jpg", allow_absolute=True)


def test_file_size(tmp_path):
  (tmp_path / "a.jpg").write_bytes(b"12345")
  assert paths.file_size(str(tmp_path / "a.jpg")) == 5
  for uri in (str(tmp_path / "missing.jpg"), str(tmp_path)):
    with pytest.raises(InputError) as e:
      paths.file_size(uri)
    assert e.value.reason == "missing_image"


@pytest.mark.parametrize("text,expected", [
    ("train=data/a.json", ("train", "data/a.json")),
    ("val2017=/abs/a.json", ("val2017", "/abs/a.json")),
    ("data/a.json", (None, "data/a.json")),
    ("gs://bucket/a=b.json", (None, "gs://bucket/a=b.json")),
    ("my split=a.json", (None, "my split=a.json")),
])
def test_parse_assignment(text, expected):
  assert paths.parse_assignment(text) == expected


# =============================================================================================
# label_map
# =============================================================================================

NAMES = {"person": 1, "cat": 17, "dog": 18, "café": 5, "猫": 40, "o'brien": 2, 'say "hi"': 3,
         "back\\slash": 4, "toothbrush": 90}


def test_label_map_round_trip_with_non_ascii(tmp_path):
  text = label_map.to_text(NAMES)
  assert label_map.parse(text) == NAMES
  path = tmp_path / "label_map.pbtxt"
  path.write_bytes(text.encode("utf-8"))
  assert label_map.read(str(path)) == NAMES
  assert "café" in text and "猫" in text  # written as UTF-8, readable by people


def test_label_map_text_ordered_by_id():
  ids = [int(i) for i in re.findall(r"\bid: (\d+)", label_map.to_text(NAMES))]
  assert ids == sorted(NAMES.values())


def test_label_map_parse_od_api_style():
  text = """
  # a comment
  item {
    name: 'cat'
    id: 17
    display_name: 'Cat'
  }
  item { id: 1 name: "person" }
  item { name: "cat" id: 17 }
  """
  assert label_map.parse(text) == {"cat": 17, "person": 1}


@pytest.mark.parametrize("text,match", [
    ("item { name: 'cat' id: 1 ", "pbtxt"),
    ("item { name: 'cat' idd: 1 }", "pbtxt"),
    ("item { id: 1 }", "no name"),
    ("item { name: 'cat' id: 0 }", ">= 1"),
    ("item { name: 'cat' id: -3 }", ">= 1"),
    ("item { name: 'cat' }", ">= 1"),
    ("item { name: 'cat' id: 1 } item { name: 'cat' id: 2 }", "two ids"),
    ("", "no items"),
])
def test_label_map_parse_errors(text, match):
  with pytest.raises(ValueError, match=match):
    label_map.parse(text)


def test_label_map_from_names():
  assert label_map.from_names(["dog", "cat", "dog", "person", "cat"]) == \
      {"cat": 1, "dog": 2, "person": 3}
  assert label_map.from_names([]) == {}


# =============================================================================================
# boxes
# =============================================================================================

def _obj(x0, y0, x1, y1):
  return ObjectAnnotation(label="cat", box=Box(x0, y0, x1, y1))


def test_normalize_inside():
  n = boxes.normalize(_obj(32, 24, 160, 240), width=320, height=240)
  assert (n.xmin, n.ymin, n.xmax, n.ymax, n.clipped) == (0.1, 0.1, 0.5, 1.0, False)
  assert n.obj.label == "cat"


@settings(max_examples=200, deadline=None)
@given(w=st.integers(1, 5000), h=st.integers(1, 5000), data=st.data())
def test_normalize_matches_division(w, h, data):
  x0 = data.draw(st.floats(0, w - 0.01, allow_subnormal=False))
  x1 = data.draw(st.floats(x0 + 0.005, w))
  y0 = data.draw(st.floats(0, h - 0.01, allow_subnormal=False))
  y1 = data.draw(st.floats(y0 + 0.005, h))
  n = boxes.normalize(_obj(x0, y0, x1, y1), w, h, "error")
  assert (n.xmin, n.ymin, n.xmax, n.ymax) == (x0 / w, y0 / h, x1 / w, y1 / h)
  assert 0.0 <= n.xmin < n.xmax <= 1.0 and 0.0 <= n.ymin < n.ymax <= 1.0
  assert not n.clipped


def test_normalize_clips_partly_outside():
  n = boxes.normalize(_obj(-10, 20, 120, 90), width=100, height=80)
  assert (n.xmin, n.ymin, n.xmax, n.ymax, n.clipped) == (0.0, 0.25, 1.0, 1.0, True)
  for policy in ("drop", "error"):
    with pytest.raises(InputError) as e:
      boxes.normalize(_obj(-10, 20, 120, 90), 100, 80, policy)
    assert e.value.reason == "bbox_partly_outside" and e.value.stage == "validate"


@pytest.mark.parametrize("box,reason", [
    ((float("nan"), 0, 10, 10), "bbox_not_finite"),
    ((0, 0, float("inf"), 10), "bbox_not_finite"),
    ((10, 0, 10, 10), "bbox_empty"),
    ((0, 10, 10, 5), "bbox_empty"),
    ((100, 0, 150, 10), "bbox_outside"),
    ((-20, -20, 0, 0), "bbox_outside"),
    ((0, 80, 10, 90), "bbox_outside"),
])
@pytest.mark.parametrize("policy", boxes.BBOX_POLICIES)
def test_normalize_always_rejected(box, reason, policy):
  with pytest.raises(InputError) as e:
    boxes.normalize(_obj(*box), 100, 80, policy)
  assert e.value.reason == reason


# =============================================================================================
# images
# =============================================================================================

def _encode(fmt, mode="RGB", size=(33, 21), **save_options):
  bands = len(Image.new(mode, (1, 1)).getbands())
  image = Image.new(mode, size, (90, 20, 200, 255)[:bands] if bands > 1 else 7)
  if size[0] > 2:  # some structure, so that a cut file is really missing data
    image.paste((10, 250, 60, 128)[:bands] if bands > 1 else 1, (1, 1, size[0] // 2, size[1] // 2))
  out = io.BytesIO()
  image.save(out, format=fmt, **save_options)
  return out.getvalue()


@pytest.mark.parametrize("fmt,name", [("JPEG", "jpeg"), ("PNG", "png"), ("GIF", "gif"),
                                      ("BMP", "bmp"), ("TIFF", "tiff"), ("WEBP", "webp")])
def test_sniff_format_from_bytes(fmt, name):
  assert images.sniff_format(_encode(fmt)) == name


def test_sniff_format_unknown():
  assert images.sniff_format(b"") is None
  assert images.sniff_format(b"hello world, not an image") is None
  assert images.sniff_format(b"RIFF\x00\x00\x00\x00WAVE") is None


def test_probe_png_named_jpg(tmp_path):
  path = tmp_path / "photo.jpg"
  path.write_bytes(_encode("PNG", size=(40, 30)))
  info = images.probe(path.read_bytes())
  assert (info.format, info.width, info.height, info.channels) == ("png", 40, 30, 3)


@pytest.mark.parametrize("fmt,mode,extra", [
    ("JPEG", "L", {}), ("JPEG", "RGB", {}), ("JPEG", "CMYK", {}), ("PNG", "RGB", {}),
    ("PNG", "RGBA", {}), ("PNG", "LA", {}), ("PNG", "L", {}), ("PNG", "1", {}),
    ("PNG", "I;16", {}), ("PNG", "P", {}), ("PNG", "P", {"transparency": 0}),
])
def test_probe_size_and_channels_agree_with_tensorflow(fmt, mode, extra):
  """image/channels is what tf.io.decode_image(channels=0) returns for the bytes."""
  tf = pytest.importorskip("tensorflow")
  data = _encode(fmt, mode=mode, size=(17, 9), **extra)
  info = images.probe(data)
  decoded = tf.io.decode_image(data, channels=0, expand_animations=False)
  assert (info.format, info.width, info.height) == (fmt.lower(), 17, 9)
  assert tuple(decoded.shape) == (9, 17, info.channels)


def test_probe_pixel_limit():
  data = _encode("PNG", size=(100, 50))
  assert images.probe(data, max_pixels=5000).width == 100
  with pytest.raises(InputError) as e:
    images.probe(data, max_pixels=4999)
  assert e.value.reason == "decompression_bomb"


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_probe_rejects_truncated_files(fmt):
  data = _encode(fmt, size=(64, 48))
  with pytest.raises(InputError) as e:
    images.probe(data[: len(data) * 2 // 3])
  assert e.value.stage == "decode" and e.value.reason in ("truncated_image", "corrupt_image")


@pytest.mark.parametrize("data,reason", [
    (b"", "empty_file"),
    (b"not an image at all", "unknown_format"),
    (b"\x89PNG\r\n\x1a\n" + b"\x00" * 20, "corrupt_image"),
    (b"\xff\xd8\xff\xe0garbage", "corrupt_image"),
])
def test_probe_errors(data, reason):
  with pytest.raises(InputError) as e:
    images.probe(data)
  assert e.value.reason == reason and e.value.stage == "decode"


def test_prepare_passthrough_and_conversion():
  jpeg, png = _encode("JPEG"), _encode("PNG")
  assert images.prepare(jpeg).encoded == jpeg
  assert images.prepare(png).encoded == png
  for fmt in ("GIF", "BMP", "TIFF", "WEBP"):
    prepared = images.prepare(_encode(fmt))
    assert prepared.info.format == "png" and prepared.encoded.startswith(b"\x89PNG")
    assert (prepared.info.width, prepared.info.height) == (33, 21)


# =============================================================================================
# protos + schemas/od_api: byte-identical to TensorFlow's own tf.train.Example
# =============================================================================================

def _annotation(objects, key="dir/grå.png", source_id="12345"):
  return ImageAnnotation(key=key, uri="/x/" + key, source_id=source_id, source="ann.json",
                         objects=tuple(objects))


OBJECTS = [
    ObjectAnnotation("cat", Box(4, 2, 20, 16), is_crowd=True, area=100.5),
    ObjectAnnotation("chat noir é", Box(0, 0, 40, 30), area=1200.0),
    ObjectAnnotation("dog", Box(10.5, 3.25, 11.5, 4.75), area=1.5),
]
VOC_OBJECTS = [
    ObjectAnnotation("cat", Box(4, 2, 20, 16), area=10.0, difficult=True, truncated=False,
                     pose="Left"),
    ObjectAnnotation("dog", Box(1, 1, 2, 2), area=1.0),  # attributes absent -> defaults
]
IDS = {"cat": 17, "chat noir é": 3, "dog": 18}


def _tf_example(tf, ann, data, width, height, channels, fmt, objects):
  """The same Example built with TensorFlow's classes from the input values."""
  def b(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

  def f(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))

  def i(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  feature = {
      "image/encoded": b([data]),
      "image/format": b([fmt.encode()]),
      "image/height": i([height]),
      "image/width": i([width]),
      "image/channels": i([channels]),
      "image/filename": b([ann.key.encode("utf-8")]),
      "image/source_id": b([ann.source_id.encode("utf-8")]),
      "image/key/sha256": b([hashlib.sha256(data).hexdigest().encode()]),
      "image/object/bbox/xmin": f([o.box.xmin / width for o in objects]),
      "image/object/bbox/xmax": f([o.box.xmax / width for o in objects]),
      "image/object/bbox/ymin": f([o.box.ymin / height for o in objects]),
      "image/object/bbox/ymax": f([o.box.ymax / height for o in objects]),
      "image/object/class/text": b([o.label.encode("utf-8") for o in objects]),
      "image/object/class/label": i([IDS[o.label] for o in objects]),
      "image/object/is_crowd": i([int(o.is_crowd) for o in objects]),
      "image/object/area": f([o.area for o in objects]),
  }
  if any(o.difficult is not None for o in objects):
    feature["image/object/difficult"] = i([int(bool(o.difficult)) for o in objects])
    feature["image/object/truncated"] = i([int(bool(o.truncated)) for o in objects])
    feature["image/object/view"] = b([(o.pose or "Unspecified").encode() for o in objects])
  return tf.train.Example(features=tf.train.Features(feature=feature))


@pytest.mark.parametrize("objects,fmt", [(OBJECTS, "PNG"), (VOC_OBJECTS, "JPEG"), ([], "PNG")],
                         ids=["coco-like", "voc-like", "no-objects"])
def test_od_api_example_is_byte_identical_to_tensorflow(objects, fmt):
  tf = pytest.importorskip("tensorflow")
  data = _encode(fmt, size=(40, 30))
  ann = _annotation(objects)
  encoded = od_api.encode(ann, images.prepare(data), IDS)
  assert encoded.errors == [] and encoded.labels == [o.label for o in objects]
  expected = _tf_example(tf, ann, data, 40, 30, 3, fmt.lower(), objects)
  assert encoded.serialized == expected.SerializeToString(deterministic=True)
  assert tf.train.Example.FromString(encoded.serialized) == expected


def test_protos_example_matches_tensorflow_for_every_value_kind():
  tf = pytest.importorskip("tensorflow")
  values = {"s": [b"", b"\x00\xff", "é".encode()], "f": [0.0, -1.5, 3.4e38, 1e-45],
            "i": [0, -1, 2**63 - 1, -(2**63)], "empty": []}
  ours = protos.Example(features=protos.Features(feature={
      "s": protos.Feature(bytes_list={"value": values["s"]}),
      "f": protos.Feature(float_list={"value": values["f"]}),
      "i": protos.Feature(int64_list={"value": values["i"]}),
      "empty": protos.Feature(int64_list={"value": []}),
  }))
  theirs = tf.train.Example(features=tf.train.Features(feature={
      "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=values["s"])),
      "f": tf.train.Feature(float_list=tf.train.FloatList(value=values["f"])),
      "i": tf.train.Feature(int64_list=tf.train.Int64List(value=values["i"])),
      "empty": tf.train.Feature(int64_list=tf.train.Int64List(value=[])),
  }))
  assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(deterministic=True)


def test_od_api_default_area_and_rejected_objects():
  tf = pytest.importorskip("tensorflow")
  data = _encode("JPEG", size=(100, 80))
  objects = [ObjectAnnotation("cat", Box(10, 20, 30.5, 60)),              # area computed
             ObjectAnnotation("cat", Box(90, 70, 130, 100)),              # clipped
             ObjectAnnotation("unknown", Box(1, 1, 2, 2)),                # not in the label map
             ObjectAnnotation("dog", Box(5, 5, 5, 9))]                    # empty box
  encoded = od_api.encode(_annotation(objects), images.prepare(data), IDS)
  assert encoded.labels == ["cat", "cat"] and encoded.clipped == 1
  assert sorted(e.reason for e in encoded.errors) == ["bbox_empty", "unknown_class"]
  ex = tf.train.Example.FromString(encoded.serialized).features.feature
  assert list(ex["image/object/area"].float_list.value) == pytest.approx(
      [20.5 * 40, 10 * 10], rel=1e-6)
  assert list(ex["image/object/bbox/xmax"].float_list.value) == pytest.approx([0.305, 1.0])
  with pytest.raises(InputError):
    od_api.encode(_annotation(objects[1:2]), images.prepare(data), IDS, bbox_policy="error")


def test_od_api_bytes_do_not_depend_on_the_hash_seed():
  """Features is a protobuf map: its order must not follow PYTHONHASHSEED (DESIGN.md)."""
  code = """
import hashlib, io, sys
from PIL import Image
from beam_tfrecord.write import images
from beam_tfrecord.records.model import Box, ImageAnnotation, ObjectAnnotation
from beam_tfrecord.schemas import od_api
out = io.BytesIO(); Image.new("RGB", (40, 30), (1, 2, 3)).save(out, format="PNG")
ann = ImageAnnotation(key="a.png", uri="a.png", source_id="1", source="s", objects=(
    ObjectAnnotation("cat", Box(1, 2, 3, 4), difficult=True, pose="Left"),
    ObjectAnnotation("dog", Box(5, 6, 7, 8))))
enc = od_api.encode(ann, images.prepare(out.getvalue()), {"cat": 1, "dog": 2})
print(hashlib.sha256(enc.serialized).hexdigest())
"""
  digests = set()
  for seed in ("0", "1", "987654"):
    result = run_python(["-c", code], PYTHONHASHSEED=seed)
    assert result.returncode == 0, result.stderr
    digests.add(result.stdout.strip())
  assert len(digests) == 1


def test_string_int_label_map_message():
  message = protos.StringIntLabelMap()
  message.item.add(name="cat", id=17, display_name="Cat")
  again = protos.StringIntLabelMap.FromString(message.SerializeToString())
  assert [(i.name, i.id, i.display_name) for i in again.item] == [("cat", 17, "Cat")]


def test_lost_records_compares_plan_with_written_and_rejected():
  from beam_tfrecord.finalize.manifest import lost_records as _lost_records
  from beam_tfrecord.plan.shard_plan import plan_split
  plans = {"train": plan_split("train", [(f"k{i}", 1) for i in range(5)], 2, None),
           "val": plan_split("val", [("v", 1)], 1, None)}
  stats = [{"split": "train", "examples": 2, "rejected": 1}, {"split": "train", "examples": 2,
                                                              "rejected": 0},
           {"split": "val", "examples": 1, "rejected": 0}]
  assert _lost_records(plans, stats) == ""
  stats[0]["examples"] = 1  # the runner dropped one record of train
  assert _lost_records(plans, stats) == "split train: 5 planned, 4 written or rejected"
  assert "split val" in _lost_records(plans, stats[:2])


def test_output_with_glob_characters_is_refused_up_front():
  from beam_tfrecord.config import ConvertConfig
  with pytest.raises(ValueError, match="pattern"):
    ConvertConfig(format="coco", inputs=["a.json"], output="/tmp/out[1]").validate()


def test_resolve_matches_realpath_with_and_without_symlinks(tmp_path):
  """resolve walks only the key's own components when none is a symlink; wherever one is, or
  the file is missing, realpath decides, as before."""
  from beam_tfrecord.records.model import InputError
  from beam_tfrecord.storage import paths
  root, outside = tmp_path / "root", tmp_path / "outside"
  (root / "sub").mkdir(parents=True)
  outside.mkdir()
  (root / "sub" / "a.jpg").write_bytes(b"x")
  (outside / "b.jpg").write_bytes(b"y")
  (root / "inner").symlink_to(root / "sub")      # a link that stays inside the root
  (root / "away").symlink_to(outside)            # a link that leaves it
  assert paths.resolve(str(root), "sub/a.jpg") == ("sub/a.jpg", str(root / "sub" / "a.jpg"))
  assert paths.resolve(str(root), "inner/a.jpg") == ("inner/a.jpg", str(root / "inner" / "a.jpg"))
  assert paths.resolve(str(root), "sub/missing.jpg")[0] == "sub/missing.jpg"  # Locate reports
  # the size comes with the lstat of a plain path; Locate stats the others
  assert paths.resolve_sized(str(root), "sub/a.jpg")[2] == 1
  assert paths.resolve_sized(str(root), "inner/a.jpg")[2] is None
  assert paths.resolve_sized(str(root), "sub")[2] is None  # a directory: Locate rejects it
  assert paths.resolve_sized(str(root), "sub/missing.jpg")[2] is None
  with pytest.raises(InputError) as e:
    paths.resolve(str(root), "away/b.jpg")
  assert e.value.reason == "symlink_escape"
  assert paths.resolve(str(root), "away/b.jpg", follow_symlinks=True)[1] == str(root / "away/b.jpg")
  # a root that is itself a link is resolved once, and files under it are inside it
  (tmp_path / "link_root").symlink_to(root)
  assert paths.resolve(str(tmp_path / "link_root"), "sub/a.jpg")[0] == "sub/a.jpg"
