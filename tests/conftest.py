"""Shared fixtures and helpers for the beam-tfrecord tests.

Test data is generated here, never downloaded: `beam_tfrecord.sample` draws real JPEG and PNG
images with Pillow (one PNG named .jpg, some images without boxes) and writes the same
annotations as COCO, Pascal VOC and TF OD CSV. Two extra images are added on top of it: a
grayscale JPEG with a non-ASCII file name and boxes touching the right/bottom edges, and an RGBA
PNG. Every expected value the tests compare against is computed from these inputs (the
SampleImage records, the image bytes, the annotation files), never written out by hand.

Pipeline runs are the slow part (a few seconds each), so a run that several tests read is built
once per test session by `shared.build(name, fn)`; with pytest-xdist the workers share it through
a file lock in the session's common temporary directory.

The test folders mirror the package: tests/sources/test_voc.py holds the tests of
beam_tfrecord/sources/voc.py (its parse functions and its conversions), tests/plan/test_naming.py
those of plan/naming.py, and so on; tests/cli/ holds the command line's, tests/deploy/ the
deployment wrappers' (Dataflow, cron) and tests/e2e/ the whole-conversion tests about the product
as a whole (end to end, output safety, bad inputs, determinism). Helper modules stay here at the
top level (importable from every folder: pytest puts this directory on sys.path for conftest.py).

Tests that run a Beam pipeline or a conversion subprocess, or take more than about a second, are
marked `e2e` (everything under e2e/ and deploy/ by pytest_collection_modifyitems below):
`pytest -m "not e2e"` runs the unit tests alone, `pytest -m e2e` the rest.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import fcntl
import hashlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from PIL import Image, ImageDraw

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
  sys.path.insert(0, str(REPO))

from beam_tfrecord import sample  # noqa: E402
from beam_tfrecord.records.model import (Box, ImageAnnotation,  # noqa: E402
                                         ObjectAnnotation)

PYTHON = sys.executable

# The TF Object Detection API keys (DESIGN.md "The default schema"), written out here on purpose
# rather than taken from the library or the manifest: a feature the writer drops or mistypes
# must make the tests fail.
BASE_FEATURES: Dict[str, Tuple[str, str]] = {
    "image/encoded": ("string", "fixed"),
    "image/format": ("string", "fixed"),
    "image/height": ("int64", "fixed"),
    "image/width": ("int64", "fixed"),
    "image/channels": ("int64", "fixed"),
    "image/filename": ("string", "fixed"),
    "image/source_id": ("string", "fixed"),
    "image/key/sha256": ("string", "fixed"),
    "image/object/bbox/xmin": ("float32", "var"),
    "image/object/bbox/xmax": ("float32", "var"),
    "image/object/bbox/ymin": ("float32", "var"),
    "image/object/bbox/ymax": ("float32", "var"),
    "image/object/class/text": ("string", "var"),
    "image/object/class/label": ("int64", "var"),
    "image/object/is_crowd": ("int64", "var"),
    "image/object/area": ("float32", "var"),
}
VOC_FEATURES: Dict[str, Tuple[str, str]] = {
    "image/object/difficult": ("int64", "var"),
    "image/object/truncated": ("int64", "var"),
    "image/object/view": ("string", "var"),
}
ALL_FEATURES = {**BASE_FEATURES, **VOC_FEATURES}

SHARD_RE = re.compile(r"^(?P<split>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.tfrecord$")


def subprocess_env(**extra: str) -> Dict[str, str]:
  env = dict(os.environ)
  env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
  env["TF_CPP_MIN_LOG_LEVEL"] = "2"
  env.update(extra)
  return env


def run_python(args: Sequence[str], timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
  """`python ARGS` in the repository root, with the project importable."""
  return subprocess.run([PYTHON, *map(str, args)], cwd=str(REPO), env=subprocess_env(**env),
                        capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------------------------------------
# The generated dataset
# ---------------------------------------------------------------------------------------------

def _extra_images(root: Path) -> List[sample.SampleImage]:
  """Images the sample lacks: grayscale, RGBA, a non-ASCII name, boxes on the image border."""
  images_dir = root / "images"
  gray = Image.new("L", (160, 120), 40)
  draw = ImageDraw.Draw(gray)
  draw.rectangle([0, 0, 40, 60], fill=200)
  draw.rectangle([101, 31, 159, 119], fill=120)
  gray.save(images_dir / "grå_0100.jpg", format="JPEG", quality=85)
  rgba = Image.new("RGBA", (100, 80), (10, 200, 30, 128))
  ImageDraw.Draw(rgba).rectangle([10, 20, 90, 70], fill=(250, 0, 0, 255))
  rgba.save(images_dir / "alpha_0101.png", format="PNG")
  return [
      sample.SampleImage("grå_0100.jpg", 160, 120, "jpeg",
                         [("person", 0.0, 0.0, 40.25, 60.5), ("cat", 100.75, 30.5, 160.0, 120.0)],
                         "train", 5000),
      sample.SampleImage("alpha_0101.png", 100, 80, "png",
                         [("dog", 10.5, 20.0, 90.0, 70.25), ("dog", 1.0, 1.0, 5.0, 5.0)],
                         "val", 5001),
  ]


@dataclasses.dataclass
class Dataset:
  """A generated dataset: images under root/images, annotations in three formats."""
  root: Path
  images: List[sample.SampleImage]

  @property
  def image_dir(self) -> Path:
    return self.root / "images"

  @property
  def voc_dir(self) -> Path:
    return self.root / "voc"

  def coco_file(self, split: str) -> Path:
    return self.root / f"instances_{split}.json"

  def csv_file(self, split: str) -> Path:
    return self.root / f"{split}_labels.csv"

  @property
  def splits(self) -> List[str]:
    return sorted({im.split for im in self.images})

  def by_name(self) -> Dict[str, sample.SampleImage]:
    return {im.file_name: im for im in self.images}

  def data(self, im: sample.SampleImage) -> bytes:
    return (self.image_dir / im.file_name).read_bytes()

  def class_names(self) -> List[str]:
    return sorted({box[0] for im in self.images for box in im.boxes})

  def sorted_name_ids(self) -> Dict[str, int]:
    """The documented default for VOC/CSV: sorted class names -> 1..N."""
    return {name: i for i, name in enumerate(self.class_names(), start=1)}

  def coco_category_ids(self) -> Dict[str, int]:
    """{name: id} as written in the COCO files' `categories` sections."""
    result: Dict[str, int] = {}
    for split in self.splits:
      doc = json.loads(self.coco_file(split).read_text(encoding="utf-8"))
      for cat in doc["categories"]:
        assert result.setdefault(cat["name"], cat["id"]) == cat["id"]
    return result

  def inputs(self, fmt: str) -> List[str]:
    """CLI arguments naming this dataset's annotations and image root in format `fmt`."""
    if fmt == "coco":
      args = [f"--input={s}={self.coco_file(s)}" for s in self.splits]
    elif fmt == "csv":
      args = [f"--input={s}={self.csv_file(s)}" for s in self.splits]
    elif fmt == "voc":
      args = [f"--input={self.voc_dir}"]
    else:
      raise ValueError(fmt)
    return args + [f"--images={self.image_dir}"]

  def file_inputs(self, fmt: str) -> List[str]:
    """ConvertConfig.inputs for coco/csv (SPLIT=path)."""
    path = self.coco_file if fmt == "coco" else self.csv_file
    return [f"{s}={path(s)}" for s in self.splits]


