"""Train a model: python train.py model=bahdanau data=multi30k trainer.max_minutes=30 ..."""

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from nmt import UserError, distributed
from nmt.config import register
from nmt.experiment import train

log = logging.getLogger("nmt")
register()  # the dataclasses of nmt/config.py, which configs/*.yaml fill in


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float:
    try:
        results = train(cfg, HydraConfig.get().runtime.output_dir)
    except (UserError, OmegaConfBaseException) as error:
        log.error("%s", error)
        sys.exit(f"error: {error}")
    finally:
        distributed.teardown()
    return results.get("valid/best_bleu", 0.0)  # what a Hydra sweeper (e.g. Optuna) maximises


if __name__ == "__main__":
    main()
