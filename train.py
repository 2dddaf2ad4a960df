"""Train a model: python train.py model=bahdanau data=multi30k trainer.max_minutes=30 ..."""

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from nmt import Interrupted, UserError, distributed
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
    except Interrupted as stop:
        log.warning("%s", stop)
        print(f"stopped: {stop}", file=sys.stderr)
        sys.exit(128 + stop.signal_number)
    except KeyboardInterrupt:  # a second Ctrl-C, or one outside the training loop
        print("stopped by Ctrl-C; the checkpoints written so far are kept", file=sys.stderr)
        sys.exit(130)
    finally:
        distributed.teardown()
    return results.get("valid/best_bleu", 0.0)  # what a Hydra sweeper (e.g. Optuna) maximises


if __name__ == "__main__":
    main()
