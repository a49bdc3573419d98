"""`beam-tfrecord demo`: a sample dataset made, converted, verified and drawn, in a folder
the demo may write to."""
from __future__ import annotations

import os
from typing import Sequence

from beam_tfrecord.cli.convert import run_convert
from beam_tfrecord.config import ConvertConfig
from beam_tfrecord.errors import UsageError

DEMO_FORMATS = ("coco", "voc", "csv")  # the sample's annotation formats
DEMO_MARKER = ".beam-tfrecord-demo"  # in the folders the demo made: its own, to write again
DEMO_ENTRIES = (DEMO_MARKER, "data", "tfrecords", "show.png")


def claim_demo_folder(path: str) -> None:
  """Make `path` the demo's folder, or refuse with UsageError. The demo writes DIR/data,
  DIR/tfrecords and DIR/show.png over whatever is there, so it writes only into a folder that
  does not exist yet, an empty one, or its own earlier output (DEMO_MARKER, nothing else
  beside the demo's entries, none of them a link leading elsewhere)."""
  if os.path.lexists(path) and not os.path.isdir(path):
    raise UsageError(f"demo --output {path} exists and is not a folder; choose a new folder")
  entries = sorted(os.listdir(path)) if os.path.isdir(path) else []
  if entries and DEMO_MARKER not in entries:
    raise UsageError(f"demo --output {path} already holds files the demo did not write "
                     f"({', '.join(entries[:3])}{', ...' if len(entries) > 3 else ''}); the "
                     "demo writes only into a new or empty folder or its own earlier output: "
                     "choose another --output")
  others = [e for e in entries if e not in DEMO_ENTRIES or os.path.islink(os.path.join(path, e))]
  if others:
    raise UsageError(f"demo --output {path} holds {', '.join(others[:3])} besides the demo's "
                     f"own files (or as a link); the demo writes nothing there: move "
                     f"{'it' if len(others) == 1 else 'them'} or choose another --output")
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, DEMO_MARKER), "w", encoding="utf-8") as f:
    f.write("made by `beam-tfrecord demo`: its next runs may replace data/, tfrecords/ and "
            "show.png here\n")


def run(args, beam_args: Sequence[str]) -> int:
  """`demo`, as parsed; the exit code."""
  from beam_tfrecord import sample
  claim_demo_folder(args.output)
  data = os.path.join(args.output, "data")
  images = sample.make_dataset(data, count=args.images)
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
