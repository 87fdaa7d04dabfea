"""The devops-rl cockpit: a Textual app over the same core as the command line.

`devops-rl tui` runs `devops_tui.app.run_cockpit`; the core never imports this package.
"""
