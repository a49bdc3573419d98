"""Units behind the per-image cost work (issue 11): the direct Example encoder, the dataclass
coder, the read-ahead and the (key, uri) shard plan. Pure functions, no pipeline."""
from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecord.plan import shard_plan
from beam_tfrecord.records import coders, protos
from beam_tfrecord.records.model import Box, ImageAnnotation, ObjectAnnotation
from beam_tfrecord.storage.prefetch import prefetch

KEYS = ["image/encoded", "a", "é/x", "image/object/area", "z" * 200]

_values = st.one_of(
    st.tuples(st.just(protos.BYTES), st.lists(st.binary(max_size=300), max_size=5)),
    st.tuples(st.just(protos.FLOATS), st.lists(st.floats(width=64), max_size=6)),
    st.tuples(st.just(protos.INTS), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6)),
    st.tuples(st.just(protos.INTS), st.lists(st.integers(0, 200), max_size=200)),
)


@settings(max_examples=300, deadline=None)
@given(features=st.dictionaries(st.sampled_from(KEYS), _values, max_size=len(KEYS)))
def test_example_layout_gives_protobufs_deterministic_bytes(features):
  """Every kind, empty lists, NaN/inf and values beyond float32 (which take protobuf's path),
  multi-byte lengths and keys: the direct encoder must equal protobuf byte for byte."""
  layout = protos.ExampleLayout(KEYS)
  assert layout.serialize(features) == protos.serialize_slow(features)


def test_example_layout_matches_tensorflow():
  tf = pytest.importorskip("tensorflow")
  features = {"s": (protos.BYTES, [b"", "é".encode()]), "f": (protos.FLOATS, [0.1, -2.5]),
              "i": (protos.INTS, [0, -1, 2**40]), "e": (protos.FLOATS, [])}
  theirs = tf.train.Example(features=tf.train.Features(feature={
      "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"", "é".encode()])),
      "f": tf.train.Feature(float_list=tf.train.FloatList(value=[0.1, -2.5])),
      "i": tf.train.Feature(int64_list=tf.train.Int64List(value=[0, -1, 2**40])),
      "e": tf.train.Feature(float_list=tf.train.FloatList(value=[]))}))
  assert protos.ExampleLayout(features).serialize(features) == \
      theirs.SerializeToString(deterministic=True)


ANN = ImageAnnotation(
    key="a/é.jpg", uri="/data/a/é.jpg", source_id="42", source="/data/x.json", split="train",
    width=640, height=None, size_bytes=91234,
    objects=(ObjectAnnotation("cat", Box(1.5, 2, 30, 40.25), is_crowd=True, area=12.5),
             ObjectAnnotation("dog", Box(0, 0, 1, 1), difficult=False, truncated=True,
                              pose="Left")))


def test_dataclass_coder_round_trips_and_is_compact():
  coder = coders.DataclassCoder(ImageAnnotation)
  encoded = coder.encode(ANN)
  assert coder.decode(encoded) == ANN
  assert coder.encode(coder.decode(encoded)) == encoded  # deterministic
  import pickle
  assert len(encoded) < len(pickle.dumps(ANN)) / 2
  assert coder.is_deterministic()
  again = pickle.loads(pickle.dumps(coder))  # how Beam ships coders to workers
  assert again.decode(encoded) == ANN
  # what Beam's runners call: the coder's impl, which must be this coder's encoding (an
  # attribute named _impl once made Beam pickle every record through a primitives coder)
  for made in (coder, again):
    assert made.get_impl().encode(ANN) == encoded
    assert made.get_impl().decode(encoded) == ANN


@dataclasses.dataclass(frozen=True)
class Mask:
  png: bytes
  score: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class Obj:  # ObjectAnnotation as it may grow: a nested optional record
  label: str
  box: Box
  mask: Optional[Mask] = None


@dataclasses.dataclass(frozen=True)
class Image:  # ImageAnnotation as it may grow
  key: str
  objects: Tuple[Obj, ...] = ()
  labels: Tuple[str, ...] = ()
  masks: Tuple[Mask, ...] = ()
  width: Optional[int] = None


def test_dataclass_coder_follows_new_fields():
  """Other work adds fields to the records (image labels, masks): the coder takes them from
  the dataclass, nested records and tuples of them included."""
  value = Image(key="k", labels=("cat", "indoor"),
                masks=(Mask(b"\x89PNG", 0.5),),
                objects=(Obj("cat", Box(0, 0, 1, 1), mask=Mask(b"x")), Obj("dog", Box(1, 1, 2, 2))))
  coder = coders.DataclassCoder(Image)
  decoded = coder.decode(coder.encode(value))
  assert decoded == value
  assert isinstance(decoded.objects[0].box, Box) and isinstance(decoded.masks[0], Mask)


