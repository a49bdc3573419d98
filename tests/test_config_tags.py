"""Every ConvertConfig field carries one tag (records / inputs / runtime), and --if-changed's
fingerprint, --append's re-encode rule and the manifest all follow it: a setting added
without a tag fails here before it can be silently left out of one of them."""
from __future__ import annotations

import dataclasses
from typing import List, Optional

from beam_tfrecord import config as configs
from beam_tfrecord.config import INPUTS, KINDS, RECORDS, RUNTIME, ConvertConfig
from beam_tfrecord.finalize import fingerprint
from beam_tfrecord.plan import previous


def untagged(cls) -> List[str]:
  """Fields of a config class without exactly one of the tags."""
  return [f.name for f in dataclasses.fields(cls) if f.metadata.get("kind") not in KINDS]


def test_every_field_has_a_tag():
  assert untagged(ConvertConfig) == []
  assert len(dataclasses.fields(ConvertConfig)) == sum(len(configs.names_of(k)) for k in KINDS)


def test_a_field_added_without_a_tag_fails():
  grown = dataclasses.make_dataclass(
      "Grown", [("new_option", Optional[str], dataclasses.field(default=None))],
      bases=(ConvertConfig,), frozen=True)
  assert untagged(grown) == ["new_option"]
  try:
    grown(format="coco", inputs=["a.json"], output="out").record_settings()
  except KeyError as e:  # and it cannot be used: no consumer guesses its kind
    assert "kind" in str(e)
  else:
    raise AssertionError("an untagged field was classified")


def test_the_tags_are_the_classification_the_consumers_had():
  """The hand-kept lists these tags replaced (plan/previous.RECORD_SETTINGS, the fingerprint's
  NOT_SETTINGS): a change of a field's tag must be deliberate, so it changes this test."""
  assert set(configs.names_of(RECORDS)) == {
      "format", "schema", "feature_names", "include_masks", "max_side", "resize",
      "image_format", "jpeg_quality", "bbox_policy", "exif_frame", "max_pixels",
      "max_image_bytes", "verify_images", "follow_symlinks", "allow_absolute_paths",
      "label_map", "classes", "class_map", "classes_file", "class_descriptions", "csv_columns",
      "csv_normalized", "layout", "dataset_name", "dataset_version", "shard_name_template",
      "records_per_shard", "sink", "file_format", "index_files"}
  assert set(configs.names_of(RUNTIME)) == {
      "output", "overwrite", "source_fingerprint", "writer_processes", "append_base",
      "tfds_root", "append", "compact", "keep",
      "retain_hours"}
  assert set(configs.names_of(INPUTS)) == {
      "inputs", "images", "split", "num_shards", "shard_size_mb", "max_error_rate", "image_sets"}


def test_consumers_follow_the_tags():
  base = ConvertConfig(format="coco", inputs=["a.json"], output="out")
  settings = fingerprint.settings_of(base)
  assert set(settings) == set(configs.names_of(RECORDS)) | set(configs.names_of(INPUTS))
  for name in configs.names_of(RUNTIME):
    assert name not in settings
  earlier = previous.Previous("d", {}, {}, {}, {}, dataclasses.asdict(base), {})
  assert previous.changed_settings(base.record_settings(), earlier) == []
  jpeg = dataclasses.replace(base, jpeg_quality=80, num_shards=4, writer_processes=2)
  # only the setting that shapes records forces a re-encode
  assert previous.changed_settings(jpeg.record_settings(), earlier) == ["jpeg_quality"]


def test_typed_values_are_parsed_once_and_cached():
  config = ConvertConfig(format="csv", inputs=["a.csv"], output="out", split="train=0.8,val=0.2",
                         resize="64x32", classes="cat,dog", csv_columns="filename=path")
  assert config.fractions == {"train": 0.8, "val": 0.2} and config.fractions is config.fractions
  assert config.resize_size == (64, 32)
  assert config.columns["filename"] == "path" and config.columns is config.columns
  assert config.selection is config.selection and config.selection is not None
  changed = dataclasses.replace(config, split="train=1")  # a new config parses its own
  assert changed.fractions == {"train": 1.0}


def test_each_format_declares_the_settings_it_reads():
  """A format gets SourceOptions: COMMON and its OPTIONS, each a ConvertConfig setting (or a
  typed value of one); reading anything else names the format."""
  import pytest

  from beam_tfrecord.sources import options as source_options
  from beam_tfrecord.sources import registry
  config = ConvertConfig(format="csv", inputs=["train=a.csv"], output="out",
                         csv_columns="filename=path")
  for name in registry.FORMATS:
    declared = registry.get(name).OPTIONS
    for option in declared:
      assert hasattr(config, option), (name, option)
    view = source_options.of(dataclasses.replace(config, format=name), declared)
    assert view.inputs == ("train=a.csv",) and view.file_inputs()[0][:2] == ("train", "a.csv")
  view = registry.options_of(config)
  assert view.columns["filename"] == "path" and view.columns is config.columns  # typed, once
  with pytest.raises(AttributeError, match="format csv reads the setting 'classes_file'"):
    view.classes_file  # noqa: B018
  import pickle
  assert pickle.loads(pickle.dumps(view)) == view  # Beam carries it to the workers
