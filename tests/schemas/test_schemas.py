"""The schema registry (schemas/__init__.py): names, first ids, label files, and a per-object
schema through the whole pipeline (several records per image, none for an image without
objects)."""
from __future__ import annotations

import pytest

from beam_tfrecord import schemas
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.records import label_map


def test_registry_and_label_files():
  assert schemas.get("od-api").name == "od_api" and schemas.get("od-api").first_id == 1
  assert schemas.get("classification").first_id == 0
  assert schemas.get("classification").image_level
  with pytest.raises(ValueError, match="--schema must be one of od-api, classification, "
                     "tutorial, coco-objects"):
    schemas.get("nope")
  assert schemas.get("tutorial").name == "tutorial" and schemas.get("tutorial").image_level
  objects = schemas.get("coco-objects")
  assert objects.name == "coco-objects" and objects.image_format == "jpeg" and not objects.masks
  assert schemas.get("od-api").masks
  assert "image/object/mask" in schemas.get("od-api").with_masks(True).feature_spec
  renamed = schemas.Schema("tutorial", renames=(("depth", "channels"),))
  assert list(renamed.feature_spec) == ["height", "width", "channels", "label", "image_raw"]
  assert schemas.first_id_of("coco-objects") == 1 and schemas.first_id_of("classification") == 0
  assert label_map.from_names(["b", "a", "b"], first_id=0) == {"a": 0, "b": 1}
  assert label_map.to_lines({"a": 0, "b": 1, "d": 3}) == "a\nb\n\nd\n"
  text = label_map.to_text({"a": 0, "b": 1})
  assert label_map.parse(text, min_id=0) == {"a": 0, "b": 1}
  with pytest.raises(ValueError, match="must be >= 1"):
    label_map.parse(text)


def test_first_id_depends_on_whether_the_source_labels_whole_images(tmp_path):
  """The tutorial schema numbers an image-level source's classes from 0, as classification
  and Keras do, and a box source's from 1 (ids shared with its label map)."""
  assert schemas.get("tutorial").first_id_for(True) == 0
  assert schemas.get("tutorial").first_id_for(False) == 1
  assert schemas.get("od-api").first_id_for(True) == 1  # no override: FIRST_ID
  assert schemas.first_id_of("tutorial") == 0  # verify accepts both numberings

  def config(fmt, schema):
    return ConvertConfig(format=fmt, inputs=[str(tmp_path)], output=str(tmp_path / "o"),
                         schema=schema)
  assert config("folders", "tutorial").first_id() == 0
  assert config("folders", "classification").first_id() == 0
  assert config("voc", "tutorial").first_id() == 1
  assert config("voc", "od-api").first_id() == 1


@pytest.mark.parametrize("fmt,schema,refused", [
    ("folders", "od-api", True), ("folders", "coco-objects", True),
    ("folders", "classification", False), ("folders", "tutorial", False),
    ("voc", "od-api", False), ("voc", "classification", False)])
def test_box_schemas_are_refused_for_image_level_sources(tmp_path, fmt, schema, refused):
  from beam_tfrecord.errors import UsageError
  config = ConvertConfig(format=fmt, inputs=[str(tmp_path)], output=str(tmp_path / "o"),
                         schema=schema)
  if not refused:
    config.check_resolved()
    return
  with pytest.raises(UsageError, match=f"--schema {schema} writes boxes only.*use --schema "
                     "classification or tutorial"):
    config.check_resolved()


@pytest.mark.e2e
def test_per_object_schema_through_the_pipeline(small_dataset, tmp_path, monkeypatch):
  """A schema writing one record per object (as issue 10's coco-objects will): the sinks
  write them all, the manifest counts records, and images without objects (no records) are
  neither lost nor rejected."""
  from apache_beam.testing.test_pipeline import TestPipeline

  from beam_tfrecord import reader
  from beam_tfrecord.finalize import output as outputs
  from beam_tfrecord.pipeline import build
  from beam_tfrecord.readback import verify
  from beam_tfrecord.records.packed import identity_hash
  monkeypatch.setitem(schemas.REGISTRY, "per-object", "per_object_schema")
  ds = small_dataset
  out = tmp_path / "out"
  config = ConvertConfig(format="coco", inputs=ds.file_inputs("coco"),
                         images=[str(ds.image_dir)], output=str(out), schema="per-object")
  with TestPipeline(runner="FnApiRunner", argv=[]) as p:
    build(p, config, ["convert"])
  manifest = outputs.read_manifest(str(out))
  assert manifest["status"] == "ok" and manifest["schema"] == "test_per_object"
  assert set(manifest["features"]) == {"image/filename", "image/width", "object/class/text",
                                       "object/class/label"}
  for split in ds.splits:
    got = [(r["image/filename"].numpy().decode(), r["object/class/text"].numpy().decode())
           for r in reader.load(str(out), split)]
    want = [(im.file_name, b[0]) for im in sorted(  # in shard order
        ds.images, key=lambda im: (identity_hash(im.file_name), im.file_name))
            if im.split == split for b in im.boxes]
    assert got == want and manifest["splits"][split]["examples"] == len(want)
  assert any(not im.boxes for im in ds.images)
  assert verify.run(str(out)) == 0
