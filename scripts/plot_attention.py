"""Translate one sentence with a checkpoint and save its attention heatmap as a PNG.

python scripts/plot_attention.py checkpoint=outputs/bahdanau/.../best.pt text="Ein Mann fährt Fahrrad." output=a.png

Arguments are key=value like the other commands, but the text is taken as it is (commas included), not parsed by Hydra.
"""

import sys

from nmt import UserError
from nmt.config import DecodeOptions
from nmt.decoding.plot import image_format
from nmt.decoding.translator import Translator
from nmt.paths import output_file

OPTIONS = {"checkpoint": None, "text": None, "output": "attention.png", "device": "auto"}


def parse(arguments: list[str]) -> dict[str, str]:
    options = dict(OPTIONS)
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if not equals or key not in OPTIONS:
            raise UserError(f"{argument!r}: expected one of {', '.join(k + '=...' for k in OPTIONS)}")
        options[key] = value
    for key in ("checkpoint", "text"):
        if not options[key]:
            raise UserError(f'{key}= is required: python scripts/plot_attention.py checkpoint=PATH text="..."')
    return options


def main(arguments: list[str]) -> None:
    if {"-h", "--help"} & set(arguments):
        print(__doc__.strip())
        return
    options = parse(arguments)
    image_format(options["output"], "output")
    output = output_file(options["output"], "output", (options["checkpoint"],))
    translator = Translator.load(options["checkpoint"], DecodeOptions(device=options["device"], precision="fp32"))
    if not translator.has_attention():  # before decoding, as every refusal
        raise UserError(f"{options['checkpoint']}: this model has no attention to plot")
    translations, hypotheses = translator.search_lines([options["text"]])
    figure = translator.alignment_figure(options["text"], translations[0], hypotheses[0])
    figure.savefig(output)
    print(f"{translations[0]}\nattention heatmap written to {options['output']}")


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except UserError as error:
        sys.exit(f"error: {error}")
