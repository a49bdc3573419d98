"""The record types and their encodings.

In: nothing (a leaf of the package). Out: the types every stage passes on.
  model.py   ImageAnnotation (one image, its objects, split, size), ObjectAnnotation, Box,
             ErrorRecord, InputError: the dataclasses sources emit and the writer reads
  plain.py   ImageAnnotation <-> plain tuples, Beam-free (writer processes rebuild it)
  packed.py  the compact tuple an image travels as after PrepareImages (routing fields first)
  coders.py  the Beam coder that encodes ImageAnnotation through plain.py across shuffles
  boxes.py   box normalization and --bbox-policy
  protos.py  tf.train.Example and StringIntLabelMap without TensorFlow, and the fast
             precomputed Example layout
"""