def test_prefetch_keeps_order_bounds_bytes_and_reports_errors():
  lock = threading.Lock()
  state = {"now": 0, "peak": 0}
  sizes = {i: (50 if i % 3 else 200) for i in range(40)}

  def fetch(i):
    with lock:
      state["now"] += sizes[i]
      state["peak"] = max(state["peak"], state["now"])
    time.sleep(0.001 * (i % 4))  # finish out of order
    if i == 7:
      raise ValueError("boom")
    return i * 10

  out = []
  for i, result in prefetch(range(40), fetch, sizes.get, workers=4, max_bytes=300):
    try:
      out.append(result())
    except ValueError:
      out.append("error")
    with lock:
      state["now"] -= sizes[i]
  assert out == [i * 10 if i != 7 else "error" for i in range(40)]
  # fetched and not yet consumed: the cap, plus the one item that is always allowed
  assert state["peak"] <= 300 + 200
  assert [r() for _, r in prefetch([1, 2], lambda i: -i, lambda i: 1, workers=1)] == [-1, -2]


def test_plan_over_key_and_uri_counts_same_names_under_two_roots():
  """Issue 8 item 5: a.jpg under two roots is two images; unique keys keep their ranks."""
  entries = {}
  for root in ("/one", "/two"):
    for name in ("a.jpg", "b.jpg", "c.jpg"):
      shard_plan.add_plan_entry(entries, f"{root}/{name}", (f"{root}.json", name, "train", name,
                                                          10, 1, 1))
  plan = shard_plan.make_plan(entries, 2, None)
  assert plan.splits["train"].count == 6 and plan.duplicates == {}
  shards = [plan.route("train", n, f"{r}/{n}")[1] for n in ("a.jpg", "b.jpg", "c.jpg")
            for r in ("/one", "/two")]
  assert shards == [0, 0, 0, 1, 1, 1]
  unique = shard_plan.plan_split("train", [(k, 1) for k in "abcdefg"], 3, None)
  paired = shard_plan.plan_split("train", [((k, "/r/" + k), 1) for k in "abcdefg"], 3, None)
  assert [unique.shard_of(k) for k in "abcdefg"] == [paired.shard_of((k, "/r/" + k))
                                                     for k in "abcdefg"]


def test_plan_routes_every_annotation_of_a_file_to_the_winner():
  entries = {}
  for source, split in (("b.json", "val"), ("a.json", "train"), ("a.json", "train")):
    shard_plan.add_plan_entry(entries, "/r/x.jpg", (source, "7", split, "x.jpg", 5, 1, 1))
  shard_plan.add_plan_entry(entries, "/r/y.jpg", ("b.json", "8", "val", "y.jpg", 5, 1, 1))
  plan = shard_plan.make_plan(entries, None, None)
  assert plan.duplicates == {"/r/x.jpg": ("train", "x.jpg")}
  assert plan.splits["train"].count == 1 and plan.splits["val"].count == 1
  assert plan.route("val", "x.jpg", "/r/x.jpg") == ("train", 0)


def _jpeg(tmp_path, name="a.jpg", size=(40, 30)):
  import io

  from PIL import Image as PILImage
  buf = io.BytesIO()
  PILImage.new("RGB", size, (10, 200, 30)).save(buf, "JPEG")
  path = tmp_path / name
  path.write_bytes(buf.getvalue())
  return str(path)


