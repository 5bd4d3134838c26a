"""The `gormes` command line: one module per command group, loaded on demand."""
