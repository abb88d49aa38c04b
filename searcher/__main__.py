"""``python -m searcher``: the same command line as ``searcher``."""

from searcher.cli import main

main(prog_name="searcher")
