"""Read back: what consumers and the read-only commands do with a finished output.

In: an output directory (its manifest.json and shards). Out: datasets, checks, statistics,
pictures. Beam-free: none of these import Apache Beam.
  reader.py  tf.data loading (public as beam_tfrecord.reader)
  views.py   records parsed without TensorFlow, through the schema's View (schemas/views)
  verify.py  `verify`: every shard against the manifest
  stats.py   `inspect`: statistics in one pass
  show.py    `show`: a grid of examples drawn
"""
