"""``python -m keepstate``: the same as the ``keepstate`` command."""

from .cli import main

main()
