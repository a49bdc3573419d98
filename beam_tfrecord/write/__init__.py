"""Write: image bytes read, converted and encoded, records written shard by shard.

In: PCollection[packed.Packed] and the ShardPlan. Out: per-shard stats and ErrorRecords; the
shard files in the run directory.
  transform.py     WriteShards (our sink: group by shard, one writer per shard) and
                   WriteWithBeamSink (Beam's WriteToTFRecord) (Beam)
  shard_writer.py  one shard's writer and the writer processes (Beam-free)
  encode.py        one image: read, probe/convert, Example records (Beam-free)
  images.py        image probing, decoding limits, resizing and re-encoding (Pillow)
  orientation.py   EXIF orientation and the boxes' frame
  catalog.py   a version's catalog, a Parquet partition per shard (--append)
"""
