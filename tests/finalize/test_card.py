"""finalize/card.py: the dataset card (README.md in every output directory): its numbers equal
the manifest's, its snippets run as written, and it is one of the run's own files."""
from __future__ import annotations

import json
import re
from typing import List

import pytest
from conftest import run_cli, run_python
from handmade_outputs import SCHEMAS, _spaced_dataset

from beam_tfrecord import cli
from beam_tfrecord.finalize import card


def _card_table(text: str, heading: str) -> List[List[str]]:
  section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
  rows = [line for line in section.splitlines() if line.startswith("|")][2:]
  return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _python_blocks(text: str) -> List[str]:
  return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.e2e
def test_card_numbers_equal_the_manifest(coco_output):
  text = (coco_output / "README.md").read_text(encoding="utf-8")
  m = json.loads((coco_output / "manifest.json").read_text(encoding="utf-8"))
  assert text == card.render(m)
  assert m["created"] in text and "Status: **ok**" in text
  assert "`beam-tfrecord convert --format=coco" in text  # the command, as given
  splits = {row[0]: row[1:] for row in _card_table(text, "Splits")}
  for split, entry in m["splits"].items():
    assert splits[split] == [str(entry["examples"]), str(entry["objects"]),
                             str(entry["num_shards"]), f"{entry['bytes'] / 1e6:.2f}"]
  assert splits["**total**"][:2] == [str(m["totals"]["examples"]), str(m["totals"]["objects"])]
  classes = {row[1]: row for row in _card_table(text, "Classes")}
  assert sorted(classes) == sorted(m["label_map"])
  for name, row in classes.items():
    counts = [m["splits"][s]["classes"].get(name, 0) for s in m["splits"]]
    assert row == [str(m["label_map"][name]), name, *map(str, counts), str(sum(counts))]
  keys = {row[0].strip("`"): row[1:] for row in _card_table(text, "Features")}
  assert set(keys) == set(m["features"])
  assert keys["image/object/bbox/xmin"] == ["float32", "list"]
  assert keys["image/encoded"] == ["bytes", "one per example"]
  assert "No input was rejected." in text


def test_card_lists_errors_by_reason():
  manifest = {"splits": {}, "config": {"output": "/x"}, "features": {},
              "errors": {"count": 3, "rate": 0.25, "by_reason": {"missing_image": 2,
                                                                 "unknown_class": 1},
                         "by_level": {"image": 2, "object": 1}, "files": ["errors-0.jsonl"]}}
  text = card.render(manifest)
  assert _card_table(text, "Errors") == [["missing_image", "2"], ["unknown_class", "1"]]
  assert "3 inputs were rejected" in text and "`errors-0.jsonl`" in text


# Every python block the tests below run, in one fresh Python (TensorFlow is imported once,
# not once a test): each block exec'd as written with globals of its own, its output between
# markers, a block that raises reported in its own part and the next ones still run.
_MARK = "@@@ card block "
_FAILED = "@@@ this block raised"


def _run_blocks(blocks):
  """{name: what the block printed (its traceback too, and _FAILED, if it raised)} of
  [(name, code)] run in one fresh Python; asserts the interpreter itself ended well."""
  script = ["import sys, traceback"]
  for name, code in blocks:
    script += [f"print({_MARK + name!r}, flush=True)",
               "try:",
               f"  exec({code!r}, {{}})",
               "except BaseException:",
               "  traceback.print_exc(file=sys.stdout)",
               f"  print({_FAILED!r})"]
  result = run_python(["-c", "\n".join(script)])
  assert result.returncode == 0, result.stderr[-3000:]
  parts = result.stdout.split(_MARK)[1:]
  outputs = {part.split("\n", 1)[0]: part.split("\n", 1)[1] for part in parts}
  assert list(outputs) == [name for name, _ in blocks], result.stdout[-3000:]
  return outputs


def _ran(printed: str) -> str:
  assert _FAILED not in printed, printed[-3000:]
  return printed


# The custom runs: shard names from a template, features renamed, another schema.
CUSTOM = {
    "template": ["--shard-name-template", "{split}_{index}.rec", "--num-shards", "2"],
    "tutorial-renamed": ["--schema", "tutorial", "--feature-names",
                         "depth=channels,image_raw=image"],
    "template-and-od-renamed": ["--shard-name-template", "{split}.{index:03d}.bin",
                                "--feature-names",
                                "image/encoded=jpeg,image/object/class/text=names"],
}
_SHOW = ("\nimport PIL.Image\nfrom beam_tfrecord import reader\n"
         "assert isinstance(reader.show({out!r}, n=4), PIL.Image.Image)\nprint('shown')\n")


