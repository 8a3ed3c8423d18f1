"""Scripted baselines and oracles per env family, written against each env's public contract."""
