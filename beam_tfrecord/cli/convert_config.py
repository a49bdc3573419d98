"""The ConvertConfig of `beam-tfrecord convert`'s parsed options: every option's dest is a
field's name; validated, --format auto decided and printed, the schema chosen, --if-changed
set up. The one place the command line builds its config (the demo makes its own fixed one)."""
from __future__ import annotations

import argparse
import dataclasses

from beam_tfrecord import config as config_mod
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import UsageError


def build(args: argparse.Namespace) -> ConvertConfig:
  """The config `convert` runs with; raises UsageError for what is wrong with the options or
  the input."""
  config = _config(args)
  try:
    config.validate()
  except ValueError as e:
    raise UsageError(str(e)) from None
  config = _resolve(config)
  if args.if_changed:
    config = _if_changed(config)
  return config


def _config(args: argparse.Namespace) -> ConvertConfig:
  """The ConvertConfig of parsed `convert` options: each option's dest is a field's name."""
  values = {f.name: getattr(args, f.name) for f in dataclasses.fields(ConvertConfig)
            if hasattr(args, f.name)}
  if args.strict:
    values["max_error_rate"] = 0.0
  return ConvertConfig(**values)


def _resolve(config: ConvertConfig) -> ConvertConfig:
  """--format auto decided (and printed) and the schema chosen before anything runs; raises
  UsageError for what is wrong with the input."""
  if config.format == "auto":
    from beam_tfrecord.sources import detect
    found = detect.detect(config.inputs)
    print(found.line(), flush=True)
    config = dataclasses.replace(config, format=found.format, inputs=list(found.inputs))
  return config_mod.resolve(config)


def _if_changed(config: ConvertConfig) -> ConvertConfig:
  """--if-changed: the config asking pipeline.build for the fingerprint, computed and compared
  on workers (the launcher lists nothing), set to replace an earlier run of ours in the output
  (once this one succeeds). Reads only the output's manifest.json, as the ownership check does."""
  from beam_tfrecord.finalize import fingerprint
  manifest, _ = fingerprint.recorded(config.output)
  return dataclasses.replace(config, source_fingerprint=dict(fingerprint.REQUESTED),
                             overwrite=config.overwrite or manifest is not None)
