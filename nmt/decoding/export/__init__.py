"""A trained model for use outside nmt: a Transformer as a CTranslate2 model folder (`ct2`: the specification from
our weights; `command`: nmt-export; `folder`: where it is written and what it notes; `check`: the export against our
decoder; `engine`: translation with an export, translate.py engine=ctranslate2)."""
