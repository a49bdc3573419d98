"""The consumer's API, at the import path every dataset card prints:

    from beam_tfrecord import reader
    dataset = reader.load("OUTPUT", "train")   # a tf.data.Dataset of parsed examples

The implementation lives with the rest of the read-back stage (readback/reader.py); this
module keeps the public path stable.
"""
from beam_tfrecord.readback.reader import (feature_description, load,
                                           shard_files, show)

__all__ = ["feature_description", "load", "shard_files", "show"]
