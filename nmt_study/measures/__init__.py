"""The study's measurements, one module each, run as `python -m nmt_study measure NAME` (nmt_study/cli/measure.py)."""

import argparse


def options(module: str, doc: str) -> argparse.ArgumentParser:
    """The option parser of the measurement `module` (its __name__): its command as the usage line's name and its
    docstring, as written, as the help."""
    return argparse.ArgumentParser(
        prog=f"python -m nmt_study measure {module.rsplit('.', 1)[-1]}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def record_option(parser: argparse.ArgumentParser, names: tuple[str, ...], doing: str) -> None:
    """--record [NAME]: also save the figures as results/measured/<NAME>.json (`names`, the first the default: the
    records a machine of another kind writes), from which docs/ render their tables."""
    parser.add_argument(
        "--record",
        nargs="?",
        const=names[0],
        choices=names,
        help=f"{doing} results/measured/<name>.json (one of {', '.join(names)}; default {names[0]})",
    )
