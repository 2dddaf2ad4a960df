"""Score a checkpoint: nmt-evaluate checkpoint=outputs/.../best.pt split=test (python evaluate.py in a checkout)"""

import hydra
from omegaconf import DictConfig

from nmt.cli import lean_hydra, refusals_and_ctrl_c
from nmt.config import CONFIGS, DecodeOptions, EvaluateConfig, register
from nmt.decoding.evaluate import evaluate

register()  # the dataclasses of nmt/config.py, which configs/*.yaml fill in
lean_hydra()


@hydra.main(config_path=str(CONFIGS), config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with refusals_and_ctrl_c("hypotheses", cfg):
        evaluate(cfg.checkpoint, DecodeOptions.of(cfg), **EvaluateConfig.task(cfg))


if __name__ == "__main__":
    main()
