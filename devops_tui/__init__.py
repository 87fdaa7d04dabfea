"""The devops-rl cockpit: a Textual app over the same core as the command line."""
