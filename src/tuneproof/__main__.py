"""`python -m tuneproof ...`: the same command line, for launchers (`torchrun -m tuneproof train R.toml`)."""

from tuneproof.cli.app import run

run()
