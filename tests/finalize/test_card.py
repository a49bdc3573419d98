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


@pytest.mark.e2e
def test_card_snippets_run_as_written(coco_output, tmp_path):
  """Each output's card: its tf.data snippet, executed in a fresh Python, parses every record
  of the output, for the pipeline's od_api output and the other schemas' shapes."""
  outputs = [coco_output] + [SCHEMAS[s](tmp_path / s) for s in
                              ("coco-objects", "classification", "renamed")]
  script, expected = [], []
  for out in outputs:
    m = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    text = (out / "README.md").read_text(encoding="utf-8") if (out / "README.md").exists() \
        else card.render(m)
    snippet = _python_blocks(text)[0]
    assert "feature_description = {" in snippet
    script.append(f"exec({snippet!r}, {{}})")
    expected.append(f"{m['splits'][card.default_split(m)]['examples']} examples")
  result = run_python(["-c", "\n".join(script)])
  assert result.returncode == 0, result.stderr[-3000:]
  counts = [line for line in result.stdout.splitlines() if line.endswith(" examples")]
  assert counts == expected, result.stdout


@pytest.mark.e2e
def test_card_reader_snippet_runs(coco_output):
  text = (coco_output / "README.md").read_text(encoding="utf-8")
  snippet = _python_blocks(text)[1]
  result = run_python(["-c", snippet])
  assert result.returncode == 0, result.stderr[-3000:]
  assert "'image/object/bbox/xmin'" in result.stdout


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
