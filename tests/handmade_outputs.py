"""Output directories written here by hand, records made with TensorFlow's own tf.train.Example
and TFRecordWriter: one per schema a manifest may declare (od_api with masks, renamed features,
classification, tutorial, coco-objects), and a dataset whose boxes never touch. Drawn, counted
and rendered by tests/readback/ and tests/finalize/test_card.py."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from conftest import Dataset
from PIL import Image, ImageDraw

from beam_tfrecord import sample

GRAY = (128, 128, 128)


def _png(image: Image.Image) -> bytes:
  buf = io.BytesIO()
  image.save(buf, format="PNG")
  return buf.getvalue()


def _gray(width: int, height: int) -> bytes:
  return _png(Image.new("RGB", (width, height), GRAY))


# ---------------------------------------------------------------------------------------------
# Hand-written outputs of each schema
# ---------------------------------------------------------------------------------------------

def _feature(value):
  import tensorflow as tf
  values = value if isinstance(value, list) else [value]
  if all(isinstance(v, bytes) for v in values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
  if all(isinstance(v, int) for v in values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def write_output(root: Path, schema: str, features: Dict[str, Tuple[str, str]],
                 records: Dict[str, List[Dict]], label_map: Dict[str, int],
                 renames: Optional[Dict[str, str]] = None) -> Path:
  """Shards + manifest.json as the finalize step writes them, records made with tf.train."""
  import tensorflow as tf
  root.mkdir(parents=True)
  splits = {}
  for split, examples in records.items():
    name = f"{split}-00000-of-00001.tfrecord"
    with tf.io.TFRecordWriter(str(root / name)) as writer:
      for ex in examples:
        writer.write(tf.train.Example(features=tf.train.Features(
            feature={k: _feature(v) for k, v in ex.items()})).SerializeToString())
    size = (root / name).stat().st_size
    splits[split] = {"examples": len(examples), "objects": 0, "bytes": size, "classes": {},
                     "num_shards": 1,
                     "shards": [{"path": name, "examples": len(examples), "bytes": size}]}
  manifest = {"tool": "beam-tfrecord", "version": "0.1.0", "status": "ok", "schema": schema,
              "format": "coco", "created": "2026-01-01T00:00:00+00:00",
              "config": {"output": str(root)},
              "features": {k: {"dtype": d, "kind": kind} for k, (d, kind) in features.items()},
              "label_map": label_map, "splits": splits,
              "totals": {"examples": sum(s["examples"] for s in splits.values())},
              "errors": {"count": 0, "by_reason": {}}}
  if renames:
    manifest["feature_names"] = renames
  (root / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
  return root


# Boxes in pixels (label, x0, y0, x1, y1), far apart so no label patch covers another's edge.
OD_BOXES = [("cat", 20, 40, 90, 110), ("dog", 120, 50, 190, 140)]
OD_SIZE = (220, 160)
LABELS = {"cat": 1, "dog": 2, "person": 3}


def _mask(width: int, height: int, box) -> bytes:
  """Instance mask as the TF OD API stores it: an image-sized PNG, 1 inside the object."""
  mask = Image.new("L", (width, height), 0)
  ImageDraw.Draw(mask).rectangle([box[1] + 10, box[2] + 10, box[3] - 10, box[4] - 10], fill=1)
  return _png(mask)


def _od_records(with_masks: bool) -> List[Dict]:
  w, h = OD_SIZE
  rec = {"image/encoded": _gray(w, h), "image/format": b"png", "image/height": h,
         "image/width": w, "image/filename": b"two.png",
         "image/object/bbox/xmin": [b[1] / w for b in OD_BOXES],
         "image/object/bbox/ymin": [b[2] / h for b in OD_BOXES],
         "image/object/bbox/xmax": [b[3] / w for b in OD_BOXES],
         "image/object/bbox/ymax": [b[4] / h for b in OD_BOXES],
         "image/object/class/text": [b[0].encode() for b in OD_BOXES],
         "image/object/class/label": [LABELS[b[0]] for b in OD_BOXES]}
  if with_masks:
    rec["image/object/mask"] = [_mask(w, h, b) for b in OD_BOXES]
  return [rec]


OD_FEATURES = {"image/encoded": ("string", "fixed"), "image/format": ("string", "fixed"),
               "image/height": ("int64", "fixed"), "image/width": ("int64", "fixed"),
               "image/filename": ("string", "fixed"),
               **{f"image/object/bbox/{k}": ("float32", "var")
                  for k in ("xmin", "ymin", "xmax", "ymax")},
               "image/object/class/text": ("string", "var"),
               "image/object/class/label": ("int64", "var"),
               "image/object/mask": ("string", "var")}


def od_api_output(root: Path) -> Path:
  return write_output(root, "od_api", OD_FEATURES, {"train": _od_records(True)}, LABELS)


def renamed_output(root: Path) -> Path:
  """od_api written with --feature-names: image/encoded=jpeg, class text=names, bbox keys."""
  renames = {"image/encoded": "img", "image/object/class/text": "names",
             **{f"image/object/bbox/{k}": k for k in ("xmin", "ymin", "xmax", "ymax")}}
  records = [{renames.get(k, k): v for k, v in r.items()} for r in _od_records(False)]
  features = {renames.get(k, k): v for k, v in OD_FEATURES.items()
              if k != "image/object/mask"}
  return write_output(root, "od_api", features, {"train": records}, LABELS, renames)


CLASSIFIED = [("a.png", 120, 90, "dog"), ("b.png", 90, 140, "cat"), ("c.png", 100, 100, "dog")]


def classification_output(root: Path) -> Path:
  records = [{"image/encoded": _gray(w, h), "image/format": b"png", "image/height": h,
              "image/width": w, "image/channels": 3, "image/filename": name.encode(),
              "image/key/sha256": b"0" * 64, "image/class/label": LABELS[label],
              "image/class/text": label.encode()} for name, w, h, label in CLASSIFIED]
  features = {"image/encoded": ("string", "fixed"), "image/format": ("string", "fixed"),
              "image/height": ("int64", "fixed"), "image/width": ("int64", "fixed"),
              "image/channels": ("int64", "fixed"), "image/filename": ("string", "fixed"),
              "image/key/sha256": ("string", "fixed"), "image/class/label": ("int64", "fixed"),
              "image/class/text": ("string", "fixed")}
  return write_output(root, "classification", features, {"train": records[:2],
                                                         "val": records[2:]}, LABELS)


def tutorial_output(root: Path) -> Path:
  """The TFRecord tutorial's keys; one image as encoded bytes (the tutorial's way), one as
  raw height x width x depth pixels."""
  records = [{"height": h, "width": w, "depth": 3, "label": LABELS[label],
              "image_raw": _gray(w, h) if i == 0 else Image.new("RGB", (w, h), GRAY).tobytes()}
             for i, (_, w, h, label) in enumerate(CLASSIFIED[:2])]
  features = {"height": ("int64", "fixed"), "width": ("int64", "fixed"),
              "depth": ("int64", "fixed"), "label": ("int64", "fixed"),
              "image_raw": ("string", "fixed")}
  return write_output(root, "tutorial", features, {"train": records}, LABELS)


def coco_objects_output(root: Path) -> Path:
  """keras.io's per-object COCO records: one record per box, bbox [x, y, w, h] in pixels."""
  w, h = OD_SIZE
  image = _png(Image.new("RGB", (w, h), GRAY))
  records = [{"image": image, "path": b"two.png", "area": float((x1 - x0) * (y1 - y0)),
              "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
              "category_id": LABELS[label], "id": i, "image_id": 7}
             for i, (label, x0, y0, x1, y1) in enumerate(OD_BOXES)]
  features = {"image": ("string", "fixed"), "path": ("string", "fixed"),
              "area": ("float32", "fixed"), "bbox": ("float32", "var"),
              "category_id": ("int64", "fixed"), "id": ("int64", "fixed"),
              "image_id": ("int64", "fixed")}
  return write_output(root, "coco-objects", features, {"train": records}, LABELS)


