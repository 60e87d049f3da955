"""`python -m photosearch` runs the CLI."""

from photosearch.cli import main

main()
