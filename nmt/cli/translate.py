"""Translate text: echo "Ein Hund läuft." | nmt-translate checkpoint=outputs/.../best.pt (python translate.py)"""

import sys

import hydra
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from nmt import UserError
from nmt.config import CONFIGS, DecodeOptions, register
from nmt.evaluate import translate_file

register()  # the dataclasses of nmt/config.py, which configs/*.yaml fill in


@hydra.main(config_path=str(CONFIGS), config_name="translate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        translate_file(
            cfg.checkpoint,
            DecodeOptions.of(cfg),
            source=cfg.input,
            output=cfg.output,
            attention=cfg.attention,
            alignments=cfg.alignments,
            alignment_map=cfg.alignment_map,
            overwrite=cfg.overwrite,
        )
    except (UserError, OmegaConfBaseException) as error:
        sys.exit(f"error: {error}")
    except KeyboardInterrupt:  # files are written whole at the end (atomically), so none is left half written
        print("stopped by Ctrl-C; no translations were written", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
