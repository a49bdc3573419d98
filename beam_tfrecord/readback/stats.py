"""`beam-tfrecord inspect`: status, the manifest's summary, and statistics from one pass over
the records (read through views.py, so every schema), computed with pandas.

frames() is the pass over the records; compute() turns the two tables into a JSON-ready dict
and is pure, so it is tested without any files.
"""
from __future__ import annotations

import json
import sys
from typing import Dict, Mapping, Optional, Tuple, Union

import pandas as pd

from beam_tfrecord.readback import views
from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.storage import record_files, versions

# COCO's area bands (cocoapi's COCOeval areaRng), applied here to box area in pixels.
SMALL, MEDIUM = 32 ** 2, 96 ** 2
BANDS = ("small", "medium", "large")
IMAGE_COLUMNS = ["split", "image", "width", "height", "objects", "class"]
OBJECT_COLUMNS = ["split", "image", "class", "box_width", "box_height"]


def band(area: float) -> str:
  return "small" if area < SMALL else "medium" if area < MEDIUM else "large"


def frames(output: str, manifest: Union[Manifest, Mapping]
           ) -> Tuple[pd.DataFrame, pd.DataFrame]:
  """(one row per record: split, image, width, height, objects, class of a classification
  record; one row per box: split, image, class, box_width, box_height in pixels). A class
  mask's (deeplab's) objects are the classes it holds, ignore (255) aside, each with the box
  around its pixels."""
  manifest = Manifest.of(manifest)
  view = views.resolve(manifest)
  names = views.class_names(manifest)
  records, boxes = [], []
  file_format = record_files.file_format_of(manifest)
  for split in manifest.splits:
    for uri, _ in views.shard_paths(output, manifest, split):
      for i, serialized in enumerate(record_files.read_records(uri, file_format)):
        entry = views.item(views.parse(serialized), view, names, f"{uri}#{i}")
        width, height = entry.size()
        # a class mask's objects are its classes, each boxed around its pixels
        shapes = entry.regions or list(zip(entry.boxes, entry.labels))
        records.append((split, entry.group, width, height, len(shapes), entry.caption))
        boxes.extend((split, entry.group, label, x1 - x0, y1 - y0)
                     for (x0, y0, x1, y1), label in shapes)
  return (pd.DataFrame(records, columns=IMAGE_COLUMNS),
          pd.DataFrame(boxes, columns=OBJECT_COLUMNS))


def _summary(values: pd.Series) -> Dict[str, float]:
  if values.empty:
    return {"min": 0, "median": 0, "max": 0}
  median = float(values.median())
  return {"min": int(values.min()), "median": int(median) if median.is_integer() else median,
          "max": int(values.max())}


def compute(manifest: Union[Manifest, Mapping], records: pd.DataFrame,
            objects: pd.DataFrame) -> Dict:
  """The statistics document (what `inspect --json` prints)."""
  manifest = Manifest.of(manifest)
  # Per-object schemas write one record per box: an image is its group of records.
  images = (records.groupby(["split", "image"], sort=False)
            .agg(width=("width", "first"), height=("height", "first"),
                 objects=("objects", "sum"), **{"class": ("class", "first")}).reset_index())
  objects = objects.assign(area=objects.box_width * objects.box_height)
  objects["band"] = objects.area.map(band)
  label_map = manifest.label_map

  splits = {}
  for split, entry in manifest.splits.items():
    im, ob = images[images.split == split], objects[objects.split == split]
    bands = ob.band.value_counts()
    splits[split] = {
        "records": int((records.split == split).sum()),
        "manifest_records": entry.examples,
        "images": len(im), "objects": int(im.objects.sum()),
        "objects_per_image": _summary(im.objects),
        "box_sizes": {b: int(bands.get(b, 0)) for b in BANDS},
    }

  per_class = (objects.groupby(["split", "class"])
               .agg(images=("image", "nunique"), objects=("image", "size")))
  labelled = images.dropna(subset=["class"])  # classification records: the class is the image's
  if not labelled.empty:
    per_class = per_class.add(labelled.groupby(["split", "class"]).size().to_frame("images")
                              .assign(objects=0), fill_value=0)
  classes = [{"split": split, "class": name, "id": label_map.get(name),
              "images": int(row.images), "objects": int(row.objects)}
             for (split, name), row in per_class.sort_index().iterrows()]

  sizes = images.groupby(["width", "height"]).size().sort_values(ascending=False, kind="stable")
  errors = manifest.errors
  return {
      "output": manifest.setting("output"),
      "status": manifest.status or None,
      "schema": manifest.schema,
      "format": manifest.format or None,
      "created": manifest.created or None,
      "records_match_manifest": all(s["manifest_records"] in (None, s["records"])
                                    for s in splits.values()),
      "splits": splits,
      "classes": classes,
      "image_sizes": {
          "width": _summary(images.width), "height": _summary(images.height),
          "most_common": [{"width": int(w), "height": int(h), "images": int(n)}
                          for (w, h), n in sizes.head(10).items()],
      },
      "errors": {"count": errors.count, "by_reason": dict(errors.by_reason)},
  }


