"""This host's processes: which one a pid is, and that a run's workers and guards end with it."""
