"""Print docs/options.md from the parser of `beam-tfrecord convert` (its one definition).

    python scripts/options_doc.py > docs/options.md

tests/cli/test_options.py fails when docs/options.md differs from what this prints.
"""
from __future__ import annotations

import argparse
from typing import List


def _value(action: argparse.Action) -> str:
  if action.nargs == 0:
    return ""
  if action.choices:
    return "{" + ",".join(map(str, action.choices)) + "}"
  return action.metavar or action.dest.upper()


def _default(action: argparse.Action) -> str:
  if action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS):
    return ""
  return f"`{action.default}`"


def markdown() -> str:
  from beam_tfrecord.cli import EPILOG, RUN_OPTIONS, convert_options
  lines: List[str] = [
      "# `beam-tfrecord convert` options",
      "",
      "Generated from the command's parser by `python scripts/options_doc.py > "
      "docs/options.md`; a test keeps it current. `beam-tfrecord convert --help` prints the "
      "same text. Options marked *run* say how to run, not what to convert (they are not part "
      "of the conversion's settings, ConvertConfig). The Dataflow template takes each option "
      "as a parameter named with `_` for `-` (deploy/dataflow/metadata.json).",
      "",
      "| option | value | default | what it does |",
      "| --- | --- | --- | --- |",
  ]
  for action in convert_options():
    name = ", ".join(f"`{o}`" for o in action.option_strings)
    if action.dest in RUN_OPTIONS:
      name += " *run*"
    if action.required:
      name += " (required)"
    text = " ".join((action.help or "").replace("%%", "%").split()).replace("|", "\\|")
    value = _value(action).replace("|", "\\|")
    lines.append(f"| {name} | {value and f'`{value}`'} | {_default(action)} | {text} |")
  lines += ["", "## Exit codes and Beam options", "", "```", EPILOG.rstrip(), "```", ""]
  return "\n".join(lines)


if __name__ == "__main__":
  print(markdown(), end="")
