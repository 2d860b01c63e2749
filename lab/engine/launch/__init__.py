"""From what a person asks for to a started run: options, config, the command, the run folder, the
launch."""