def text(stats: Mapping, summary: str) -> str:
  """The human-readable report: status first, then the manifest summary, then the tables."""
  lines = [f"status: {stats['status']}", summary, ""]
  splits = pd.DataFrame([
      {"split": name, "images": s["images"], "objects": s["objects"],
       "objects/image min": s["objects_per_image"]["min"],
       "median": s["objects_per_image"]["median"], "max": s["objects_per_image"]["max"],
       **{f"boxes {b}": s["box_sizes"][b] for b in BANDS}}
      for name, s in stats["splits"].items()])
  lines += ["per split (boxes: COCO bands by box area in pixels, small < 32², medium < 96²):",
            _indent(splits.to_string(index=False)), ""]
  if stats["classes"]:
    table = pd.DataFrame(stats["classes"])
    classes = table.pivot_table(index="class", columns="split", values=["images", "objects"],
                                fill_value=0, aggfunc="sum").astype(int)
    classes = classes.reindex(columns=sorted(classes.columns, key=lambda c: (c[1], c[0])))
    classes.columns = [f"{split} {what}" for what, split in classes.columns]
    classes.insert(0, "id", table.groupby("class").id.first().reindex(classes.index)
                   .map(lambda i: "-" if pd.isna(i) else int(i)))
    lines += ["per class:", _indent(classes.reset_index().to_string(index=False)), ""]
  sizes = stats["image_sizes"]
  common = ", ".join(f"{s['width']}x{s['height']} ({s['images']})" for s in sizes["most_common"])
  lines += [f"image sizes: width {_range(sizes['width'])}, height {_range(sizes['height'])}; "
            f"most common: {common or '-'}"]
  errors = stats["errors"]
  lines.append(f"errors: {errors['count']}" + (": " + ", ".join(
      f"{reason} {n}" for reason, n in errors["by_reason"].items()) if errors["count"] else ""))
  if not stats["records_match_manifest"]:
    lines.append("warning: the shards hold a different number of records than manifest.json "
                 "says (run `beam-tfrecord verify`)")
  return "\n".join(lines)


def _range(s: Mapping) -> str:
  return f"{s['min']}-{s['max']} (median {s['median']})"


def _indent(block: str) -> str:
  return "\n".join("  " + line for line in block.splitlines())


def plot(stats: Mapping, objects: pd.DataFrame, path: str) -> None:
  """Class histogram per split and the distribution of box sizes (sqrt of the area, with
  the COCO band limits marked). Needs matplotlib (the `plots` extra)."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
  counts = pd.DataFrame(stats["classes"])
  if not counts.empty:
    value = "objects" if counts.objects.sum() else "images"
    counts.pivot_table(index="class", columns="split", values=value, fill_value=0) \
        .plot.bar(ax=left, rot=0)
    left.set_ylabel(value)
  left.set_title("classes per split")
  if not objects.empty:
    side = (objects.box_width * objects.box_height).clip(lower=0) ** 0.5
    right.hist(side, bins=40, color="#4c72b0")
    for limit, name in ((32, "small | medium"), (96, "medium | large")):
      right.axvline(limit, color="#c44e52", linestyle="--")
      right.text(limit, right.get_ylim()[1] * 0.95, f" {name}", color="#c44e52", fontsize=8,
                 va="top")
  right.set_title("box sizes (sqrt of box area, pixels)")
  right.set_xlabel("pixels")
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def inspect_command(output: str, as_json: bool = False, plot_path: Optional[str] = None) -> int:
  """`beam-tfrecord inspect`: returns the exit code. A versioned output's DEST is read at
  the version its LATEST names (read once; the report names it: `version` in --json, a
  `version: DEST -> versions/<V>` line after the status); a damaged LATEST is a UsageError."""
  from beam_tfrecord import errors
  from beam_tfrecord.finalize import output as outputs
  if plot_path:
    try:
      import matplotlib  # noqa: F401
    except ImportError:
      print("beam-tfrecord: --plot needs matplotlib, an optional extra: "
            "pip install 'beam-tfrecord[plots]'", file=sys.stderr)
      return errors.EXIT_USAGE
  try:
    directory, number = versions.locate(output)
  except versions.DamagedVersions as e:
    raise errors.UsageError(str(e)) from None
  try:
    manifest = views.read_manifest(directory)
  except outputs.IncompleteOutput as e:  # one line naming verify --repair, exit 2
    raise errors.UsageError(str(e)) from None
  except (OSError, ValueError) as e:
    print(f"beam-tfrecord: {directory} has no readable manifest.json ({e}); is it a finished "
          "beam-tfrecord output?", file=sys.stderr)
    return errors.EXIT_USAGE
  try:
    records, objects = frames(directory, manifest)
  except (KeyError, ValueError) as e:  # a schema or split this tool cannot read back
    raise errors.UsageError(f"{output}: {e.args[0] if e.args else e}") from None
  stats = compute(manifest, records, objects)
  stats["output"] = output
  if number is not None:
    stats["version"] = versions.label(number)
  if as_json:
    print(json.dumps(stats, indent=2, ensure_ascii=False))
  else:
    report = text(stats, outputs.summary(manifest, output)).split("\n")
    if number is not None:  # after the status, which stays the first line
      report.insert(1, f"version: {output} -> {versions.label(number)}")
    print("\n".join(report))
  if plot_path:
    plot(stats, objects, plot_path)
    if not as_json:
      print(f"plot: {plot_path}")
  return errors.EXIT_OK if manifest.ok else errors.EXIT_FAILED
