"""beam-tfrecord: labelled image datasets to sharded TFRecords with Apache Beam."""

__version__ = "0.1.0"
