"""Property tests of sources/coco.py: the parse functions, the section streamer, the parse DoFn
and the join return a result or raise InputError (the streamer: ijson's JSONError, which the DoFn
reports), never anything else, whatever the input. (A file of its own beside test_coco.py: both
have a test_coco_parse_image.)"""
from __future__ import annotations

import io
import math
import os

import pytest
from fuzzing import FUZZ, returns_or_input_error
from hypothesis import example, given
from hypothesis import strategies as st

from beam_tfrecord.records import batches
from beam_tfrecord.records.model import (Box, ErrorRecord, ImageAnnotation,
                                         InputError)
from beam_tfrecord.sources import coco

# What ijson (use_float=True) can hand over: no NaN/inf (it rejects them, see
# tests/e2e/test_bad_inputs_coco.py), ints of any size, finite floats, text, lists, objects.
json_scalars = (st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70) |
                st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=5) |
                           st.dictionaries(st.text(max_size=10), inner, max_size=5),
                           max_leaves=15)
numbers = (st.integers(-2**64, 2**64) | st.floats(allow_nan=False, allow_infinity=False) |
           st.booleans() | json_values)


def coco_like(fields):
  """Objects with (some of) the expected keys holding anything, plus other keys."""
  return st.builds(lambda known, extra: {**extra, **known},
                   st.fixed_dictionaries({}, optional={f: s for f, s in fields.items()}),
                   st.dictionaries(st.text(max_size=6), json_values, max_size=3))


images_entries = coco_like({"id": numbers, "file_name": st.text(max_size=30) | json_values,
                            "width": numbers, "height": numbers}) | json_values
annotation_entries = coco_like({
    "image_id": numbers, "category_id": numbers,
    "bbox": st.lists(numbers, min_size=0, max_size=5) | json_values,
    "iscrowd": numbers, "area": numbers}) | json_values
category_entries = coco_like({"id": numbers, "name": st.text(max_size=20) | json_values}) | \
    json_values


@FUZZ
@given(images_entries)
def test_coco_parse_image(record):
  result = returns_or_input_error(coco.parse_image, record)
  if result is not None:
    image_id, file_name, width, height = result
    assert isinstance(image_id, int) and isinstance(file_name, str)
    assert width is None or isinstance(width, int)
    assert height is None or isinstance(height, int)


@FUZZ
@given(annotation_entries)
def test_coco_parse_annotation(record):
  result = returns_or_input_error(coco.parse_annotation, record)
  if result is not None:
    image_id, category_id, box, is_crowd, area = result
    assert isinstance(image_id, int) and isinstance(category_id, int)
    assert isinstance(box, Box) and isinstance(is_crowd, bool)


@FUZZ
@given(category_entries)
def test_coco_parse_category(record):
  result = returns_or_input_error(coco.parse_category, record)
  if result is not None:
    assert isinstance(result[0], int) and isinstance(result[1], str) and result[1]


NON_FINITE_IDS = [
    (coco.parse_image, {"id": math.inf, "file_name": "a.jpg"}),
    (coco.parse_image, {"id": 1, "file_name": "a.jpg", "width": math.nan}),
    (coco.parse_annotation, {"image_id": 1, "category_id": -math.inf, "bbox": [1, 2, 3, 4]}),
    (coco.parse_category, {"id": math.nan, "name": "cat"}),
]


@pytest.mark.parametrize("fn, record", NON_FINITE_IDS)
def test_coco_non_finite_ids_are_input_errors(fn, record):
  returns_or_input_error(fn, record)


json_texts = st.recursive(
    st.sampled_from(["null", "true", "1", "-0.5e3", '"x"', "1e400", "NaN", "[", "{", "]",
                     "}", ",", ":", '"\\ud800"', "18446744073709551616"]),
    lambda inner: st.lists(inner, max_size=6).map(lambda xs: "[" + ",".join(xs) + "]") |
    st.dictionaries(st.sampled_from(["images", "annotations", "categories", "id", "bbox"]),
                    inner, max_size=4).map(
                        lambda d: "{" + ",".join(f'"{k}":{v}' for k, v in d.items()) + "}"),
    max_leaves=20)


@FUZZ
@given(st.binary(max_size=400) | json_texts.map(str.encode) |
       st.tuples(json_texts, st.binary(max_size=20)).map(lambda t: t[0].encode() + t[1]))
@example(b"[" * 3000)
@example(b'{"images": [' + b"9" * 5000 + b"]}")
@example(b'{"images": [{"id": 1, "file_name": "\\u0000"}]}')
def test_coco_stream_section_raises_only_json_errors(data):
  """stream_section itself raises ijson's JSONError for bad bytes (the DoFn turns that into
  malformed_json); nothing else may escape it."""
  import ijson
  for section in coco.SECTIONS:
    try:
      for _ in coco.stream_section(io.BytesIO(data), section):
        pass
    except (ijson.JSONError, InputError):
      pass
    except ValueError as e:  # Python's int() digit limit on huge integers
      assert "digits" in str(e) or "integer" in str(e), e


@FUZZ
@given(data=st.binary(max_size=400) | json_texts.map(str.encode))
@example(data=b"[" * 3000)
@example(data=b'{"images": [' + b"9" * 5000 + b"]}")
def test_coco_parse_section_dofn_never_raises(scratch, data):
  """The whole COCO parse step on a file of arbitrary bytes: only records and ErrorRecords."""
  import apache_beam as beam
  path = os.path.join(scratch, "fuzz.json")
  with open(path, "wb") as f:
    f.write(data)
  dofn = coco._ParseSection(allow_absolute=False)
  for section in coco.SECTIONS:
    for out in dofn.process((None, path, scratch, section)):
      if isinstance(out, beam.pvalue.TaggedOutput):
        assert out.tag in ("objects", "categories", "errors")
        if out.tag == "errors":
          assert isinstance(out.value, ErrorRecord)


_DEEP_JSON_PROBE = """
import io, sys, tracemalloc
from beam_tfrecord.sources import coco
data = b"[" * int(sys.argv[1])
tracemalloc.start()
try:
  for _ in coco.stream_section(io.BytesIO(data), "images"):
    pass
except Exception as e:
  print(type(e).__name__)
print(tracemalloc.get_traced_memory()[1] // 2**20)
"""


@pytest.mark.e2e
def test_coco_deeply_nested_json_memory_is_bounded():
  import subprocess
  import sys
  done = subprocess.run([sys.executable, "-c", _DEEP_JSON_PROBE, "15000"], capture_output=True,
                        text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-500:]
  peak_mb = int(done.stdout.split()[-1])  # Python allocations while parsing
  assert peak_mb < 50, f"{peak_mb} MB for a 15 kB file"


@FUZZ
@given(file_name=st.text(max_size=40), image_id=st.integers(), width=st.none() | st.integers())
@example(file_name="../x", image_id=1, width=None)
@example(file_name="a\x00b", image_id=1, width=None)
def test_coco_join_image_never_raises(scratch, file_name, image_id, width):
  """Any file name from an image entry becomes an image inside the root (a batch's tuple,
  records/batches) or an error record (the object tuples are internal to ReadCoco, so none
  are given here)."""
  element = (("f.json", image_id), {"image": [(None, scratch, file_name, width, None)],
                                    "objects": []})
  out = list(coco.join_image(element, {("f.json", 1): "cat"}, False))
  for item in out:
    assert (type(item) is tuple and isinstance(batches.FROM_PLAIN(item), ImageAnnotation)
            or item.tag == "errors")
