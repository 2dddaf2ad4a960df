"""Export a trained Transformer as a CTranslate2 model: python export.py checkpoint=PATH [quantization=int8] ... (or
nmt-export ...)

The command itself is nmt/cli/export.py; this file lets a checkout run it as `python export.py`."""

from nmt.cli.export import main

if __name__ == "__main__":
    main()
