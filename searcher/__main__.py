"""``python -m searcher`` and the ``searcher`` command: the same command line."""

import sys


def run() -> None:
    """The ``searcher`` command. Its modules take about a second to load: Ctrl-C then ends
    it as Ctrl-C in a command does (one line, exit 130), not with a traceback."""
    try:
        from searcher.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("searcher: interrupted\n")
        sys.exit(130)
    main(prog_name="searcher")


if __name__ == "__main__":
    run()
