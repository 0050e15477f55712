"""The `tuneproof` command: thin parsers that delegate to the library."""
