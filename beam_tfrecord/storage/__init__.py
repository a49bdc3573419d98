"""Paths and files on every file system Beam knows (local, gs://, s3://).

In: paths and URIs. Out: sizes, listings and bytes. Beam-free to import (Beam's FileSystems is
imported where a remote path is touched).
  paths.py     joining, the image-root containment checks (resolve), sizes, SPLIT= prefixes
  files.py     exists, one-level and recursive listings, text and head reads, image bytes
  gcs.py       the Cloud Storage client (one per process)
  prefetch.py  bounded read-ahead of image bytes
  lines.py     byte ranges of a file read as whole lines (the line formats' split reads)
  spill.py     partitioned spill files on local disk
  layout.py    the names of an output directory's entries, a run's scratch, kill_point
  progress.py  counter files in a run's staging directory, and the progress line
"""
