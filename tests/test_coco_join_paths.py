"""ReadCoco's two joins give the same records: one worker and one pass (the in-process
runner's, _JoinFile) and the distributed one (a task per section, CoGroupByKey)."""
from __future__ import annotations

import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from bad_data import jpeg

from beam_tfrecord.sources.coco import ReadCoco


def _write(root, name: str, doc) -> str:
  path = os.path.join(root, name)
  with open(path, "w", encoding="utf-8") as f:
    f.write(doc if isinstance(doc, str) else json.dumps(doc))
  return path


def _files(root) -> dict:
  images = os.path.join(root, "images")
  os.makedirs(images)
  for i in range(4):
    with open(os.path.join(images, f"{i}.jpg"), "wb") as f:
      f.write(jpeg())
  good = {
      "images": [{"id": i, "file_name": f"{i}.jpg", "width": 64, "height": 48} for i in range(4)]
      + [{"id": 2, "file_name": "2.jpg"}, {"id": 9, "file_name": "../escape.jpg"},
         {"id": "x", "file_name": "bad id"}],
      "annotations": [
          {"id": 10, "image_id": 0, "category_id": 1, "bbox": [1, 2, 30, 20], "area": 600.0},
          {"id": 11, "image_id": 0, "category_id": 2, "bbox": [5, 5, 10, 10], "iscrowd": 1},
          {"image_id": 1, "category_id": 1, "bbox": [0.5, 0.25, 10.75, 3]},
          {"id": 12, "image_id": 1, "category_id": 2, "bbox": [1, 1, 2, 2]},
          {"id": 13, "image_id": 3, "category_id": 7, "bbox": [1, 1, 2, 2]},
          {"id": 14, "image_id": 42, "category_id": 1, "bbox": [1, 1, 2, 2]},
          {"id": 15, "image_id": 3, "category_id": 1, "bbox": "oops"},
      ],
      "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"},
                     {"id": 2, "name": "canine"}, {"id": 0, "name": "dataset"}],
  }
  text = json.dumps(good)
  return {
      "good": _write(root, "good.json", good),
      "truncated": _write(root, "truncated.json", text[:text.index('"categories"') + 40]),
      "images_not_array": _write(root, "images_object.json",
                                 dict(good, images={"id": 0, "file_name": "0.jpg"})),
      "no_categories": _write(root, "no_categories.json",
                              {k: v for k, v in good.items() if k != "categories"}),
      "not_an_object": _write(root, "list.json", "[1, 2, 3]"),
      "nan": _write(root, "nan.json", text.replace('"area": 600.0', '"area": NaN')),
      # beyond ijson's 64-bit integers: read by the json.load fallback, and not packable
      "big_id": _write(root, "big_id.json", text.replace('"id": 12,', f'"id": {2 ** 70},')),
      "big_id_images_object": _write(root, "big_id_images_object.json", json.dumps(dict(
          good, images={"id": 0}, annotations=good["annotations"] + [
              {"id": 2 ** 70, "image_id": 1, "category_id": 2, "bbox": [1, 1, 2, 2]}]))),
      # json reads these where streaming would not, or differently: streamed (whole_sections)
      "images_twice": _write(root, "twice.json", text[:-1] + ', "images": [{"id": 7, '
                             '"file_name": "3.jpg"}]}'),
      "nan_no_categories": _write(root, "nan_no_categories.json", json.dumps(
          {k: v for k, v in good.items() if k != "categories"}).replace('"area": 600.0',
                                                                       '"area": NaN')),
      "deep": _write(root, "deep.json", text[:-1] + ', "info": ' + "[" * 40 + "]" * 40 + "}"),
      "big_exponent": _write(root, "big_exponent.json", text.replace('"area": 600.0',
                                                                     '"area": 1e400')),
      "trailing": _write(root, "trailing.json", text + " {}"),
      "bom": _write(root, "bom.json", "\ufeff" + text),
      "odd_strings": _write(root, "odd_strings.json", text.replace(
          '"bad id"', '"[{bad id\\" ]"').replace('"2.jpg"', '"2\\u002ejpg"')),
      "images": images,
  }


WHOLE = ["good", "no_categories", "images_not_array"]
STREAMED = ["truncated", "not_an_object", "nan", "big_id", "big_id_images_object", "images_twice", "nan_no_categories", "deep",
            "big_exponent", "trailing", "bom", "odd_strings"]


def _read(files, name: str, join_in_worker: bool, include_masks: bool = False) -> dict:
  """{'images': [...], 'errors': [...], 'categories': [...]} as sorted text lines."""
  out_dir = os.path.join(os.path.dirname(files["images"]), f"out-{name}-{join_in_worker}")
  with TestPipeline("FnApiRunner") as p:
    out = p | ReadCoco([("train", files[name], files["images"])], drop_background=True,
                       include_masks=include_masks, join_in_worker=join_in_worker)
    for kind, pcoll, text in (("images", out.images, repr),
                              ("errors", out.errors, lambda e: e.to_json()),
                              ("categories", out.categories, repr)):
      _ = (pcoll | f"Text[{kind}]" >> beam.Map(text)
           | f"Write[{kind}]" >> beam.io.WriteToText(os.path.join(out_dir, kind),
                                                     num_shards=1))
  results = {}
  for kind in ("images", "errors", "categories"):
    [found] = [n for n in os.listdir(out_dir) if n.startswith(kind)]
    with open(os.path.join(out_dir, found), encoding="utf-8") as f:
      results[kind] = sorted(f.read().splitlines())
  return results