def make_dataset(root: Path, count: int = 25, seed: int = 0, extras: bool = True) -> Dataset:
  """Write images and COCO/VOC/CSV annotations under root (the sample's writers)."""
  root.mkdir(parents=True, exist_ok=True)
  images = sample.make_images(str(root), count, seed)
  if extras:
    images += _extra_images(root)
  for split in sorted({im.split for im in images}):
    sample.write_coco(str(root), images, split)
    sample.write_csv(str(root), images, split)
  sample.write_voc(str(root), images)
  ds = Dataset(root, images)
  for im in images:  # the generator's claims about its own files must hold
    data = ds.data(im)
    with Image.open(io.BytesIO(data)) as pil:
      assert pil.size == (im.width, im.height), im
      assert pil.format.lower() == im.format, im
  return ds


def _dataset_to_json(ds: Dataset) -> str:
  return json.dumps({"root": str(ds.root), "images": [dataclasses.asdict(im) for im in ds.images]},
                    ensure_ascii=False)


def _dataset_from_json(text: str) -> Dataset:
  doc = json.loads(text)
  images = [sample.SampleImage(**{**im, "boxes": [tuple(b) for b in im["boxes"]]})
            for im in doc["images"]]
  return Dataset(Path(doc["root"]), images)


# ---------------------------------------------------------------------------------------------
# Expected values, computed from the inputs
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class ExpectedObject:
  label: str
  xmin: float
  ymin: float
  xmax: float
  ymax: float
  area: float
  is_crowd: int = 0


