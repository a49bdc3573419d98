"""Runnable entry points, one per format: `python -m pipelines.coco_to_tfrecord --help`.

They take the same options as `beam-tfrecord convert` (without --format) plus any Beam
pipeline option, which is the form Dataflow templates and Airflow operators call.
"""
