"""Judging, presenting and the command lines: verdicts from evidence (judge), the report and its figures
(present), and every command (cli; ``python -m analysis COMMAND``)."""
