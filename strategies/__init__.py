"""Flower strategies, server-side evaluators and the ServerApp (thin adapters over fedpriv/)."""
