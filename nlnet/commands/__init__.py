"""Command-line sub-commands (one module per command, registered in ``nlnet.cli.COMMANDS``)."""