@dataclasses.dataclass
class Expected:
  filename: str
  source_id: str
  width: int
  height: int
  channels: int
  format: str
  data: bytes
  objects: List[ExpectedObject]


_CHANNELS: Dict[str, int] = {}


def decoded_channels(data: bytes) -> int:
  """Channels TensorFlow's own decoder gives (what image/channels must say)."""
  digest = hashlib.sha256(data).hexdigest()
  if digest not in _CHANNELS:
    import tensorflow as tf
    _CHANNELS[digest] = int(tf.io.decode_image(data, channels=0, expand_animations=False)
                            .shape[-1])
  return _CHANNELS[digest]


def expected_for(ds: Dataset, im: sample.SampleImage, source_id: str,
                 keep: Callable[[str], bool] = lambda label: True) -> Expected:
  data = ds.data(im)
  channels = decoded_channels(data)
  objects = [ExpectedObject(label, x0 / im.width, y0 / im.height, x1 / im.width, y1 / im.height,
                            (x1 - x0) * (y1 - y0))
             for label, x0, y0, x1, y1 in im.boxes if keep(label)]
  return Expected(im.file_name, source_id, im.width, im.height, channels, im.format, data,
                  objects)


def source_id_for(fmt: str, im: sample.SampleImage) -> str:
  """COCO: the image id from the JSON; VOC and CSV: the file name."""
  return str(im.image_id) if fmt == "coco" else im.file_name


# ---------------------------------------------------------------------------------------------
# Reading an output directory back with TensorFlow
# ---------------------------------------------------------------------------------------------

def tf_feature_spec(features: Dict[str, Tuple[str, str]] = ALL_FEATURES):
  import tensorflow as tf
  dtypes = {"string": tf.string, "int64": tf.int64, "float32": tf.float32}
  return {k: tf.io.FixedLenFeature([], dtypes[d]) if kind == "fixed"
          else tf.io.VarLenFeature(dtypes[d]) for k, (d, kind) in features.items()}


def tensor_to_python(value):
  """A parsed feature (dense or sparse tensor) as plain Python: scalars, lists, bytes."""
  import tensorflow as tf
  if isinstance(value, tf.SparseTensor):
    value = value.values
  array = value.numpy()
  if isinstance(array, bytes):  # scalar string
    return array
  if array.ndim == 0:
    return array.item()
  return array.tolist()


@dataclasses.dataclass
class Record:
  shard: str
  serialized: bytes
  keys: frozenset
  values: Dict


def read_shard(path: Path) -> List[Record]:
  """Every example of one TFRecord file: tf.data.TFRecordDataset + tf.io.parse_single_example."""
  import tensorflow as tf
  spec = tf_feature_spec()
  records = []
  for raw in tf.data.TFRecordDataset([str(path)]):
    serialized = raw.numpy()
    parsed = tf.io.parse_single_example(raw, spec)
    keys = frozenset(tf.train.Example.FromString(serialized).features.feature.keys())
    values = {k: tensor_to_python(v) for k, v in parsed.items()}
    records.append(Record(path.name, serialized, keys, values))
  return records


@dataclasses.dataclass
class Output:
  path: Path
  manifest: Dict
  shard_files: Dict[str, List[Path]]        # split -> shard files on disk, by index
  records: Dict[str, List[Record]]          # split -> examples in shard order
  errors: List[Dict]

  def all_records(self) -> List[Tuple[str, Record]]:
    return [(split, r) for split, recs in sorted(self.records.items()) for r in recs]

  def by_filename(self) -> Dict[str, Tuple[str, Record]]:
    result = {}
    for split, rec in self.all_records():
      name = rec.values["image/filename"].decode("utf-8")
      assert name not in result, f"{name} written twice"
      result[name] = (split, rec)
    return result


