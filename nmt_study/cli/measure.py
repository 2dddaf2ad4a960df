"""The study's measurements of speed, memory and calibration: python -m nmt_study measure NAME [options].

  speed              training tokens/s, peak memory and decoding sentences/s of each model (make bench)
  joeynmt            Joey NMT's speed, read from what ../shared/peers/joeynmt measured, beside ours
  validation_cost    the valid loss pass with and without the gradients the fused loss used to form
  decode_memory      peak memory of decoding one long line, greedy or beam
  export             decoding speed and BLEU of a Transformer exported to CTranslate2, beside ours
  long_input         how decoding time grows with the length of the input
  attention_kernels  which kernel the Transformer's attention runs, and what a sliding window saves
  loader_rate        how fast training batches reach the training process (what a GPU's update waits on)
  alignment_offset   whether a model's attention sits a fixed number of words off the words it translates
  calibration        how often the seed-level test calls two identical variants different, in simulation
  cpu_rate           how fast the converged study's two arms train on this CPU, fp32, at one and two threads

Each is a module of nmt_study/measures/; `python -m nmt_study measure NAME --help` lists its options, and `--record`
(where a measurement has it) saves results/measured/<name>.json, from which docs/ render their tables. Run a
measurement alone on the machine: a busy machine gives noise, not figures.
"""

from __future__ import annotations

from importlib import import_module

from nmt import UserError

MEASURES = (
    "speed",
    "joeynmt",
    "validation_cost",
    "decode_memory",
    "export",
    "long_input",
    "attention_kernels",
    "loader_rate",
    "alignment_offset",
    "calibration",
    "cpu_rate",
)


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return
    if argv[0] not in MEASURES:
        raise UserError(
            f"python -m nmt_study measure {argv[0]}: no such measurement; name one first: {', '.join(MEASURES)} "
            "(the speed benchmark is `python -m nmt_study measure speed`)"
        )
    import_module(f"nmt_study.measures.{argv[0]}").main(argv[1:])
