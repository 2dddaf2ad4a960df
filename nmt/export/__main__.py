"""python -m nmt.export checkpoint=PATH ...: the nmt-export command (nmt/cli/export.py)."""

from nmt.cli.export import main

if __name__ == "__main__":
    main()
