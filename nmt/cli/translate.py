"""Translate text: echo "Ein Hund läuft." | nmt-translate checkpoint=outputs/.../best.pt (python translate.py)"""

import hydra
from omegaconf import DictConfig, OmegaConf

from nmt.cli import lean_hydra, refusals_and_ctrl_c
from nmt.config import CONFIGS, DecodeOptions, TranslateConfig, register
from nmt.decoding.evaluate import translate_file

register()  # the dataclasses of nmt/config.py, which configs/*.yaml fill in
lean_hydra()


@hydra.main(config_path=str(CONFIGS), config_name="translate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with refusals_and_ctrl_c("translations", cfg):
        checkpoint = None if OmegaConf.is_missing(cfg, "checkpoint") else cfg.checkpoint  # none with model_dir=
        translate_file(checkpoint, DecodeOptions.of(cfg), **TranslateConfig.task(cfg))


if __name__ == "__main__":
    main()