@pytest.mark.parametrize("name", WHOLE + STREAMED)
def test_both_joins_give_the_same_images_errors_and_categories(tmp_path, name):
  files = _files(str(tmp_path))
  in_worker = _read(files, name, join_in_worker=True)
  distributed = _read(files, name, join_in_worker=False)
  assert in_worker == distributed
  if name == "good":  # the file was really read: images, objects, every kind of error
    assert len(in_worker["images"]) == 4
    reasons = {json.loads(e)["reason"] for e in in_worker["errors"]}
    assert {"duplicate_image_id", "path_traversal", "wrong_type", "unknown_category_id",
            "unknown_image_id", "duplicate_category_id", "background_category"} <= reasons
    assert len(in_worker["categories"]) == 2
  elif name == "big_id":
    assert str(2 ** 70) in "".join(in_worker["images"])
  elif name == "images_twice":  # both arrays read, as streaming reads them
    assert any("source_id='7'" in line for line in in_worker["images"])
  elif name not in ("nan", "big_exponent", "odd_strings", "bom", "images_twice",
                    "nan_no_categories"):
    assert any(json.loads(e)["level"] == "file" for e in in_worker["errors"])


def test_the_in_worker_join_is_used_up_to_its_size_limit(tmp_path, monkeypatch):
  from beam_tfrecord.sources import coco
  files = _files(str(tmp_path))
  read = ReadCoco([("train", files["good"], files["images"])], join_in_worker=True)
  assert read._joined_in_worker(files["good"])
  monkeypatch.setattr(coco, "JOIN_IN_WORKER_BYTES", 10)
  assert not read._joined_in_worker(files["good"])
  assert not ReadCoco([], join_in_worker=False)._joined_in_worker(files["good"])


def test_both_joins_carry_segmentations_alike(tmp_path):
  files = _files(str(tmp_path))
  doc = json.load(open(files["good"]))
  doc["annotations"][0]["segmentation"] = [[1, 2, 30, 2, 30, 20]]
  files["seg"] = _write(str(tmp_path), "seg.json", doc)
  assert _read(files, "seg", True, include_masks=True) == _read(files, "seg", False,
                                                                 include_masks=True)


@pytest.mark.parametrize("name", WHOLE + STREAMED)
def test_whole_sections_reads_what_streaming_reads_or_leaves_the_file_to_it(tmp_path, name):
  """The in-worker join parses small files with json (coco.whole_sections): it must give the
  entries, the sections found and the errors of stream_sections, or decline (None)."""
  from beam_tfrecord.sources import coco
  files = _files(str(tmp_path))
  with open(files[name], "rb") as f:
    data = f.read()
  found, bad = set(), []
  whole = coco.whole_sections(data, coco.SECTIONS, found, bad)
  assert (whole is not None) == (name in WHOLE)
  if whole is None:
    return
  streamed_found, streamed_bad = set(), []
  with open(files[name], "rb") as f:
    streamed = list(coco.stream_sections(f, coco.SECTIONS, found=streamed_found,
                                         bad=streamed_bad))
  assert [(k, e) for k, entries in whole for e in entries] == streamed and streamed
  assert found == streamed_found
  assert [(k, e.reason, e.message) for k, e in bad] == \
      [(k, e.reason, e.message) for k, e in streamed_bad]


def test_nesting_depth_is_counted_like_the_streaming_parser():
  from beam_tfrecord.sources.coco import MAX_DEPTH, _deeper_than
  nested = lambda depth: ("[" * (depth - 1) + "]" * (depth - 1)).encode()
  assert not _deeper_than(b'{"a": ' + nested(MAX_DEPTH) + b"}", MAX_DEPTH)
  assert _deeper_than(b'{"a": ' + nested(MAX_DEPTH + 1) + b"}", MAX_DEPTH)
  assert _deeper_than(b'{"a": "x\\"["}', MAX_DEPTH)  # unsure: an escaped quote
  assert not _deeper_than(b'{"a": [{"b": []}], "c": {}}', 4)
  assert _deeper_than(b'{"a": [{"b": []}], "c": {}}', 3)


@pytest.mark.parametrize("name", ["good", "truncated", "nan", "images_not_array"])
def test_files_over_the_whole_parse_limit_stream_from_the_bytes_already_read(
    tmp_path, monkeypatch, name):
  """The in-worker join reads a file once: over WHOLE_JSON_BYTES, ijson streams on from the
  bytes read to find that out (coco._ReadOn). Same records as the distributed join."""
  from beam_tfrecord.sources import coco
  files = _files(str(tmp_path))
  distributed = _read(files, name, join_in_worker=False)
  monkeypatch.setattr(coco, "WHOLE_JSON_BYTES", 100)
  assert os.path.getsize(files[name]) > 100
  opened = []
  real_stream = coco.stream_sections
  monkeypatch.setattr(coco, "stream_sections",
                      lambda f, *a, **k: opened.append(type(f)) or real_stream(f, *a, **k))
  assert _read(files, name, join_in_worker=True) == distributed
  assert opened and set(opened) <= {coco._ReadOn}