def shard_files_on_disk(path: Path) -> Dict[str, List[Path]]:
  found: Dict[str, List[Tuple[int, int, Path]]] = collections.defaultdict(list)
  for f in path.iterdir():
    m = SHARD_RE.match(f.name)
    if m:
      found[m["split"]].append((int(m["index"]), int(m["count"]), f))
  result = {}
  for split, items in found.items():
    items.sort()
    counts = {count for _, count, _ in items}
    assert len(counts) == 1, f"{split}: shards disagree on their count: {items}"
    assert [i for i, _, _ in items] == list(range(counts.pop())), f"{split}: missing shards"
    result[split] = [f for _, _, f in items]
  return result


def read_output(path: Path) -> Output:
  path = Path(path)
  manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
  shards = shard_files_on_disk(path)
  records = {split: [r for f in files for r in read_shard(f)] for split, files in shards.items()}
  errors = []
  for f in sorted(path.glob("errors-*.jsonl")):
    errors += [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()
               if line.strip()]
  return Output(path, manifest, shards, records, errors)


def parse_pbtxt_label_map(text: str) -> List[Tuple[str, int]]:
  """(name, id) items of a StringIntLabelMap text file, in file order, without protobuf.
  (Plain names only: escapes are not decoded.)"""
  items = []
  for body in re.findall(r"item\s*\{(.*?)\n?\}", text, flags=re.S):
    name = re.search(r"""\bname:\s*(["'])(.*?)\1""", body, flags=re.S)
    label_id = re.search(r"\bid:\s*(\d+)", body)
    assert name and label_id, body
    items.append((name.group(2), int(label_id.group(1))))
  return items


# ---------------------------------------------------------------------------------------------
# Comparing examples with the input
# ---------------------------------------------------------------------------------------------

def _object_rows(values: Dict) -> List[Tuple]:
  n = len(values["image/object/class/text"])
  for key in ("image/object/bbox/xmin", "image/object/bbox/xmax", "image/object/bbox/ymin",
              "image/object/bbox/ymax", "image/object/class/label", "image/object/is_crowd",
              "image/object/area"):
    assert len(values[key]) == n, f"{key} has {len(values[key])} values for {n} objects"
  return [(values["image/object/class/text"][i].decode("utf-8"),
           values["image/object/class/label"][i],
           values["image/object/bbox/xmin"][i], values["image/object/bbox/ymin"][i],
           values["image/object/bbox/xmax"][i], values["image/object/bbox/ymax"][i],
           values["image/object/is_crowd"][i], values["image/object/area"][i])
          for i in range(n)]


def _order(rows):
  return sorted(rows, key=lambda r: (r[0], round(r[2], 4), round(r[3], 4), round(r[4], 4),
                                     round(r[5], 4)))


def check_record(record: Record, exp: Expected, label_ids: Dict[str, int], voc: bool,
                 any_order: bool = False) -> None:
  """Assert that every feature of one written example matches the input image."""
  v, where = record.values, f"{exp.filename} in {record.shard}"
  assert v["image/encoded"] == exp.data, f"{where}: image/encoded differs from the file bytes"
  assert v["image/format"] == exp.format.encode(), where
  assert (v["image/height"], v["image/width"]) == (exp.height, exp.width), where
  assert v["image/channels"] == exp.channels, where
  assert v["image/filename"] == exp.filename.encode("utf-8"), where
  assert v["image/source_id"] == exp.source_id.encode("utf-8"), where
  assert v["image/key/sha256"] == hashlib.sha256(exp.data).hexdigest().encode(), where

  got = _object_rows(v)
  want = [(o.label, label_ids[o.label], o.xmin, o.ymin, o.xmax, o.ymax, o.is_crowd, o.area)
          for o in exp.objects]
  if any_order:
    got, want = _order(got), _order(want)
  assert len(got) == len(want), f"{where}: {len(got)} objects, expected {len(want)}"
  for g, w in zip(got, want):
    assert g[:2] == w[:2], f"{where}: object {g} != {w}"
    for a, b in zip(g[2:6], w[2:6]):
      assert abs(a - b) <= 1e-6, f"{where}: box {g[2:6]} != {w[2:6]}"
    assert g[6] == w[6], where
    assert math.isclose(g[7], w[7], rel_tol=1e-5, abs_tol=1e-3), f"{where}: area {g[7]} != {w[7]}"

  expected_keys = set(BASE_FEATURES)
  if voc and exp.objects:
    expected_keys |= set(VOC_FEATURES)
    n = len(exp.objects)
    assert v["image/object/difficult"] == [0] * n, where
    assert v["image/object/truncated"] == [0] * n, where
    assert v["image/object/view"] == [b"Unspecified"] * n, where
  assert record.keys == expected_keys, f"{where}: features {sorted(record.keys ^ expected_keys)}"


