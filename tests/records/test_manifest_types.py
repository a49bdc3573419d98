"""records/manifest.py: the typed manifest reads what every version wrote and writes it back
key for key; a field of the wrong type is a ValueError naming it, never a crash later."""
from __future__ import annotations

import json

import pytest

from beam_tfrecord.records.manifest import ErrorSummary, Manifest, ShardInfo, SplitInfo

WRITTEN = {
    "tool": "beam-tfrecord", "version": "0.1.0", "status": "ok", "outcome": "ok",
    "run_id": "r1", "created": "2026-11-25T10:00:00+00:00", "schema": "od_api",
    "format": "coco", "sink": "shards", "args": ["convert", "--format", "coco"],
    "source_fingerprint": None, "config": {"output": "/out", "feature_names": None},
    "features": {"image/encoded": {"dtype": "string", "kind": "fixed"}},
    "label_map": {"cat": 1, "dog": 2},
    "shard_plan": {"train": {"bounds": [], "planned": [3], "unit": "images"}},
    "splits": {"train": {"examples": 3, "images": 3, "objects": 5, "bytes": 300,
                         "clipped_boxes": 1, "reoriented_images": 0, "classes": {"cat": 5},
                         "shards": [{"path": "train-00000-of-00001.tfrecord", "examples": 3,
                                     "objects": 5, "bytes": 300}], "num_shards": 1}},
    "totals": {"examples": 3, "images": 3, "objects": 5, "bytes": 300, "clipped_boxes": 1,
               "reoriented_images": 0},
    "errors": {"count": 1, "rate": 0.25, "by_level": {"warning": 1},
               "by_reason": {"exif_unreadable": 1}, "files": ["errors-00000-of-00001.jsonl"]},
    "files": ["label_map.pbtxt", "manifest.json", "train-00000-of-00001.tfrecord"],
}


def test_round_trip_is_the_same_json_key_for_key():
  manifest = Manifest.from_json(json.loads(json.dumps(WRITTEN)))
  assert json.dumps(manifest.to_json()) == json.dumps(WRITTEN)  # same keys, same order
  assert manifest.splits["train"].shards[0] == ShardInfo(
      "train-00000-of-00001.tfrecord", 3, 5, 300)
  assert manifest.splits["train"].num_shards == 1 and manifest.num_shards == 1
  assert manifest.errors.warnings == 1 and manifest.ok
  assert manifest.setting("output") == "/out" and manifest.incremental is None


def test_optional_sections_and_unknown_keys():
  data = dict(WRITTEN, future_key={"x": 1})
  del data["shard_plan"]
  manifest = Manifest.from_json(data)
  assert "shard_plan" not in manifest.to_json()  # --sink beam writes none
  assert manifest.to_json()["future_key"] == {"x": 1}  # a newer version's key kept


def test_an_older_manifest_without_files_or_images():
  data = json.loads(json.dumps(WRITTEN))
  del data["files"]
  del data["splits"]["train"]["images"]
  manifest = Manifest.from_json(data)
  assert manifest.files is None and "files" not in manifest.to_json()
  assert manifest.splits["train"].images == 3  # one record per image then


@pytest.mark.parametrize("change, field", [
    (lambda d: d.update(splits=["train"]), "splits"),
    (lambda d: d["splits"]["train"].update(shards={"a": 1}), "splits.train.shards"),
    (lambda d: d["splits"]["train"]["shards"][0].update(path=7),
     "splits.train.shards[0].path"),
    (lambda d: d["splits"]["train"]["shards"][0].update(bytes=True),
     "splits.train.shards[0].bytes"),
    (lambda d: d.update(label_map={"cat": "1"}), "label_map['cat']"),
    (lambda d: d["errors"].update(rate="high"), "errors.rate"),
    (lambda d: d.update(status=["ok"]), "status"),
    (lambda d: d.update(config="x"), "config"),
])
def test_a_field_of_the_wrong_type_is_named(change, field):
  data = json.loads(json.dumps(WRITTEN))
  change(data)
  with pytest.raises(ValueError, match=f"manifest.json: {field.replace('[', '.').replace(']', '.')}"):
    Manifest.from_json(data)


def test_built_values_write_the_finalize_shape():
  manifest = Manifest(status="ok", outcome="ok", splits={"val": SplitInfo(
      examples=1, images=1, shards=(ShardInfo("v.tfrecord", 1, 0, 9),))},
      errors=ErrorSummary(files=("e.jsonl",)), files=("v.tfrecord",))
  data = manifest.to_json()
  assert data["splits"]["val"]["num_shards"] == 1 and data["errors"]["files"] == ["e.jsonl"]
  assert Manifest.of(data) == manifest
