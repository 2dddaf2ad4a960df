"""The toolkit's three commands, each a Hydra app: train, evaluate and translate (console scripts nmt-train,
nmt-evaluate and nmt-translate; `python train.py` ... in a checkout)."""