def check_all_images(out: Output, ds: Dataset, fmt: str, label_ids: Dict[str, int],
                     split_of: Optional[Callable[[sample.SampleImage], str]] = None,
                     keep: Callable[[str], bool] = lambda label: True,
                     any_order: bool = False) -> None:
  """Every input image is written exactly once, to its split, with every feature right."""
  split_of = split_of or (lambda im: im.split)
  written = out.by_filename()
  assert sorted(written) == sorted(im.file_name for im in ds.images)
  for im in ds.images:
    split, record = written[im.file_name]
    assert split == split_of(im), f"{im.file_name} went to {split}"
    check_record(record, expected_for(ds, im, source_id_for(fmt, im), keep), label_ids,
                 voc=(fmt == "voc"), any_order=any_order)


def check_manifest(out: Output, ds: Dataset, fmt: str, label_ids: Dict[str, int],
                   split_of: Optional[Callable[[sample.SampleImage], str]] = None,
                   keep: Callable[[str], bool] = lambda label: True, sink: str = "shards",
                   errors_by_reason: Optional[Dict[str, int]] = None) -> None:
  """manifest.json and label_map.pbtxt against the input and the files actually on disk."""
  split_of = split_of or (lambda im: im.split)
  m = out.manifest
  assert m["tool"] == "beam-tfrecord" and m["schema"] == "od_api"
  assert m["status"] == "ok"
  assert m["format"] == fmt and m["sink"] == sink
  for key, (dtype, kind) in ALL_FEATURES.items():
    assert m["features"][key] == {"dtype": dtype, "kind": kind}, key

  want: Dict[str, Dict] = {}
  for im in ds.images:
    entry = want.setdefault(split_of(im), {"examples": 0, "objects": 0,
                                           "classes": collections.Counter()})
    labels = [b[0] for b in im.boxes if keep(b[0])]
    entry["examples"] += 1
    entry["objects"] += len(labels)
    entry["classes"].update(labels)
  assert sorted(m["splits"]) == sorted(want) == sorted(out.shard_files)
  for split, entry in m["splits"].items():
    files = out.shard_files[split]
    assert entry["examples"] == want[split]["examples"], split
    assert entry["objects"] == want[split]["objects"], split
    assert entry["classes"] == dict(want[split]["classes"]), split
    assert entry["num_shards"] == len(entry["shards"]) == len(files), split
    assert [s["path"] for s in entry["shards"]] == [f.name for f in files], split
    for shard, f in zip(entry["shards"], files):
      assert shard["bytes"] == f.stat().st_size, shard
      if sink == "shards":
        records = [r for r in out.records[split] if r.shard == f.name]
        assert shard["examples"] == len(records), shard
        assert shard["objects"] == sum(len(r.values["image/object/class/text"])
                                       for r in records), shard
    assert entry["bytes"] == sum(f.stat().st_size for f in files), split
  totals = m["totals"]
  assert totals["examples"] == sum(w["examples"] for w in want.values())
  assert totals["objects"] == sum(w["objects"] for w in want.values())
  assert totals["bytes"] == sum(f.stat().st_size for fs in out.shard_files.values() for f in fs)
  assert totals["clipped_boxes"] == 0

  assert m["label_map"] == label_ids
  text = (out.path / "label_map.pbtxt").read_text(encoding="utf-8")
  items = parse_pbtxt_label_map(text)
  assert dict(items) == label_ids and len(items) == len(label_ids)
  assert [i for _, i in items] == sorted(i for _, i in items), "label map not ordered by id"

  errors_by_reason = errors_by_reason or {}
  assert m["errors"]["by_reason"] == errors_by_reason
  assert m["errors"]["count"] == sum(errors_by_reason.values()) == len(out.errors)
  assert sorted(m["errors"]["files"]) == sorted(f.name for f in out.path.glob("errors-*.jsonl"))
  if not errors_by_reason:
    assert all(f.stat().st_size == 0 for f in out.path.glob("errors-*.jsonl"))
  # nothing but the documented files: no staging directory, temp file or stray shard
  names = {f.name for f in out.path.iterdir()}
  documented = ({"manifest.json", "label_map.pbtxt", "README.md"} | set(m["errors"]["files"]) |
                {f.name for fs in out.shard_files.values() for f in fs})
  assert names == documented, sorted(names ^ documented)


