"""Export a checkpoint: nmt-export checkpoint=outputs/.../best.pt quantization=int8 (python export.py)"""

import hydra
from omegaconf import DictConfig

from nmt.cli import lean_hydra, refusals_and_ctrl_c
from nmt.config import CONFIGS, register
from nmt.decoding.export.command import export

register()  # the dataclasses of nmt/config.py, which configs/*.yaml fill in
lean_hydra()


@hydra.main(config_path=str(CONFIGS), config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with refusals_and_ctrl_c("export files", cfg):
        export(
            cfg.checkpoint,
            cfg.format,
            cfg.quantization,
            cfg.output,
            cfg.overwrite,
            cfg.check,
            cfg.tolerance,
            cfg.data_dir,
            cfg.threads,
        )


if __name__ == "__main__":
    main()
