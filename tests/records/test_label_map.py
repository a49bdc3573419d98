"""records/label_map.py: label_map.pbtxt (the TF OD API's StringIntLabelMap) read and written."""
from __future__ import annotations

import re

import pytest

from beam_tfrecord.records import label_map
from beam_tfrecord.storage.files import read_label_map

NAMES = {"person": 1, "cat": 17, "dog": 18, "café": 5, "猫": 40, "o'brien": 2, 'say "hi"': 3,
         "back\\slash": 4, "toothbrush": 90}


def test_label_map_round_trip_with_non_ascii(tmp_path):
  text = label_map.to_text(NAMES)
  assert label_map.parse(text) == NAMES
  path = tmp_path / "label_map.pbtxt"
  path.write_bytes(text.encode("utf-8"))
  assert read_label_map(str(path)) == NAMES
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
