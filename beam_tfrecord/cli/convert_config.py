"""The ConvertConfig of `beam-tfrecord convert`'s parsed options: every option's dest is a
field's name; --if-changed set up, then checked once by config.checked (pipeline.build takes
it as it is). The one place the command line builds its config (the demo makes its own)."""
from __future__ import annotations

import argparse
import dataclasses

from beam_tfrecord import config as config_mod
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.storage import paths


def build(args: argparse.Namespace) -> ConvertConfig:
  """The config `convert` runs with, checked once (config.checked: validated, --format auto
  decided and printed, the schema chosen); raises UsageError for what is wrong with the
  options or the input."""
  from beam_tfrecord.cli.options import RETIRED
  from beam_tfrecord.errors import UsageError
  for option, dest in RETIRED.items():
    if getattr(args, dest, None) is not None:
      raise UsageError(f"{option} was retired: scheduled runs use --append --output DEST, a "
                       "versioned output that keeps unchanged shards and copies unchanged "
                       "records (docs/output.md, 'Versioned outputs')")
  config = _config(args)
  if args.if_changed:
    config = _if_changed(config)
  return config_mod.checked(config, announce=lambda line: print(line, flush=True))


def _config(args: argparse.Namespace) -> ConvertConfig:
  """The ConvertConfig of parsed `convert` options: each option's dest is a field's name."""
  values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ConvertConfig)
            if hasattr(args, f.name)}
  if args.strict:
    values["max_error_rate"] = 0.0
  # paths typed relative or absolute name the same files: compared across runs (image
  # identities, settings, fingerprints), they must be spelled one way
  for name in ("inputs", "images"):
    values[name] = [paths.absolute_assignment(v) for v in values.get(name) or ()]
  for name in ("label_map", "classes_file", "class_descriptions"):
    if values.get(name):
      values[name] = paths.absolute(values[name])
  return ConvertConfig(**values)


def _if_changed(config: ConvertConfig) -> ConvertConfig:
  """--if-changed: the config asking pipeline.build for the fingerprint, computed and compared
  on workers (the launcher lists nothing), set to replace an earlier run of ours in the output
  (once this one succeeds). Reads only the output's manifest.json, as the ownership check does."""
  from beam_tfrecord.finalize import fingerprint
  manifest, _ = fingerprint.recorded(config.output)
  return dataclasses.replace(config, source_fingerprint=dict(fingerprint.REQUESTED),
                             overwrite=config.overwrite or manifest is not None)
