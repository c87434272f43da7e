"""The parser sphinx-argparse documents: the one `frametrace --help` prints."""
from frametrace import cli


def parser():
    # build_parser is the public name; _parser is its earlier name.
    build = getattr(cli, "build_parser", None)
    return build() if build is not None else cli._parser()[0]
