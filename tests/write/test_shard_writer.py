"""write/shard_writer.py: how many writer processes a plan gets."""
from __future__ import annotations


def test_processes_for_a_plan():
  from beam_tfrecord.write.shard_writer import processes_for
  assert processes_for(2, 20_000, 12, 1000) == 2
  assert processes_for(2, 1_500, 12, 1000) == 1      # too few images to pay for a start
  assert processes_for(8, 20_000, 3, 1000) == 3      # never more than shards
  assert processes_for(2, 8, 4, 0) == 2              # asked for: no image minimum
  assert processes_for(4, 0, 0, 0) == 1
