"""write/encode.py: one image from annotation to serialized Example: the direct od-api encoding
through the schema registry, reads with a size limit (read-ahead, object stores), and property
tests: boxes of any value never raise and never vanish."""
from __future__ import annotations

import math
import os

import bad_data as bd
import pytest
from fuzzing import FUZZ
from hypothesis import given
from hypothesis import strategies as st

from beam_tfrecord.records import protos
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         ObjectAnnotation)
from beam_tfrecord.storage.prefetch import prefetch
from beam_tfrecord.write import encode


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


# ---------------------------------------------------------------------------------------------
# Property tests
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def photo_files(scratch):
  result = {}
  for name, data in (("plain.jpg", bd.jpeg((64, 48))),
                     ("exif6.jpg", bd.oriented_photo(6, (64, 48), (4, 4, 20, 16)).data)):
    result[name] = bd.write_bytes(os.path.join(scratch, name), data)
  return result


any_float = st.floats() | st.integers(-10**6, 10**6) | st.sampled_from(
    [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e308, -1e308, 5e-324])
objects = st.builds(
    ObjectAnnotation, label=st.sampled_from(["cat", "dog", "unknown", ""]),
    box=st.builds(Box, any_float, any_float, any_float, any_float),
    is_crowd=st.booleans(), area=st.none() | any_float,
    difficult=st.none() | st.booleans(), truncated=st.none() | st.booleans(),
    pose=st.none() | st.text(max_size=5))


@FUZZ
@given(name=st.sampled_from(["plain.jpg", "exif6.jpg"]),
       objs=st.lists(objects, max_size=6),
       size=st.tuples(st.none() | st.integers(-5, 200), st.none() | st.integers(-5, 200)),
       policy=st.sampled_from(["clip", "drop", "error"]),
       frame=st.sampled_from(["auto", "displayed", "stored"]))
def test_encode_convert_never_raises(photo_files, name, objs, size, policy, frame):
  ann = ImageAnnotation(key=name, uri=photo_files[name], source_id="1", source="fuzz",
                        objects=tuple(objs), width=size[0], height=size[1])
  options = encode.EncodeOptions(bbox_policy=policy, exif_frame=frame)
  result = encode.convert(ann, {"cat": 1, "dog": 2}, options)
  assert all(isinstance(e, ErrorRecord) for e in result.errors)
  assert not [e for e in result.errors if e.reason == "unexpected_error"], result.errors
  if result.serialized is None:
    assert [e for e in result.errors if e.level == "image"]
    return
  example = protos.Example.FromString(result.serialized)
  feature = example.features.feature
  boxes = [list(feature[f"image/object/bbox/{k}"].float_list.value)
           for k in ("xmin", "ymin", "xmax", "ymax")]
  assert len({len(b) for b in boxes}) == 1
  for xmin, ymin, xmax, ymax in zip(*boxes):
    assert all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in (xmin, ymin, xmax, ymax))
    assert xmin <= xmax and ymin <= ymax
  kept = len(boxes[0])
  dropped = [e for e in result.errors if e.level == "object"]
  assert kept + len(dropped) == len(objs), "an object vanished without a record"
  assert kept == len(result.labels)
