"""Translate text: echo "Ein Hund läuft." | python translate.py checkpoint=outputs/.../best.pt (or nmt-translate)

The command itself is nmt/cli/translate.py; this file lets a checkout run it as `python translate.py`."""

from nmt.cli.translate import main

if __name__ == "__main__":
    main()