def record_counts(out: Output, split: str) -> List[int]:
  return [sum(1 for r in out.records[split] if r.shard == f.name) for f in out.shard_files[split]]


# ---------------------------------------------------------------------------------------------
# Running the pipeline
# ---------------------------------------------------------------------------------------------

def run_cli(*args: str) -> None:
  """`beam-tfrecord ARGS` in this process; fails the test unless it exits 0."""
  from beam_tfrecord.cli import main
  code = main([str(a) for a in args])
  assert code == 0, f"beam-tfrecord {' '.join(map(str, args))} returned {code}"


@contextlib.contextmanager
def _locked(path: Path):
  with open(str(path) + ".lock", "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


class Shared:
  """Results built once per session (and once across xdist workers), then only read."""

  def __init__(self, root: Path):
    self.root = root
    self._outputs: Dict[str, Output] = {}

  def build(self, name: str, fn: Callable[[Path], None]) -> Path:
    target = self.root / name
    done = self.root / f"{name}.done"
    with _locked(target):
      if not done.exists():
        if target.exists():
          shutil.rmtree(target)
        fn(target)
        done.write_text("ok")
    return target

  def output(self, name: str, fn: Callable[[Path], None]) -> Output:
    """Build the run `name` with fn(output_dir) if needed, and read it back (cached)."""
    if name not in self._outputs:
      self._outputs[name] = read_output(self.build(name, fn))
    return self._outputs[name]

  def dataset(self, name: str = "dataset", **kwargs) -> Dataset:
    meta = self.root / f"{name}.json"

    def make(target: Path) -> None:
      meta.write_text(_dataset_to_json(make_dataset(target, **kwargs)), encoding="utf-8")

    self.build(name, make)
    return _dataset_from_json(meta.read_text(encoding="utf-8"))


@pytest.fixture(autouse=True)
def _no_idle_worker_processes():
  """Worker processes a test's pools left for reuse (storage/processes) end with the test, as
  they end with a run: a later test never gets one started for another."""
  yield
  from beam_tfrecord.storage import processes
  processes.stop_idle()


@pytest.fixture(scope="session")
def shared(tmp_path_factory) -> Shared:
  base = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    base = base.parent  # common to all workers of this session, fresh for every session
  root = base / "shared"
  root.mkdir(exist_ok=True)
  return Shared(root)


@pytest.fixture(scope="session")
def dataset(shared) -> Dataset:
  """25 sample images + 2 extras (27 in all: 14 train, 13 val), in COCO, VOC and CSV."""
  return shared.dataset()


@pytest.fixture
def small_dataset(tmp_path) -> Dataset:
  """A private 6-image dataset a test may modify."""
  return make_dataset(tmp_path / "data", count=6, seed=3, extras=False)


# ---------------------------------------------------------------------------------------------
# Shared by tests in several folders
# ---------------------------------------------------------------------------------------------


def encoded_image(fmt, mode="RGB", size=(33, 21), **save_options):
  """A small image with some structure, encoded by Pillow as `fmt`."""
  bands = len(Image.new(mode, (1, 1)).getbands())
  image = Image.new(mode, size, (90, 20, 200, 255)[:bands] if bands > 1 else 7)
  if size[0] > 2:  # some structure, so that a cut file is really missing data
    image.paste((10, 250, 60, 128)[:bands] if bands > 1 else 1, (1, 1, size[0] // 2, size[1] // 2))
  out = io.BytesIO()
  image.save(out, format=fmt, **save_options)
  return out.getvalue()


# One annotation with every kind of field set (records/coders and packed).
SAMPLE_ANNOTATION = ImageAnnotation(
    key="a/é.jpg", uri="/data/a/é.jpg", source_id="42", source="/data/x.json", split="train",
    width=640, height=None, size_bytes=91234,
    objects=(ObjectAnnotation("cat", Box(1.5, 2, 30, 40.25), is_crowd=True, area=12.5),
             ObjectAnnotation("dog", Box(0, 0, 1, 1), difficult=False, truncated=True,
                              pose="Left")))


@pytest.fixture(scope="module")
def scratch():
  """A temporary directory for one test module (property tests write files there)."""
  with tempfile.TemporaryDirectory() as d:
    yield d


@pytest.fixture(scope="session")
def coco_output(shared, dataset) -> Path:
  """The shared default COCO run (the build format_output in e2e/test_end_to_end.py reads)."""
  return shared.build("coco", lambda out: run_cli(
      "convert", "--format=coco", *dataset.inputs("coco"), f"--output={out}",
      "--runner=DirectRunner"))


# ---------------------------------------------------------------------------------------------
# pytest-xdist: modules whose tests run on one worker
# ---------------------------------------------------------------------------------------------

# Modules whose module-scoped fixtures run conversions (or start an emulator, or kill runs)
# that several of their tests read: with `-n`, each worker that gets one of their tests builds
# them again, so their tests are sent to one worker as one unit. (pytest-xdist's xdist_group
# marker does the same with --dist loadgroup, but it renames nodes through an attribute
# pytest 9 no longer reads.) Every other test is sent on its own, as with the default
# --dist load; the units of many tests are sent first (xdist's LoadScopeScheduling), so the
# run ends on single tests and both workers finish together.
ONE_WORKER_MODULES = frozenset(f"tests/{name}.py" for name in (
    "test_layout", "cli/test_cli", "finalize/test_card", "plan/test_naming",
    "readback/test_show", "records/test_masks", "schemas/test_tutorial_and_coco_objects",
    "sources/test_coco", "sources/test_detect", "sources/test_openimages",
    "sources/test_yolo_keras",
    "storage/test_gcs", "write/test_images",
    "e2e/test_atomic_output", "e2e/test_bad_inputs_coco", "e2e/test_bad_inputs_csv",
    "e2e/test_bad_inputs_run_options", "e2e/test_bad_inputs_voc",
    "e2e/test_deeplab_end_to_end", "e2e/test_if_changed", "e2e/test_incremental",
    "e2e/test_keypoints", "e2e/test_leakage", "e2e/test_output_safety", "e2e/test_readers",
    "e2e/test_retried_tasks",
))


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown to a run without it
def pytest_xdist_make_scheduler(config, log):
  """The default `load` distribution, but each of ONE_WORKER_MODULES as one unit."""
  if config.getvalue("dist") != "load":
    return None  # --dist given by hand: xdist's own scheduler
  from xdist.scheduler import LoadScopeScheduling

  class ModulesOnOneWorker(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
      module = nodeid.split("::", 1)[0]
      return module if module in ONE_WORKER_MODULES else nodeid

  return ModulesOnOneWorker(config, log)


# ---------------------------------------------------------------------------------------------
# The e2e marker
# ---------------------------------------------------------------------------------------------

E2E_FOLDERS = ("e2e", "deploy")  # whole conversions; Dataflow and cron wrappers: marked as a whole


def pytest_collection_modifyitems(config, items) -> None:
  """Mark every test under tests/e2e/ and tests/deploy/ `e2e` (the others mark their own)."""
  here = Path(__file__).resolve().parent
  for item in items:
    try:
      folder = Path(item.path).resolve().relative_to(here).parts[0]
    except ValueError:  # not under tests/
      continue
    if folder in E2E_FOLDERS:
      item.add_marker(pytest.mark.e2e)


def transform_labels(pipeline) -> set:
  """Every transform's full label in a pipeline's graph (composites included)."""
  import apache_beam as beam
  labels: set = set()
  pipeline.visit(type("Labels", (beam.pipeline.PipelineVisitor,), {
      "enter_composite_transform": lambda self, node: labels.add(node.full_label),
      "visit_transform": lambda self, node: labels.add(node.full_label)})())
  return labels
