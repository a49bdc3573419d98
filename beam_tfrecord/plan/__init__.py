"""Plan: which shard of which split every image goes to, decided once before writing.

In: PCollection[packed.Packed] (split and size set). Out: one ShardPlan (a side input).
  shard_plan.py  shard counts and boundaries (pure)
  naming.py      shard file names and --shard-name-template checks (pure)
  transform.py   PlanShards (Beam)
"""
