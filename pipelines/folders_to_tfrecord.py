"""Class folders (ROOT/[SPLIT/]CLASS/IMAGE) to sharded TFRecords: `python -m pipelines.folders_to_tfrecord --input ROOT --output ...`."""
import sys

from beam_tfrecord.cli import main


def run(argv=None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  return main(["convert", "--format", "folders", *argv])


if __name__ == "__main__":
  sys.exit(run())
