"""One module per cockpit screen: runs, dataset, config, live, results (the App modes).

Plus the two modals they share: help and confirm.
"""
