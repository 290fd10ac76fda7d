"""`python -m csctl`."""

from csctl.cli import main

main()
