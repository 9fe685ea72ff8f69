"""``python -m toolbus``: the ``toolbus`` command, for when the script is not on PATH."""

from toolbus.cli import main

if __name__ == "__main__":
    main()
