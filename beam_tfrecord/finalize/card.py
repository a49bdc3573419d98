"""The dataset card: README.md in every output directory, rendered from its manifest.

`render(manifest)` is pure (the finalize step writes its result next to manifest.json), so
everything in the card is a number or a name the manifest holds: what was converted, from
where, when and with which command; counts per split and per class; the schema's keys; a
tf.data reading snippet with this output's feature_description and shard names (read from
manifest.json, so any --shard-name-template works); the error summary. Names and paths from
the input (classes, splits, files) are escaped for Markdown tables and HTML: a class named
`a|b`, `<script>` or with a newline shows as written and never splits a row or runs.
"""
from __future__ import annotations

import shlex
from typing import Dict, List, Mapping, Sequence, Union

from beam_tfrecord.records.manifest import Manifest
from beam_tfrecord.schemas import views
from beam_tfrecord.storage import layout, record_files

NAME = layout.CARD

_TF_DTYPES = {"string": "tf.string", "int64": "tf.int64", "float32": "tf.float32"}
_PY_TYPES = {"string": "bytes", "int64": "int64", "float32": "float32"}


def _table(header: Sequence[str], rows: Sequence[Sequence], right: int = 1) -> List[str]:
  """A Markdown table; columns from `right` on are numbers, right-aligned."""
  align = ["---" if i < right else "---:" for i in range(len(header))]
  return ["| " + " | ".join(map(str, header)) + " |", "| " + " | ".join(align) + " |"] + [
      "| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]


_CONTROL = {"\n": "n", "\r": "r", "\t": "t"}
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKS = set("\\`*_[]|~")  # inline marks, and the table's cell separator


def _visible(ch: str) -> str:
  """A control character as its escape (\\n, \\x1b): one table row stays one line."""
  return _CONTROL.get(ch) or f"x{ord(ch):02x}"


def _is_control(ch: str) -> bool:
  return ord(ch) < 32 or ord(ch) == 127


def _text(value) -> str:
  """Markdown text showing `value` as written: HTML's <, > and & as entities (no tag passes
  through), Markdown's inline marks and the table's | backslash-escaped, control characters
  as visible escapes (a newline would end the table row)."""
  out = []
  text = str(value)
  for i, ch in enumerate(text):
    if ch in _ENTITIES:
      out.append(_ENTITIES[ch])
    elif ch == "_" and 0 < i < len(text) - 1 and text[i - 1].isalnum() and \
        text[i + 1].isalnum():
      out.append(ch)  # inside a word _ never emphasizes: traffic_light stays readable
    elif ch in _MARKS:
      out.append("\\" + ch)
    elif _is_control(ch):
      out.append("\\\\" + _visible(ch))  # an escaped backslash, then the letter
    else:
      out.append(ch)
  return "".join(out)


def _code(text: str, table: bool = True) -> str:
  """`text` as inline code. A backquote cannot be escaped in a code span (it becomes '); a |
  still ends a table cell there unless escaped (GFM), and a newline the row."""
  text = "".join("\\" + _visible(ch) if _is_control(ch) else ch for ch in str(text))
  text = text.replace("`", "'")
  return "`" + (text.replace("|", "\\|") if table else text) + "`"


def _py(value: str) -> str:
  """A Python string literal for a code block: repr, with backquotes as \\x60 so that no
  name can close the Markdown fence around it."""
  return repr(value).replace("`", "\\x60")


def default_split(manifest: Union[Manifest, Mapping]) -> str:
  splits = list(Manifest.of(manifest).splits)
  return "train" if "train" in splits else (splits[0] if splits else "train")


def feature_lines(features: Mapping[str, Mapping]) -> List[str]:
  """`feature_description = {...}` for tf.io.parse_single_example, one key a line."""
  lines = ["feature_description = {"]
  for key, spec in features.items():
    dtype = _TF_DTYPES.get(spec["dtype"], "tf.string")
    parser = (f"tf.io.FixedLenFeature([], {dtype})" if spec.get("kind") == "fixed"
              else f"tf.io.VarLenFeature({dtype})")
    lines.append(f"    {_py(key)}: {parser},")
  return lines + ["}"]


def tf_data_snippet(manifest: Union[Manifest, Mapping]) -> str:
  """Plain TensorFlow reading code for this output, runnable as written. The shard files come
  from manifest.json (in shard order), so every --shard-name-template is read right."""
  manifest = Manifest.of(manifest)
  output = _output(manifest)
  split = default_split(manifest)
  try:
    image_key = views.resolve(manifest).image
  except ValueError:
    image_key = None
  lines = ["import json", "", "import tensorflow as tf", "",
           f"OUTPUT = {_py(output)}  # this output",
           "if tf.io.gfile.exists(OUTPUT + '/LATEST'):  # versioned (--append): LATEST's version",
           "    with tf.io.gfile.GFile(OUTPUT + '/LATEST') as f:",
           "        OUTPUT += '/' + f.read().strip()", ""]
  lines += feature_lines(manifest.features)
  lines += ["", "",
            "def parse(record):",
            "    return tf.io.parse_single_example(record, feature_description)",
            "", "",
            "with tf.io.gfile.GFile(OUTPUT + '/manifest.json') as f:",
            "    shards = json.load(f)['splits'][" + _py(split) + "]['shards']",
            "files = [OUTPUT + '/' + shard['path'] for shard in shards]"]
  if manifest.setting("file_format") == record_files.ARRAY_RECORD:
    # random access by index: what Grain (grain.python.ArrayRecordDataSource, the same
    # class) and TFDS's data sources read
    lines[3:3] = ["from array_record.python.array_record_data_source import "
                  "ArrayRecordDataSource"]
    lines += ["source = ArrayRecordDataSource(files)  # source[i]: record i of the split "
              "(local files)", "for example in [parse(source[0])]:"]
    count = "print(len(source), 'examples')"
  else:
    lines += ["dataset = tf.data.TFRecordDataset(files).map(parse)",
              "for example in dataset.take(1):"]
    count = "print(sum(1 for _ in dataset), 'examples')  # reads every record"
  if image_key:
    lines += [f"    image = tf.io.decode_image(example[{_py(image_key)}], "
              "expand_animations=False)",
              "    print(image.shape, sorted(example))"]
  else:
    lines.append("    print(sorted(example))")
  lines.append(count)
  return "\n".join(lines)


def torch_lines(manifest: Manifest) -> List[str]:
  """--index-files: how PyTorch readers take the shards with their index files."""
  if not manifest.setting("index_files"):
    return []
  return ["Each shard has an index beside it (`SHARD.idx`, a line `OFFSET LENGTH` per "
          "record), so PyTorch readers split and shuffle it across workers: NVIDIA DALI's "
          "`fn.readers.tfrecord(path=files, index_path=[f + '.idx' for f in files], ...)` "
          "and the `tfrecord` package's `TFRecordDataset(file, file + '.idx', ...)` "
          "(docs/readers.md).", ""]


def tfds_snippet(manifest: Manifest) -> List[str]:
  """--layout tfds: the keras-io RetinaNet example's loading code, only the name changed."""
  if manifest.setting("layout") != "tfds":
    return []
  name, root = manifest.setting("dataset_name") or "", manifest.setting("tfds_root") or "."
  splits = list(manifest.splits)
  labels = "objects" if manifest.schema == "tfds_detection" else None
  names = (f"dataset_info.features[{_py('objects')}][{_py('label')}].names" if labels
           else f"dataset_info.features[{_py('label')}].names")
  if manifest.setting("file_format") == record_files.ARRAY_RECORD:  # no tf.data: data sources
    return ["With TensorFlow Datasets' data sources (random access, no tf.data; what JAX and "
            "PyTorch loaders index):", "", "```python", "import tensorflow_datasets as tfds", "",
            f"builder = tfds.builder_from_directory({_py(_output(manifest))})",
            f"source = builder.as_data_source(split={_py(default_split(manifest))})",
            "print(len(source), sorted(source[0]))  # source[i]: example i, as numpy",
            "```", ""]
  return ["With TensorFlow Datasets (the keras-io RetinaNet example's loading code, only the "
          "dataset name changed):", "", "```python", "import tensorflow_datasets as tfds", "",
          f"datasets, dataset_info = tfds.load({_py(name)}, split={splits!r}, "
          f"with_info=True, data_dir={_py(root)})",
          f"print({names})",
          f"# or: tfds.builder_from_directory({_py(_output(manifest))})", "```", ""]


def _output(manifest: Manifest) -> str:
  output = manifest.setting("output") or "."
  return output.rstrip("/") or output  # OUTPUT + '/name' must not make a '//' object name


def _command(manifest: Manifest) -> str:
  args = list(manifest.args)
  return "beam-tfrecord " + shlex.join(args) if args else "(not recorded)"


def leakage_section(manifest: Manifest) -> List[str]:
  """Copies by content (write/contents.py): the counts, and what was not compared."""
  found = manifest.leakage
  if found is None:  # a manifest from before the check
    return []
  out = ["## Identical images", ""]
  if found.copies:
    out.append(f"Of {found.images_checked} images compared by their bytes (SHA-256), "
               f"{found.leaked_across_splits} also have a copy in another split "
               f"(`leaked_across_splits`: an evaluation there sees them) and "
               f"{found.duplicate_content} are copies under another name within their split "
               "(`duplicate_content`). Each is a warning in the error report naming both "
               "files.")
  else:
    out.append(f"No two of the {found.images_checked} images compared have identical bytes "
               "(SHA-256), across splits or within one.")
  if found.images_unchecked:
    out.append(f"{found.images_unchecked} images kept from the earlier output were not read, "
               "and not compared.")
  return out[:2] + [" ".join(out[2:]), ""]


def keypoints_section(manifest: Manifest) -> List[str]:
  """The points each object carries (manifest `keypoints`): names, classes, skeleton."""
  layout = manifest.keypoints
  if not layout:
    return []
  names = layout.get("names", [])
  owners: Dict[int, List[str]] = {}
  for label, where in layout.get("classes", {}).items():
    for i in range(where["first"], where["first"] + where["count"]):
      owners.setdefault(i, []).append(label)
  out = ["## Keypoints", "", f"Every object carries {len(names)} keypoints (x, y normalized "
         "like the boxes; visibility 0 not labelled, 1 labelled but not visible, 2 visible); "
         "an object whose class has none carries them unlabelled. Read them with the research "
         f"TF OD API's `TfExampleDecoder(num_keypoints={len(names)})`.", ""]
  out += _table(["index", "name", "classes"], [
      (i, _text(name), ", ".join(_text(c) for c in owners.get(i, []))) for i, name in
      enumerate(names)], right=3) + [""]
  edges = layout.get("skeleton", [])
  if edges:
    out += ["Skeleton (index pairs): " + ", ".join(f"{a}-{b}" for a, b in edges) + ".", ""]
  return out


def render(manifest: Union[Manifest, Mapping]) -> str:
  """README.md for the output directory this manifest describes."""
  manifest = Manifest.of(manifest)
  output = _output(manifest)
  name = output.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or output
  splits, totals, errors = manifest.splits, manifest.totals, manifest.errors
  label_map = manifest.label_map
  split = default_split(manifest)
  array_record = manifest.setting("file_format") == record_files.ARRAY_RECORD

  out = [f"# {_text(name)}: dataset card", "",
         f"{'ArrayRecord' if array_record else 'TFRecord'} files of `tf.train.Example`"
         f"{' (each with an index file)' if manifest.setting('index_files') else ''}, "
         f"converted by beam-tfrecord "
         f"{manifest.version or '?'} on {manifest.created or '?'}. "
         f"Status: **{manifest.status or '?'}**. This card is generated from "
         f"`manifest.json`, which has the same numbers for programs.", ""]
  source = [("source format", _code(manifest.format or "None")),
            ("annotations", ", ".join(_code(i) for i in manifest.setting("inputs") or [])
             or "-"),
            ("images", ", ".join(_code(i) for i in manifest.setting("images") or [])
             or "next to the annotations"),
            ("schema", _code(manifest.schema)),
            ("writer", _code(manifest.sink)),
            ("command", _code(_command(manifest)))]
  renamed = views.renames(manifest)
  if renamed:
    source.append(("renamed features", ", ".join(f"{_code(a)} → {_code(b)}"
                                                 for a, b in renamed.items())))
  out += _table(["", ""], source, right=2) + [""]

  out += ["## Splits", ""]
  rows = [(_text(s), e.examples, e.objects, e.num_shards, f"{e.bytes / 1e6:.2f}")
          for s, e in splits.items()]
  rows.append(("**total**", totals.get("examples"), totals.get("objects"),
               manifest.num_shards,
               f"{(totals.get('bytes') or 0) / 1e6:.2f}"))
  out += _table(["split", "examples", "objects", "shards", "MB"], rows) + [""]
  extra = []
  if totals.get("clipped_boxes"):
    extra.append(f"{totals['clipped_boxes']} boxes were clipped to their image.")
  if totals.get("reoriented_images"):
    extra.append(f"{totals['reoriented_images']} images were rotated upright (EXIF).")
  out += ([" ".join(extra), ""] if extra else [])

  out += ["## Classes", "", "Objects (or, for classification, examples) per class and split; "
          "ids as in `label_map.pbtxt`.", ""]
  names = sorted(set(label_map) | {c for e in splits.values() for c in e.classes},
                 key=lambda c: (label_map.get(c, 1 << 62), c))
  rows = [(label_map.get(c, "-"), _text(c), *[e.classes.get(c, 0) for e in splits.values()],
           sum(e.classes.get(c, 0) for e in splits.values())) for c in names]
  out += _table(["id", "class", *map(_text, splits), "total"], rows, right=2) + [""]
  out += keypoints_section(manifest)

  out += ["## Features", "", "Keys with one value per example are read as "
          "`tf.io.FixedLenFeature([])`; lists (per object) as `tf.io.VarLenFeature`.", ""]
  features: Mapping[str, Mapping] = manifest.features
  out += _table(["key", "type", "values"], [
      (_code(k), _PY_TYPES.get(f["dtype"], f["dtype"]),
       "one per example" if f.get("kind") == "fixed" else "list")
      for k, f in features.items()], right=3) + [""]

  fmt = ("With array_record's data source (Grain's is the same) and TensorFlow to parse:"
         if array_record else "With plain TensorFlow (`tf.data`):")
  out += ["## Reading it", "", fmt, "", "```python",
          tf_data_snippet(manifest), "```", ""] + torch_lines(manifest) + [
          "With beam-tfrecord (feature spec from `manifest.json`, per-object lists dense):", "",
          "```python", "from beam_tfrecord import reader", "",
          "# a versioned output's DEST (convert --append) reads the version DEST/LATEST "
          "names, resolved once",
          f"dataset = reader.load({_py(output)}, split={_py(split)})",
          "for example in dataset.take(1):",
          "    print({k: v.shape for k, v in example.items()})",
          f"reader.show({_py(output)}, split={_py(split)}, n=16)  # PIL image of 16 examples",
          "```", ""]

  out += tfds_snippet(manifest)
  out += leakage_section(manifest)
  out += ["## Errors", ""]
  count = errors.count
  if not count:
    out += ["No input was rejected.", ""]
  else:
    files = ", ".join(_code(f, table=False) for f in errors.files)
    out += [f"{count} inputs were rejected or warned about (error rate "
            f"{errors.rate:.4g}); one JSON line each in "
            f"{files or '`errors-*.jsonl`'}.", ""]
    out += _table(["reason", "count"], [(_text(k), v) for k, v in sorted(
        errors.by_reason.items(), key=lambda kv: (-kv[1], kv[0]))]) + [""]
    levels: Dict[str, int] = errors.by_level
    if levels:
      out += ["By level: " + ", ".join(f"{_text(k)} {v}" for k, v in levels.items()) + ".",
              ""]
  return "\n".join(out)
