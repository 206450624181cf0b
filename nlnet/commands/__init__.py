"""CLI sub-commands (each module: configure_parser, main, optional EXAMPLES)."""
