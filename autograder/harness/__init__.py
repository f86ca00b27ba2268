"""Harnesses over whole runs: ``demo`` (grades the sample submissions) and ``benchmark``."""
