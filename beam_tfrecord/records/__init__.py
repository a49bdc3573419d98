"""The record types and their encodings.

In: nothing (the first stage: it imports only the base). Out: the types every stage passes on.
  model.py   ImageAnnotation (one image, its objects, split, size), ObjectAnnotation, Box,
             ErrorRecord, InputError: the dataclasses sources emit and the writer reads;
             DEFAULT_SPLIT and split names; PreparedImage (an image as the writer holds it)
  manifest.py  manifest.json as typed values (Manifest, SplitInfo, ShardInfo, ErrorSummary)
  label_map.py label_map.pbtxt parsed and written (pure)
  masks.py   segmentations as JSON on an object, rasterized to PNG masks
  plain.py   ImageAnnotation <-> plain tuples, Beam-free (writer processes rebuild it)
  packed.py  the compact tuple an image travels as after PrepareImages (routing fields first)
  coders.py  the Beam coder that encodes ImageAnnotation through plain.py across shuffles
  boxes.py   box normalization and --bbox-policy
  protos.py  tf.train.Example and StringIntLabelMap without TensorFlow, and the fast
             precomputed Example layout
"""
