"""``python -m keepstate.cli``: the same as the ``keepstate`` command."""

from . import main

main()
