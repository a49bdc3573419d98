"""The output directory: prepare it, read its manifest, summarise and verify it."""
from __future__ import annotations

import json
from typing import Dict, List, Optional

from beam_tfrecord import paths
from beam_tfrecord.pipeline import LABEL_MAP, MANIFEST

# Everything a run writes; --overwrite removes exactly these (manifest first, so that an
# interrupted overwrite never leaves a manifest describing missing shards). The last two are
# directories: our staging and Beam's temporaries (WriteToText / WriteToTFRecord).
OWN_FILES = (MANIFEST, "*.tfrecord", LABEL_MAP, "errors-*.jsonl")
OWN_DIRS = (".tmp-*", "beam-temp-*")
OWN_PATTERNS = OWN_FILES + OWN_DIRS


class OutputNotEmpty(Exception):
  pass


def _match(pattern: str) -> List[str]:
  from apache_beam.io.filesystems import FileSystems
  try:
    return [m.path for m in FileSystems.match([pattern])[0].metadata_list]
  except Exception:
    return []


def _entries(output: str) -> List[str]:
  """Everything in the output directory, directories included (FileSystems.match lists
  files only, so a local directory is listed with os.listdir; object stores list prefixes)."""
  if paths.is_remote(output):
    return _match(paths.join(paths.glob_escape(output), "**"))
  import os
  try:
    return [os.path.join(output, name) for name in os.listdir(output)]
  except FileNotFoundError:
    return []
  except NotADirectoryError:
    raise OutputNotEmpty(f"output {output} is a file, not a directory") from None


def prepare(output: str, overwrite: bool) -> None:
  """Refuse a non-empty output directory unless overwrite; then remove our earlier files."""
  import fnmatch
  import os
  from apache_beam.io.filesystems import FileSystems
  existing = _entries(output)
  if existing and not overwrite:
    raise OutputNotEmpty(f"output directory {output} is not empty ({len(existing)} entries); "
                         "pass --overwrite to replace an earlier run")
  for pattern in OWN_FILES:
    found = _match(paths.join(paths.glob_escape(output), pattern))
    if found:
      FileSystems.delete(found)
  for pattern in OWN_DIRS:
    if paths.is_remote(output):
      found = _match(paths.join(paths.glob_escape(output), pattern + "/**"))
    else:
      found = [e for e in _entries(output) if fnmatch.fnmatch(os.path.basename(e), pattern)]
    if found:
      FileSystems.delete(found)
  if not paths.is_remote(output):
    os.makedirs(output, exist_ok=True)


def read_manifest(output: str) -> Dict:
  from apache_beam.io.filesystems import FileSystems
  with FileSystems.open(paths.join(output, MANIFEST)) as f:
    return json.loads(f.read().decode("utf-8"))


def summary(manifest: Dict, output: str, seconds: Optional[float] = None) -> str:
  totals, errors = manifest["totals"], manifest["errors"]
  lines = [f"beam-tfrecord {manifest['version']}: {manifest['format']} -> {output}"]
  lines.append(f"  {'split':<12}{'images':>9}{'objects':>10}{'shards':>8}{'MB':>10}")
  for split, entry in manifest["splits"].items():
    lines.append(f"  {split:<12}{entry['examples']:>9}{entry['objects']:>10}"
                 f"{entry['num_shards']:>8}{entry['bytes'] / 1e6:>10.2f}")
  lines.append(f"  images {totals['examples']}, objects {totals['objects']}, classes "
               f"{len(manifest['label_map'])}, shards "
               f"{sum(e['num_shards'] for e in manifest['splits'].values())}, clipped boxes "
               f"{totals['clipped_boxes']}, errors {errors['count']}"
               + (f", {seconds:.1f} s" if seconds is not None else ""))
  if errors["count"]:
    reasons = ", ".join(f"{k} {v}" for k, v in errors["by_reason"].items())
    lines.append(f"  errors by reason: {reasons} (details in "
                 f"{', '.join(errors['files']) or 'errors-*.jsonl'})")
  return "\n".join(lines)


def verify(output: str) -> int:
  """Read every shard with TensorFlow, parse every example, compare counts with the manifest."""
  from beam_tfrecord import reader
  manifest = read_manifest(output)
  problems = []
  total = 0
  for split, entry in manifest["splits"].items():
    count = 0
    for record in reader.load(output, split):
      count += 1
      if "image/width" in record and int(record["image/width"]) <= 0:
        problems.append(f"{split}: example with width {int(record['image/width'])}")
    total += count
    if count != entry["examples"] and entry["examples"] is not None:
      problems.append(f"{split}: manifest says {entry['examples']} examples, shards hold {count}")
  for problem in problems:
    print(f"verify: {problem}")
  print(f"verify: {total} examples parsed with TensorFlow: "
        f"{'OK' if not problems else 'FAILED'}")
  return 0 if not problems else 1
