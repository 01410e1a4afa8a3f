"""``fedpriv reproduce``: the sources' figures and tables as commands, each with its claim and a verdict (docs/reproductions.md)."""

from simulations.reproduce.entry import SCALES, VERDICTS, Entry, Scale, Verdict
from simulations.reproduce.page import write_page
from simulations.reproduce.registry import ENTRIES, get_entry
from simulations.reproduce.runner import Outcome, command_of, run_entry

__all__ = ["ENTRIES", "SCALES", "VERDICTS", "Entry", "Outcome", "Scale", "Verdict", "command_of", "get_entry",
           "run_entry", "write_page"]