SCHEMAS = {"od_api": od_api_output, "renamed": renamed_output,
           "classification": classification_output, "tutorial": tutorial_output,
           "coco-objects": coco_objects_output}


def _spaced_dataset(root: Path) -> Dataset:
  """Images with boxes that neither overlap nor touch, so every edge is visible."""
  (root / "images").mkdir(parents=True)
  images = []
  layouts = [((240, 180), [("cat", 20.0, 50.0, 100.0, 150.0), ("dog", 140.0, 40.0, 220.0, 120.0)]),
             ((180, 240), [("person", 30.0, 60.0, 150.0, 200.0)]),
             ((200, 150), [("dog", 15.0, 40.0, 70.0, 130.0), ("cat", 120.0, 50.0, 185.0, 120.0)]),
             ((160, 160), [])]
  for i, ((w, h), boxes) in enumerate(layouts):
    name = f"img_{i}.{'png' if i % 2 else 'jpg'}"
    Image.new("RGB", (w, h), GRAY).save(root / "images" / name,
                                        format="PNG" if i % 2 else "JPEG")
    images.append(sample.SampleImage(name, w, h, "png" if i % 2 else "jpeg", boxes,
                                     "train" if i < 3 else "val", 100 + i))
  for split in ("train", "val"):
    sample.write_coco(str(root), images, split)
  return Dataset(root, images)
