"""``python -m greenbench``: the same command as ``greenbench`` (for an interpreter, such as a
virtual environment's, whose scripts folder is not on PATH)."""

from greenbench.cli import main

main(prog_name="greenbench")