def _custom_output(root, options):
  out = root / "out"
  if "tutorial" in options:  # one class per image: class folders
    from PIL import Image
    for i, name in enumerate(["cat", "cat", "dog", "dog", "dog"]):
      (root / "data" / name).mkdir(parents=True, exist_ok=True)
      Image.new("RGB", (40 + i, 30), (20 * i, 90, 160)).save(root / "data" / name / f"{i}.png")
    source = ["--format=folders", f"--input={root / 'data'}"]
  else:
    source = ["--format=coco", *_spaced_dataset(root / "data").inputs("coco")]
  run_cli("convert", *source, f"--output={out}", *options)
  return out


@pytest.fixture(scope="module")
def card_blocks(coco_output, tmp_path_factory):
  """The cards' python blocks, run once for the module: the shared COCO run's (its tf.data
  and reader blocks), the other schemas' tf.data blocks, and every block of each CUSTOM run
  followed by reader.show on it. Returns (outputs by name, printed by block name)."""
  root = tmp_path_factory.mktemp("cards")
  outputs = {"od_api": coco_output}
  outputs.update({s: SCHEMAS[s](root / s) for s in ("coco-objects", "classification",
                                                    "renamed")})
  outputs.update({name: _custom_output(root / name, options)
                  for name, options in CUSTOM.items()})
  blocks = []
  for name, out in outputs.items():
    m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    text = (out / "README.md").read_text(encoding="utf-8") if (out / "README.md").exists() \
        else card.render(m)
    found = _python_blocks(text)
    if name in CUSTOM:
      assert len(found) == 2, name
      blocks += [(f"{name} {i}", b) for i, b in enumerate(found)]
      blocks.append((f"{name} show", _SHOW.format(out=str(out))))
    else:
      blocks.append((f"{name} 0", found[0]))
      if name == "od_api":
        blocks.append((f"{name} 1", found[1]))
  return outputs, _run_blocks(blocks)


def _expected_count(out) -> str:
  m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
  return f"{m['splits'][card.default_split(m)]['examples']} examples"


@pytest.mark.e2e
def test_card_snippets_run_as_written(card_blocks):
  """Each output's card: its tf.data snippet, executed in a fresh Python, parses every record
  of the output, for the pipeline's od_api output and the other schemas' shapes."""
  outputs, printed = card_blocks
  for name in ("od_api", "coco-objects", "classification", "renamed"):
    out = outputs[name]
    text = (out / "README.md").read_text(encoding="utf-8") if (out / "README.md").exists() \
        else card.render(json.loads((out / "manifest.json").read_text(encoding="utf-8")))
    assert "feature_description = {" in _python_blocks(text)[0], name
    counts = [line for line in _ran(printed[f"{name} 0"]).splitlines()
              if line.endswith(" examples")]
    assert counts == [_expected_count(out)], (name, printed[f"{name} 0"])


@pytest.mark.e2e
def test_card_reader_snippet_runs(card_blocks):
  _, printed = card_blocks
  assert "'image/object/bbox/xmin'" in _ran(printed["od_api 1"])


@pytest.mark.e2e
def test_the_card_is_one_of_the_runs_own_files(tmp_path, capsys):
  """--overwrite replaces our card (the manifest lists it); a README.md of the user's own in
  the output directory is foreign: the run refuses and leaves it as it was."""
  ds = _spaced_dataset(tmp_path / "data")
  out = tmp_path / "out"
  run_cli("convert", "--format=coco", *ds.inputs("coco"), f"--output={out}")
  manifest = json.loads((out / "manifest.json").read_text())
  assert "README.md" in manifest["files"]
  first = (out / "README.md").read_text(encoding="utf-8")
  run_cli("convert", "--format=coco", *ds.inputs("coco"), f"--output={out}", "--overwrite")
  again = json.loads((out / "manifest.json").read_text())
  assert again["run_id"] != manifest["run_id"]
  card = (out / "README.md").read_text(encoding="utf-8")
  assert card != first and again["created"] in card and "--overwrite" in card
  mine = tmp_path / "mine"
  mine.mkdir()
  (mine / "README.md").write_text("my notes")
  capsys.readouterr()
  assert cli.main(["convert", "--format=coco", *ds.inputs("coco"), f"--output={mine}",
                   "--overwrite"]) == 2
  assert "README.md" in capsys.readouterr().err
  assert [p.name for p in mine.iterdir()] == ["README.md"]
  assert (mine / "README.md").read_text() == "my notes"


NASTY = ["a|b", "two\nlines", "<script>alert(1)</script>", "back`tick`s", "*bold* & [link](x)"]


def _rendered_tables(text: str) -> List[List[List[str]]]:
  """Every table of the card as a Markdown renderer (CommonMark + GFM tables) sees it: rows of
  cell texts, HTML entities decoded and tags (code) removed."""
  import html

  from markdown_it import MarkdownIt
  md = MarkdownIt("commonmark").enable("table")
  tables, row, inside = [], None, False
  for token in md.parse(text):
    if token.type == "table_open":
      tables.append([])
    elif token.type == "tr_open":
      row = []
    elif token.type == "tr_close":
      tables[-1].append(row)
    elif token.type in ("th_open", "td_open"):
      inside = True
    elif token.type in ("th_close", "td_close"):
      inside = False
    elif token.type == "inline" and inside:
      row.append(html.unescape(re.sub(r"<[^>]+>", "", md.renderInline(token.content))))
  return tables


