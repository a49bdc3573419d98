"""`beam-tfrecord demo`: a sample dataset made, converted, verified and drawn, in a folder
the demo may write to.

The folder's DEMO_MARKER lists every file and folder the demo wrote under data/ (name, size,
SHA-256): a later run replaces data/ only when what is there is exactly that (files it wrote
may be missing, none changed or added). The new data/ is written beside it first
(DEMO_STAGING), listed, then renamed into place: a run killed at any point leaves a folder
the next run recognises."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from typing import Dict, List, Optional, Sequence

from beam_tfrecord.cli.convert import run_convert
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import UsageError

DEMO_FORMATS = ("coco", "voc", "csv")  # the sample's annotation formats
DEMO_MARKER = ".beam-tfrecord-demo"  # in the folders the demo made: its own, to write again
DEMO_STAGING = ".beam-tfrecord-demo-data"  # the next data/, until it is listed and renamed
DEMO_FILES = (DEMO_MARKER, DEMO_MARKER + ".new", "show.png")  # .new: the next marker
DEMO_ENTRIES = (*DEMO_FILES, DEMO_STAGING, "data", "tfrecords")
MAX_MARKER_BYTES = 16 << 20

# {path under data/: [size, sha256] for a file, None for a folder}
Listing = Dict[str, Optional[List]]


def claim_demo_folder(path: str) -> None:
  """Make `path` the demo's folder, or refuse with UsageError. The demo writes DIR/data,
  DIR/tfrecords and DIR/show.png over whatever is there, so it writes only into a folder that
  does not exist yet, an empty one, or its own earlier output (DEMO_MARKER, nothing else
  beside the demo's entries, none of them a link leading elsewhere, and data/ holding only
  what the marker lists). A staging folder a killed run left is removed."""
  if os.path.lexists(path) and not os.path.isdir(path):
    raise UsageError(f"demo --output {path} exists and is not a folder; choose a new folder")
  entries = sorted(os.listdir(path)) if os.path.isdir(path) else []
  if entries and DEMO_MARKER not in entries:
    raise UsageError(f"demo --output {path} already holds files the demo did not write "
                     f"({', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''}); the "
                     "demo writes only into a new or empty folder or its own earlier output: "
                     "choose another --output")
  others = [e for e in entries if not _demo_entry(path, e)]
  if others:
    raise UsageError(f"demo --output {path} holds {', '.join(others[:3])} besides the demo's "
                     f"own files (or as a link); the demo writes nothing there: move "
                     f"{'it' if len(others) == 1 else 'them'} or choose another --output")
  if entries:
    _check_data(path, _read_listing(path))
    shutil.rmtree(os.path.join(path, DEMO_STAGING), ignore_errors=True)
    return
  os.makedirs(path, exist_ok=True)
  _write_listing(path, {})


def _demo_entry(path: str, name: str) -> bool:
  """One of DEMO_ENTRIES, of the kind the demo makes there (files: the marker and show.png),
  and not a link."""
  full = os.path.join(path, name)
  if name not in DEMO_ENTRIES or os.path.islink(full):
    return False
  return os.path.isfile(full) if name in DEMO_FILES else os.path.isdir(full)


def _check_data(path: str, listing: Optional[Listing]) -> None:
  """UsageError unless DIR/data holds only what the demo wrote there (listing)."""
  data = os.path.join(path, "data")
  found = _list(data) if os.path.isdir(data) else {}
  if found and listing is None:
    raise UsageError(f"demo --output {path}: its data/ was written by an earlier version of "
                     "the demo, which kept no list of its files, so it cannot tell them from "
                     f"yours: remove {data} (or choose another --output) to run the demo there")
  for name, entry in sorted(found.items()):
    if name not in listing:
      why = "which the demo did not write"
    elif entry != listing[name]:
      why = "changed since the demo wrote it"
    else:
      continue
    raise UsageError(f"demo --output {path} holds data/{name}, {why}; the demo replaces "
                     "only its own files: move it or choose another --output")


def _list(root: str) -> Listing:
  """Every folder and file under root, as the marker lists them; a link or a special file is
  listed as such (never what the demo wrote). Links are not followed."""
  listing: Listing = {}

  def fail(error: OSError) -> None:
    raise UsageError(f"demo: cannot read {error.filename} ({error.strerror}); nothing was "
                     "changed")

  for folder, dirs, files in os.walk(root, onerror=fail):
    for name in dirs + files:
      full = os.path.join(folder, name)
      relative = os.path.relpath(full, root).replace(os.sep, "/")
      st = os.lstat(full)
      if stat.S_ISDIR(st.st_mode):
        listing[relative] = None
      elif stat.S_ISREG(st.st_mode):
        listing[relative] = [st.st_size, _digest(full)]
      else:
        listing[relative] = ["a link or special file"]
  return listing


def _digest(path: str) -> str:
  from beam_tfrecord.storage.files import open_local
  digest = hashlib.sha256()
  with open_local(path, follow=False) as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def _read_listing(path: str) -> Optional[Listing]:
  """The marker's listing; None for an earlier demo's marker (a sentence, no listing)."""
  from beam_tfrecord.records.model import InputError
  from beam_tfrecord.storage.files import open_local
  marker = os.path.join(path, DEMO_MARKER)
  try:
    with open_local(marker, follow=False) as f:
      text = f.read(MAX_MARKER_BYTES + 1)
  except (OSError, InputError) as e:
    raise UsageError(f"demo --output {path}: its {DEMO_MARKER} cannot be read ({e}); "
                     "choose another --output") from None
  try:
    listing = json.loads(text)["data"]
    if isinstance(listing, dict):
      return listing
  except (ValueError, KeyError, TypeError):
    pass
  return None


def _write_listing(path: str, listing: Listing) -> None:
  """The marker, replaced whole (written beside it, then renamed)."""
  marker = os.path.join(path, DEMO_MARKER)
  with open(marker + ".new", "w", encoding="utf-8") as f:
    json.dump({"made_by": "beam-tfrecord demo: its next runs may replace data/, tfrecords/ "
               "and show.png here, when data/ holds only what is listed", "data": listing}, f)
  os.replace(marker + ".new", marker)


def make_data(path: str, count: int):
  """The sample dataset as DIR/data: made in DEMO_STAGING, listed in the marker, renamed."""
  from beam_tfrecord import sample
  staging, data = os.path.join(path, DEMO_STAGING), os.path.join(path, "data")
  images = sample.make_dataset(staging, count=count)
  listing = _list(staging)
  shutil.rmtree(data, ignore_errors=True)  # the demo's own: claim_demo_folder checked it
  _write_listing(path, listing)
  os.rename(staging, data)
  return images


def run(args, beam_args: Sequence[str]) -> int:
  """`demo`, as parsed; the exit code."""
  claim_demo_folder(args.output)
  data = os.path.join(args.output, "data")
  images = make_data(args.output, args.images)
  print(f"sample dataset: {len(images)} images, "
        f"{sum(len(i.boxes) for i in images)} boxes in {data}")
  inputs = {
      "coco": [f"{s}={os.path.join(data, f'instances_{s}.json')}" for s in ("train", "val")],
      "csv": [f"{s}={os.path.join(data, f'{s}_labels.csv')}" for s in ("train", "val")],
      "voc": [os.path.join(data, "voc")],
  }[args.format]
  config = ConvertConfig(format=args.format, inputs=inputs, images=[os.path.join(data, "images")],
                         output=os.path.join(args.output, "tfrecords"), num_shards=2,
                         overwrite=True)
  code = run_convert(config, beam_args, ["demo", "--format", args.format])
  if code == 0:
    from beam_tfrecord.readback import verify
    code = verify.run(config.output)
  if code == 0:
    from beam_tfrecord.readback import show
    picture = os.path.join(args.output, "show.png")
    grid = show.show(config.output, n=12)
    grid.save(picture)
    print(f"{picture}: {len(grid.info['tiles'])} examples drawn from the train records; "
          f"dataset card: {os.path.join(config.output, 'README.md')}")
  return code
