"""Memory: writing observations, extracting them from runs, mirroring them as markdown."""