def test_card_escapes_names_and_paths_for_tables_and_html():
  """Class, split and path names with |, a newline, HTML and backquotes: every table keeps
  its columns, no tag of the input reaches the HTML, each name reads as written."""
  from markdown_it import MarkdownIt
  label_map = {name: i for i, name in enumerate(NASTY, start=1)}
  manifest = {
      "schema": "classification", "format": "folders", "status": "ok",
      "config": {"output": "/data/o|ut<b>", "inputs": ["/in/x|y\nz<i>.json"],
                 "images": ["/img/`root`"]},
      "label_map": label_map, "features": {"image/encoded": {"dtype": "string",
                                                             "kind": "fixed"}},
      "splits": {"tr|ain<u>": {"examples": 5, "objects": 0, "num_shards": 1, "bytes": 10,
                               "classes": {n: 1 for n in NASTY}, "shards": []}},
      "totals": {"examples": 5, "objects": 0, "bytes": 10},
      "errors": {"count": 0}}
  text = card.render(manifest)
  rendered = MarkdownIt("commonmark").enable("table").render(text)
  for tag in ("<script", "<b>", "<i>", "<u>"):
    assert tag not in rendered, tag
  source, splits, classes, features = _rendered_tables(text)
  for table in (source, splits, classes, features):
    assert len({len(row) for row in table}) == 1, table  # no row split, no extra column
  assert [row[1] for row in classes[1:]] == [n.replace("\n", "\\n") for n in NASTY]
  assert classes[0][2] == splits[1][0] == "tr|ain<u>"
  cells = {row[0]: row[1] for row in source}
  assert cells["annotations"] == "/in/x|y\\nz<i>.json"
  assert cells["images"] == "/img/'root'"  # a backquote cannot live in a code span
  title = text.splitlines()[0]
  assert "<b>" not in title and "&lt;b&gt;" in title and "\\|" in title
  # the output path in the code blocks: valid Python, and no backquote closes the fence
  blocks = _python_blocks(text)
  assert len(blocks) == 2
  for block in blocks:
    compile(block, "card", "exec")
    assert "```" not in block


def test_card_names_renamed_features_from_the_runs_config():
  """The pipeline records --feature-names in the manifest's config ('OLD=NEW,...'): the card
  shows them and its snippet decodes the renamed image key."""
  manifest = {"schema": "tutorial", "config": {"output": "o",
                                               "feature_names": "depth=channels,image_raw=image"},
              "features": {k: {"dtype": d, "kind": "fixed"} for k, d in (
                  ("height", "int64"), ("width", "int64"), ("channels", "int64"),
                  ("label", "int64"), ("image", "string"))},
              "splits": {}, "label_map": {}}
  text = card.render(manifest)
  assert "| renamed features | `depth` → `channels`, `image_raw` → `image` |" in text
  assert "example['image']" in card.tf_data_snippet(manifest)


@pytest.mark.e2e
@pytest.mark.parametrize("name", list(CUSTOM))
def test_card_code_blocks_run_on_custom_shard_names_and_renamed_features(card_blocks, name,
                                                                         tmp_path, capsys):
  """Every python block of the card, run as written in a fresh Python, reads all records of
  the output: shard names from the manifest, features by their final names; reader.show
  draws them (the card's second block), `show` and `inspect` read them."""
  options = CUSTOM[name]
  outputs, printed = card_blocks
  out = outputs[name]
  m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
  shards = [s["path"] for e in m["splits"].values() for s in e["shards"]]
  default_names = [bool(re.search(r"-\d{5}-of-\d{5}", p)) for p in shards]
  assert shards and set(default_names) == {"--shard-name-template" not in options}
  for i in (0, 1):
    _ran(printed[f"{name} {i}"])
  assert _expected_count(out) in printed[f"{name} 0"].splitlines()
  assert "shown" in _ran(printed[f"{name} show"]).splitlines()
  picture = tmp_path / "show.png"
  assert cli.main(["show", str(out), "--output", str(picture), "-n", "4"]) == 0
  assert picture.stat().st_size > 0
  capsys.readouterr()
  assert cli.main(["inspect", str(out), "--json"]) == 0
  captured = capsys.readouterr()
  assert "Traceback" not in captured.err, captured.err[-3000:]
  stats = json.loads(captured.out)
  assert stats["records_match_manifest"]
  assert {s: v["records"] for s, v in stats["splits"].items()} == \
      {s: e["examples"] for s, e in m["splits"].items()}
