"""Every reason code an error record can carry (ErrorRecord.reason in errors-*.jsonl), with
the levels it is reported at and what it means. docs/errors.md is rendered from it:

    python -m beam_tfrecord.reasons > docs/errors.md

tests/test_reasons.py scans the package for the codes it makes and fails on a code missing
here, on an entry no module makes any more, and on a stale docs/errors.md. No Beam, no package
imports: the catalogue is plain data.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Tuple

# As records/model.STAGES and LEVELS (the test holds them equal): where an input was
# rejected, and what that cost.
STAGES = ("parse", "locate", "read", "decode", "validate", "encode", "write")
LEVELS = ("file", "image", "object", "warning")

LEVEL_MEANINGS = {
    "file": "a problem with an annotation file as a whole: mostly the file, or the rest of it "
            "after the point where it broke, was not read, and the images and objects it "
            "described are missing from the output",
    "image": "one image was not converted",
    "object": "one object (a box, shape, CSV row or segmentation) was dropped; its image was "
              "converted without it",
    "warning": "nothing was rejected: the input was converted anyway, skipped on purpose, or "
               "a choice was made for you",
}


@dataclasses.dataclass(frozen=True)
class Reason:
  """One reason code: the levels it is reported at (several when the same problem costs more
  or less depending on where it is found, e.g. missing_field), and a one-line meaning."""
  code: str
  levels: Tuple[str, ...]
  meaning: str


_ENTRIES = [
    # code, levels, meaning
    ("absolute_path", "image", "the image's file name is an absolute path (or a Labelbox "
     "row_data outside the image root); names must be relative to the image root unless "
     "--allow-absolute-paths"),
    ("background_category", "warning", "a COCO category with id 0 that no annotation uses was "
     "dropped: id 0 means background in the TF OD API (Roboflow exports name the dataset so)"),
    ("bad_bbox", "object", "a Labelbox bounding box has a negative width or height"),
    ("bad_class_mask", "image", "the deeplab schema's class PNG (VOC's SegmentationClass/) "
     "is no 8-bit palette or grayscale PNG, is RGB with a colour outside VOC's colour map (or "
     "transparent pixels), or cannot be decoded"),
    ("bad_image_data", "image", "the LabelMe JSON's embedded imageData (its image whenever it "
     "is not null, as in labelme) is empty or not base64"),
    ("bad_keypoint_visibility", "object", "a keypoint's visibility is not 0 (not labelled), 1 "
     "(labelled, not visible) or 2 (visible), COCO's values: the object is dropped"),
    ("bad_segmentation", "object", "with --include-masks, the object's segmentation (polygons "
     "or RLE) cannot be read or does not fit the image, so the object is dropped with its mask"),
    ("bad_skeleton", "warning", "a COCO category's `skeleton` is neither 1-based (COCO's) nor "
     "0-based (Datumaro's, CVAT's COCO export) pairs of its keypoints: the skeleton, which "
     "only says how to draw them, is left out; the keypoints are kept"),
    ("bad_split", "object", "a CSV row's split column is no usable split name (letters, "
     "digits, '_', '.', '-')"),
    ("bad_subset", "image", "a CVAT subset cannot be a split name; give the --input a SPLIT= "
     "prefix"),
    ("bbox_empty", "object", "the box has no area (xmax <= xmin or ymax <= ymin)"),
    ("bbox_not_finite", "object", "the box has a NaN or infinite coordinate"),
    ("bbox_outside", "object", "the box lies entirely outside the image"),
    ("bbox_outside_unit", "object", "a YOLO label line has a coordinate outside [0, 1]"),
    ("bbox_partly_outside", "object image", "the box extends beyond the image: dropped with "
     "--bbox-policy drop, the whole image rejected with --bbox-policy error (clip, the "
     "default, clips it and counts it instead)"),
    ("category_zero_used", "file", "COCO annotations use category id 0, which the TF OD API "
     "reserves for background; fails the run (exit 2): give --label-map with an id >= 1 for "
     "that category"),
    ("class_id_too_large", "object", "the deeplab schema paints label-map ids into an 8-bit "
     "class mask: an object whose class id is over 254 (255 is ignore) cannot be painted"),
    ("class_mask_size_mismatch", "image", "the class PNG (VOC's SegmentationClass/) is not "
     "the size of its image"),
    ("class_out_of_range", "object", "a YOLO or keras-yolo3 class index is not one of the "
     "dataset's classes"),
    ("corrupt_image", "image", "the image cannot be decoded (a bad header or data, or a size "
     "of 0)"),
    ("decompression_bomb", "image", "the image header declares more pixels than --max-pixels; "
     "it is rejected before decoding"),
    ("duplicate_category_id", "warning", "one COCO category id has two names in a file; the "
     "smallest name is used"),
    ("duplicate_content", "warning", "another file in the same split has the same bytes "
     "(SHA-256) under another name; both are written (the message names the first copy); "
     "--strict and --max-error-rate count it as a rejected input"),
    ("duplicate_image", "warning", "the same image file is annotated more than once in a "
     "split; one annotation is used (the message names it)"),
    ("duplicate_image_id", "warning", "a COCO image id appears more than once in `images`; "
     "the first entry is used"),
    ("earlier_shard_damaged", "warning", "records of an earlier version's shard (--append) "
     "were not what its catalog says (framing, CRC or digest); those images were encoded "
     "again"),
    ("earlier_index_damaged", "warning", "a catalog partition of the earlier version "
     "(--append) cannot be read or is not the one its version recorded (digest, rows, schema: "
     "forged, swapped, truncated, damaged): its shard's images are encoded again; --append "
     "then makes a full version, since which images were that shard's cannot be told"),
    ("empty_file", "image", "the image file is empty"),
    ("excluded_by_image_sets", "warning", "a VOC image is only in ImageSets/Main lists that "
     "were not chosen; it is not converted"),
    ("excluded_class", "warning", "objects or labels of classes left out by --classes; "
     "counted per class in manifest.json, not listed line by line"),
    ("group_labels_differ", "object", "the shapes of one group_id (CVAT, LabelMe) have "
     "different labels; the group is not converted"),
    ("hidden_file", "warning", "a hidden file in a class folder was skipped"),
    ("image_too_large", "image", "the image file is larger than --max-image-bytes; it is "
     "not read"),
    ("in_two_splits", "warning", "the source lists the image in two splits; it is written to "
     "each"),
    ("inconsistent_size", "warning", "the CSV rows of one image give different sizes; the "
     "image header decides"),
    ("keypoint_count_mismatch", "object", "an object has another number of keypoints than its "
     "class names (COCO category `keypoints`, CVAT skeleton points): the object is dropped"),
    ("keypoint_outside_image", "object", "a labelled keypoint lies outside the image: the "
     "object (box, class and points) is dropped, as no point is moved or unlabelled"),
    ("keypoints_differ", "file", "an annotation file defines other keypoints (names, or none) "
     "than the dataset's first file: the records of one dataset need one layout of K points"),
    ("leaked_across_splits", "warning", "a file has the same bytes (SHA-256) as a file of "
     "another split (an evaluation there sees an image the model may train on); both are "
     "written (the message names both); --strict and --max-error-rate count it as a rejected "
     "input"),
    ("looks_normalized", "warning", "every CSV box lies within [0, 1.5]: read as pixels, but "
     "they look like fractions; if so, convert again with --csv-normalized"),
    ("malformed_csv", "file", "the CSV is empty, not UTF-8, or has a syntax error; the rows "
     "before the error are kept"),
    ("malformed_json", "file image", "not valid JSON, or not the expected object or list (a "
     "COCO or LabelMe file; a Labelbox NDJSON line)"),
    ("malformed_line", "object image", "a YOLO label line (object) or a keras-yolo3 annotation "
     "line (image) is not in the format's syntax, or not UTF-8"),
    ("malformed_points", "object", "a CVAT points attribute is not x,y;x,y;..."),
    ("malformed_row", "object", "a CSV line has the wrong number of fields, a syntax error, "
     "or is not UTF-8"),
    ("malformed_shape", "object", "a shape cannot be read: a LabelMe shape that is not an "
     "object or has no valid points list, shape_type or group_id; a polygon of fewer than 3 "
     "points, or a point that is not x, y (CVAT, Labelbox, LabelMe)"),
    ("malformed_xml", "file image", "the XML cannot be parsed or its root element is wrong "
     "(a CVAT file, or the rest of it; a VOC annotation)"),
    ("missing_annotation", "image", "a VOC image id is in a chosen ImageSets/Main list but "
     "Annotations/ has no XML for it (ImageSets/Segmentation: SegmentationClass/ no PNG)"),
    ("missing_column", "file", "the CSV header lacks a required column (map names with "
     "--csv-columns)"),
    ("missing_field", "file image object", "a required field, tag or attribute is missing; "
     "the level says what it belonged to"),
    ("missing_filename", "image", "the image's file name is empty or not text"),
    ("missing_image", "image", "the image file does not exist (or is not a file) where the "
     "annotation says"),
    ("missing_label", "object", "a CVAT or LabelMe shape has an empty label"),
    ("missing_segmentation", "object", "--include-masks is on but the object has no "
     "segmentation"),
    ("negative_label", "warning", "an Open Images row of Confidence 0 (a verified absence, not "
     "a box); the image is kept without it"),
    ("no_label", "image", "the Labelbox data row has no label in the export (not labeled "
     "yet?)"),
    ("not_a_file", "image", "the image path, or an annotation file, is a directory, device, "
     "FIFO or socket; it is not read (never waited on)"),
    ("not_an_image", "warning", "a file in a class folder without an image extension was "
     "skipped"),
    ("not_in_class_folder", "warning", "a file beside the class folders, in none of them, "
     "was skipped"),
    ("not_in_split", "image", "a VOC image is in no ImageSets/Main list (with --schema "
     "deeplab: ImageSets/Segmentation)"),
    ("not_jpeg", "image", "the coco-objects schema writes JPEG but the image is another "
     "format"),
    ("not_labelme", "file", "the JSON is not a LabelMe file (no `shapes`)"),
    ("not_one_class", "image", "the schema needs exactly one class per image (classification, "
     "tutorial, tfds-image-folder) and the image has none or several"),
    ("orphan_label", "image", "a YOLO label file that no image of the dataset claims: its "
     "image is missing"),
    ("path_traversal", "image", "the image's file name leads out of the image root (../)"),
    ("relocated_image", "warning", "absolute paths in a YOLO list did not exist here and were "
     "found under the dataset root by their trailing components"),
    ("several_labels", "image", "the Labelbox data row has several labels (projects or "
     "consensus); export one project without consensus labels"),
    ("several_splits", "image", "a VOC image is in several chosen ImageSets/Main lists"),
    ("size_mismatch", "warning", "the annotated width and height differ from the image "
     "header's; the header is used"),
    ("skipped_label", "image", "the Labelbox label was skipped by its labeler"),
    ("symlink_escape", "image", "the image is a symlink leading out of the image root (pass "
     "--follow-symlinks to accept it), or to no readable file"),
    ("symlinked_folder", "warning", "a symlinked folder among the class folders was not "
     "followed (or would loop)"),
    ("too_deep", "file image object", "the JSON or XML nests deeper than the parser allows"),
    ("too_large", "file image object", "an annotation file, element or line is over the size "
     "this tool reads ([safety.md](safety.md#bounded-parsing))"),
    ("too_many_objects", "image", "the image has more objects than the tool takes for one "
     "image (sources/base.MAX_OBJECTS_PER_IMAGE, [safety.md](safety.md#bounded-parsing))"),
    ("truncated_image", "image", "the JPEG or PNG is cut short (no end marker)"),
    ("unexpected_error", "file image", "an unforeseen error (the message has it); please "
     "report it"),
    ("unknown_category_id", "object", "a COCO annotation's category_id is not in "
     "`categories`"),
    ("unknown_class", "object image", "the class is not in the label map (or, for Open Images, "
     "not in the class descriptions)"),
    ("unknown_class_index", "image", "a class PNG (VOC's SegmentationClass/) holds a palette "
     "index that is neither 0 (background), 255 (ignore) nor an id of the label map"),
    ("unknown_class_selected", "file", "--classes or --class-map names a class the source does "
     "not have; fails the run (exit 2)"),
    ("unknown_format", "image", "the file is not an image format this tool recognises"),
    ("unknown_image_id", "object", "a COCO annotation refers to an image id not in `images`"),
    ("unknown_label", "object", "a CVAT shape's label is not one of the labels in <meta>"),
    ("unknown_split", "image", "the image's split was not known when the pipeline was built "
     "(--sink beam needs every split up front)"),
    ("unreachable_url", "image", "a Labelbox row_data is an http(s) URL, which is never "
     "fetched: download the images and give their folder as --images"),
    ("unreadable", "file image", "an annotation file, a list or an image cannot be read "
     "(missing, no permission, a network error)"),
    ("unreadable_label", "image", "a YOLO label file cannot be read or is not text; its image "
     "is not converted"),
    ("unsafe_path", "image", "the image's file name is not valid Unicode or contains a NUL "
     "byte"),
    ("unsafe_xml", "file image", "the XML uses entities or a DTD, refused as unsafe"),
    ("unsupported_media", "image", "the Labelbox data row is not an image (a video, or "
     "another media type)"),
    ("unsupported_shape", "warning", "a shape that boxes cannot hold (a circle, point, "
     "polyline, mask...) is not converted; the image's other objects are"),
    ("unsupported_track", "object", "a CVAT for video <track> is not converted: export the "
     "task as CVAT for images 1.1"),
    ("unsupported_version", "file", "the CVAT XML's <version> is not 1.1"),
    ("wrong_type", "file image object", "a value has the wrong type (a number, list or object "
     "expected); the level says what it belonged to"),
]

CATALOGUE: Dict[str, Reason] = {
    code: Reason(code, tuple(levels.split()), meaning) for code, levels, meaning in _ENTRIES}


def markdown() -> str:
  """docs/errors.md: the codes grouped by level, each a table of code and meaning."""
  lines: List[str] = [
      "# Error reasons",
      "",
      "Generated from `beam_tfrecord/reasons.py` by `python -m beam_tfrecord.reasons > "
      "docs/errors.md`; a test keeps it current and checks that the code makes every reason "
      "listed here, and no other.",
      "",
      "By default bad input does not fail a run. Each rejected input, and each warning, is "
      "one JSON line in `errors-00000-of-00001.jsonl` (`errors-*.jsonl`) in the output "
      "directory; a failed or empty run leaves its report in its run directory, "
      "`OUTPUT/.beam-tfrecord-run-<id>/`. A line has the `reason` (the code below), the "
      "`level`, the `stage` (" + ", ".join(f"`{s}`" for s in STAGES) + "), the `source` (the "
      "file, often with its line or entry), the `key` (the image's file name when known, else "
      "mostly the annotation file) and a `message` saying what was wrong. `manifest.json` "
      "counts errors `by_reason` and `by_level`; `--max-error-rate` and `--strict` count file, "
      "image and object errors, and of the warnings only copies (`leaked_across_splits`, "
      "`duplicate_content`: [output.md](output.md#copies-and-leakage-between-splits)) "
      "([output.md](output.md#errors-jsonl)).",
      "",
      "A code found where it costs more or less (a missing field in a file's header, an "
      "image's entry or one object's row) is listed under each of its levels.",
      "",
  ]
  for level in LEVELS:
    lines += [f"## {level}", "", LEVEL_MEANINGS[level][0].upper() + LEVEL_MEANINGS[level][1:]
              + ".", "", "| reason | meaning |", "| --- | --- |"]
    lines += [f"| `{r.code}` | {r.meaning} |" for r in CATALOGUE.values() if level in r.levels]
    lines.append("")
  return "\n".join(lines)


if __name__ == "__main__":
  print(markdown(), end="")
