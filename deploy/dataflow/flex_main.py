"""Dataflow Flex Template entry point (FLEX_TEMPLATE_PYTHON_PY_FILE in the launcher image).

The template launcher calls this file with each template parameter as `--name=value` plus
Dataflow's own pipeline options (--project, --region, --temp_location, --job_name, ...).
Template parameters are named like the CLI options with `_` for `-` (`num_shards` is
`--num-shards`); boolean ones take true/false; `input` and `images` take several values
separated by ';' (`input=train=gs://b/train.json;val=gs://b/val.json`). Everything else
is passed on to Beam unchanged. The conversion is submitted without waiting for it: a Flex
Template launcher must exit once the job is created.
"""
from __future__ import annotations

import sys
from typing import Dict, List, Sequence

SEPARATOR = ";"


def convert_actions() -> Dict[str, object]:
  """{'num-shards': argparse action, ...} of `beam-tfrecord convert`, without --format's
  siblings from other subcommands."""
  from beam_tfrecord.cli import convert_options
  return {opt[2:]: action for action in convert_options() for opt in action.option_strings
          if opt.startswith("--")}


def translate(argv: Sequence[str], actions: Dict[str, object] = None) -> List[str]:
  """Template parameters -> `beam-tfrecord convert` options; other options unchanged."""
  import argparse
  actions = convert_actions() if actions is None else actions
  result: List[str] = []
  for arg in argv:
    if arg.startswith("--") and "=" in arg:
      name, value = arg[2:].split("=", 1)
      option = name.replace("_", "-")
      action = actions.get(option)
      if action is not None:
        if action.nargs == 0:  # store_true flag: template value true/false
          if value.strip().lower() in ("true", "1", "yes"):
            result.append(f"--{option}")
        elif isinstance(action, argparse._AppendAction):  # pinned: tests/cli/test_private_apis.py
          result.extend(f"--{option}={v.strip()}" for v in value.split(SEPARATOR) if v.strip())
        else:
          result.append(f"--{option}={value}")
        continue
    result.append(arg)
  return result


# convert --append checks the new version and publishes it (writes DEST/LATEST) in the
# launching process once the job has finished. A Flex Template launch only builds and submits
# the job, so the job would leave an unpublished run directory that the next run deletes.
APPEND_REFUSED = (
    "flex template: append=true cannot publish from a template launch: `convert --append` "
    "writes LATEST after the job has finished, in the process that launched it, and a Flex "
    "Template launcher exits once the job is created. Nothing was submitted. Run `beam-tfrecord "
    "convert --append` with the DataflowRunner from a process that waits for the job (e.g. "
    "deploy/airflow's beam_tfrecord_dataflow DAG)")


def main(argv: Sequence[str] = None) -> int:
  from beam_tfrecord.cli import main as cli_main
  argv = list(sys.argv[1:] if argv is None else argv)
  args = translate(argv)
  if "--append" in args:
    print(APPEND_REFUSED, file=sys.stderr)
    return 2
  if "--no_wait_until_finish" not in args:
    args.append("--no_wait_until_finish")
  return cli_main(["convert", *args])


if __name__ == "__main__":
  sys.exit(main())