@pytest.mark.parametrize("read_ahead", [False, True])
def test_od_api_direct_encoding_equals_the_protobuf_path_through_the_registry(
    tmp_path, monkeypatch, read_ahead):
  """The od-api schema writes its Examples with protos.ExampleLayout; through
  encode.convert (schema registry, read-ahead digest or not) the bytes must be protobuf's."""
  from beam_tfrecord.schemas import od_api
  from beam_tfrecord.write import encode
  uri = _jpeg(tmp_path)
  objects = (ObjectAnnotation("cat", Box(1.5, 2, 30, 25), is_crowd=True, area=12.5),
             ObjectAnnotation("dog", Box(0, 0, 50, 10)),                       # clipped
             ObjectAnnotation("cat", Box(0.1, 0.2, 0.5, 0.9, normalized=True)),  # YOLO
             ObjectAnnotation("dog", Box(3, 3, 9, 9), difficult=True, pose="Left"))
  ids = {"cat": 1, "dog": 2}
  for objs in (objects, objects[:1], ()):
    ann = ImageAnnotation(key="a.jpg", uri=uri, source_id="7", source="x.json", split="train",
                          objects=objs)
    fetched = (lambda: encode.fetch(uri)) if read_ahead else None
    fast = encode.convert(ann, ids, encode.EncodeOptions(), fetched)
    with monkeypatch.context() as m:
      m.setattr(od_api, "_LAYOUT", type("Slow", (), {"serialize": staticmethod(
          protos.serialize_slow)})())
      slow = encode.convert(ann, ids, encode.EncodeOptions(), fetched)
    assert fast.records is not None and len(fast.records) == 1
    assert fast.records == slow.records and fast.labels == slow.labels
    assert fast.clipped == slow.clipped


def test_read_ahead_keeps_the_max_image_bytes_stat_check(tmp_path):
  """fetch (the read-ahead's read) rejects a file over the limit from a stat, unread, and
  the error reaches convert as the image's error record."""
  from beam_tfrecord.write import encode
  small, big = _jpeg(tmp_path, "s.jpg"), _jpeg(tmp_path, "b.jpg", size=(400, 300))
  limit = (os.path.getsize(small) + os.path.getsize(big)) // 2
  anns = [ImageAnnotation(key=os.path.basename(u), uri=u, source_id="1", source="x",
                          split="train") for u in (small, big, str(tmp_path / "gone.jpg"))]
  options = encode.EncodeOptions(max_image_bytes=limit)
  results = [encode.convert(a, {}, options, r) for a, r in
             prefetch(anns, lambda a: encode.fetch(a.uri, limit), lambda a: 1, workers=2)]
  assert results[0].records is not None
  assert results[1].records is None and \
      [e.reason for e in results[1].errors] == ["image_too_large"]
  assert results[2].records is None and [e.reason for e in results[2].errors] == ["unreadable"]


def test_packed_records_carry_the_whole_annotation():
  """packed.pack: routing fields in front, the annotation as bytes the writer unpacks equal."""
  from beam_tfrecord.records import packed
  with_mask = ANN.replace(objects=ANN.objects + (ObjectAnnotation(
      "cat", Box(0.1, 0.2, 0.3, 0.4, normalized=True), segmentation="[[1,2,3,4,5,6]]",
      mask=b"\x89PNG", id=2 ** 40),), labels=("a", "b"))
  for ann in (ANN, with_mask):
    p = packed.pack(ann, records=3)
    assert (p[packed.SPLIT], p[packed.KEY], p[packed.URI], p[packed.SOURCE],
            p[packed.SOURCE_ID], p[packed.SIZE], p[packed.RECORDS]) == (
                ann.split, ann.key, ann.uri, ann.source, ann.source_id, ann.size_bytes, 3)
    assert isinstance(p[packed.BLOB], bytes)
    assert packed.unpack(p[packed.BLOB]) == ann
    assert packed.plan_entry(p) == (ann.source, ann.source_id, ann.split, ann.key,
                                    ann.size_bytes, 1, 3)


def test_a_known_size_saves_object_stores_the_size_lookup(monkeypatch):
  """encode.read_bytes on an object store other than gs://: with the size PrepareImages looked
  up, no second lookup; over the limit, rejected from it without reading."""
  import io

  from apache_beam.io.filesystems import FileSystems

  from beam_tfrecord.records.model import InputError
  from beam_tfrecord.write import encode
  calls = []

  class Store:
    def size(self, uri):
      calls.append(("size", uri))
      return 5

  monkeypatch.setattr(FileSystems, "get_filesystem", staticmethod(lambda uri: Store()))
  monkeypatch.setattr(FileSystems, "open", staticmethod(
      lambda uri, compression_type=None: calls.append(("open", uri)) or io.BytesIO(b"12345")))
  assert encode.read_bytes("s3://b/a.jpg") == b"12345"
  assert calls == [("size", "s3://b/a.jpg"), ("open", "s3://b/a.jpg")]
  calls.clear()
  assert encode.read_bytes("s3://b/a.jpg", size=5) == b"12345"
  assert calls == [("open", "s3://b/a.jpg")]
  calls.clear()
  with pytest.raises(InputError) as e:
    encode.read_bytes("s3://b/a.jpg", limit=4, size=5)
  assert e.value.reason == "image_too_large" and calls == []
