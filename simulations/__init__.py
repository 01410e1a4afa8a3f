"""Experiment configs, runners and the fedpriv CLI."""
