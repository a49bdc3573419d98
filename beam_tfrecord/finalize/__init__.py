"""Finalize: the run's report and the swap into the output directory, and what guards it.

In: shard stats, error counts, the label map, the plan. Out: label_map.pbtxt, README.md (the
dataset card) and manifest.json in the run directory, which then replaces the output.
  transform.py    Finalize (Beam)
  manifest.py     per-split entries, error rate, outcome (pure)
  output.py       ownership checks, the journaled swap, recovery, the summary line
  lock.py         the output's lock
  card.py         the dataset card
  fingerprint.py  --if-changed: the sources' fingerprint
  tfds_layout.py  --layout tfds: dataset_info.json, features.json (pure)
"""
