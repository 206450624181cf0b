"""Sub-commands of the nlnet CLI that drive the engine."""
