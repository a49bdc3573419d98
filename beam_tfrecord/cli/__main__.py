"""`python -m beam_tfrecord.cli ...`: the `beam-tfrecord` command."""
from beam_tfrecord.cli import console

if __name__ == "__main__":
  console()
