"""The ``autotune`` command line: a thin layer over loopnest's Python API."""
import argparse


def main(argv=None):
    """Entry point of the ``autotune`` console script."""
    parser = argparse.ArgumentParser(prog="autotune", description="loopnest autotuner and tuning database")
    parser.parse_args(argv)


if __name__ == "__main__":
    main()
