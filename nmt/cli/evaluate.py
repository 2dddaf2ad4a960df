"""Score a checkpoint: nmt-evaluate checkpoint=outputs/.../best.pt split=test (python evaluate.py in a checkout)"""

import sys

import hydra
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from nmt import UserError
from nmt.config import CONFIGS, DecodeOptions, register
from nmt.evaluate import evaluate

register()  # the dataclasses of nmt/config.py, which configs/*.yaml fill in


@hydra.main(config_path=str(CONFIGS), config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        evaluate(
            cfg.checkpoint,
            DecodeOptions.of(cfg),
            split=cfg.split,
            source=cfg.source,
            reference=cfg.reference,
            data_dir=cfg.data_dir,
            output=cfg.output,
            alignments=cfg.alignments,
            alignment_map=cfg.alignment_map,
            overwrite=cfg.overwrite,
        )
    except (UserError, OmegaConfBaseException) as error:
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:  # files are written whole at the end (atomically), so none is left half written
        print("stopped by Ctrl-C; no hypotheses were written", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
