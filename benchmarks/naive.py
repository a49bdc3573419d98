"""Baselines for the benchmark, each run by run.py as its own process.

  decode    (3) the TensorFlow tutorial loop: read the bytes, `tf.io.decode_jpeg` for the shape,
              build a `tf.train.Example`, write it with `tf.io.TFRecordWriter` (one file)
  nodecode  (4) the same loop, with the size taken from the annotations (no decode)
  read      (5) the I/O floor: read every image file once, nothing else (no TensorFlow)

The examples carry the same TF Object Detection API features as beam-tfrecord's default
schema, so the loops do comparable work apart from how they run.

Usage: python benchmarks/naive.py {decode,nodecode,read} --annotations A.json --images DIR
       [--output FILE.tfrecord]
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import sys
from typing import Dict, List, Tuple


def load_coco(path: str) -> Tuple[List[Dict], Dict[int, List[Dict]], Dict[int, str]]:
  """(images, annotations by image id, category names by id): plain json.load, as in tutorials."""
  with open(path, encoding="utf-8") as f:
    doc = json.load(f)
  by_image: Dict[int, List[Dict]] = collections.defaultdict(list)
  for ann in doc["annotations"]:
    by_image[ann["image_id"]].append(ann)
  return doc["images"], by_image, {c["id"]: c["name"] for c in doc["categories"]}


def read_all(annotations: str, images_dir: str) -> int:
  """(5) Read every image file once. Returns the number of bytes read."""
  images, _, _ = load_coco(annotations)
  total = 0
  for image in images:
    with open(os.path.join(images_dir, image["file_name"]), "rb") as f:
      total += len(f.read())
  return total


def tutorial_loop(annotations: str, images_dir: str, output: str, decode: bool) -> int:
  """(3)/(4) The tutorial's single-process loop. Returns the number of examples written."""
  import tensorflow as tf

  def bytes_feature(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

  def float_feature(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))

  def int64_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  images, by_image, categories = load_coco(annotations)
  written = 0
  with tf.io.TFRecordWriter(output) as writer:
    for image in images:
      with open(os.path.join(images_dir, image["file_name"]), "rb") as f:
        encoded = f.read()
      if decode:
        height, width, channels = tf.io.decode_jpeg(encoded).shape
      else:
        height, width, channels = image["height"], image["width"], 3
      anns = by_image.get(image["id"], [])
      xmin = [a["bbox"][0] / width for a in anns]
      ymin = [a["bbox"][1] / height for a in anns]
      xmax = [(a["bbox"][0] + a["bbox"][2]) / width for a in anns]
      ymax = [(a["bbox"][1] + a["bbox"][3]) / height for a in anns]
      feature = {
          "image/encoded": bytes_feature([encoded]),
          "image/format": bytes_feature([b"jpeg"]),
          "image/height": int64_feature([height]),
          "image/width": int64_feature([width]),
          "image/channels": int64_feature([channels]),
          "image/filename": bytes_feature([image["file_name"].encode()]),
          "image/source_id": bytes_feature([str(image["id"]).encode()]),
          "image/key/sha256": bytes_feature([hashlib.sha256(encoded).hexdigest().encode()]),
          "image/object/bbox/xmin": float_feature(xmin),
          "image/object/bbox/xmax": float_feature(xmax),
          "image/object/bbox/ymin": float_feature(ymin),
          "image/object/bbox/ymax": float_feature(ymax),
          "image/object/class/text": bytes_feature(
              [categories[a["category_id"]].encode() for a in anns]),
          "image/object/class/label": int64_feature([a["category_id"] for a in anns]),
          "image/object/is_crowd": int64_feature([a["iscrowd"] for a in anns]),
          "image/object/area": float_feature([a["area"] for a in anns]),
      }
      example = tf.train.Example(features=tf.train.Features(feature=feature))
      writer.write(example.SerializeToString())
      written += 1
  return written


def main(argv: List[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("mode", choices=("decode", "nodecode", "read"))
  parser.add_argument("--annotations", required=True, help="COCO instances JSON")
  parser.add_argument("--images", required=True, help="image root of the JSON's file names")
  parser.add_argument("--output", help="TFRecord file to write (decode, nodecode)")
  args = parser.parse_args(argv)
  if args.mode == "read":
    print(f"read {read_all(args.annotations, args.images)} bytes")
    return 0
  if not args.output:
    parser.error(f"{args.mode} needs --output")
  count = tutorial_loop(args.annotations, args.images, args.output, args.mode == "decode")
  print(f"wrote {count} examples to {args.output}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
