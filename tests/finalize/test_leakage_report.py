"""The manifest's `leakage` (records/manifest.Leakage) as the summary line and the card say it:
counts of copies, images not compared (kept by --incremental/--append), and nothing at all for
a manifest from before the check."""
from __future__ import annotations

import json

import pytest

from beam_tfrecord.finalize import card
from beam_tfrecord.finalize import output as outputs
from beam_tfrecord.records.manifest import Leakage, Manifest

BASE = {"version": "0.1.0", "status": "ok", "format": "csv", "config": {"output": "/o"},
        "splits": {"train": {"examples": 4, "images": 4, "shards": []}},
        "totals": {"examples": 4, "images": 4, "objects": 0, "bytes": 0, "clipped_boxes": 0,
                   "reoriented_images": 0}}


def _manifest(leakage=None) -> Manifest:
  data = dict(BASE, **({"leakage": leakage} if leakage is not None else {}))
  return Manifest.from_json(json.loads(json.dumps(data)))


def test_round_trip_and_types():
  found = {"leaked_across_splits": 1, "duplicate_content": 2, "images_checked": 4,
           "images_unchecked": 0}
  manifest = _manifest(found)
  assert manifest.leakage == Leakage(1, 2, 4, 0) and manifest.leakage.copies == 3
  assert manifest.to_json()["leakage"] == found
  assert list(manifest.to_json()).index("leakage") == list(manifest.to_json()).index("errors") + 1
  assert "leakage" not in _manifest().to_json()  # an older manifest stays as it was
  with pytest.raises(ValueError, match="leakage.duplicate_content"):
    _manifest(dict(found, duplicate_content="2"))


def test_summary_line():
  text = outputs.summary(_manifest({"leaked_across_splits": 1, "duplicate_content": 2,
                                    "images_checked": 4}), "/o")
  assert "  identical bytes: 1 leaked across splits, 2 duplicate content within a split\n" in \
      text + "\n"
  kept = outputs.summary(_manifest({"images_checked": 1, "images_unchecked": 3}), "/o")
  assert ("identical bytes: 0 leaked across splits, 0 duplicate content within a split; "
          "1 images compared, 3 kept from the earlier output not read") in kept
  for quiet in (_manifest({"images_checked": 4}), _manifest()):
    assert "identical bytes" not in outputs.summary(quiet, "/o")


def test_card_section():
  text = card.render(_manifest({"leaked_across_splits": 1, "duplicate_content": 2,
                                "images_checked": 4, "images_unchecked": 1}))
  section = text.split("## Identical images\n\n", 1)[1].split("\n", 1)[0]
  assert section.startswith("Of 4 images compared by their bytes (SHA-256), 1 also have a "
                            "copy in another split")
  assert "2 are copies under another name" in section
  assert section.endswith("1 images kept from the earlier output were not read, and not "
                          "compared.")
  clean = card.render(_manifest({"images_checked": 4}))
  assert "No two of the 4 images compared have identical bytes" in clean
  assert "## Identical images" not in card.render(_manifest())
