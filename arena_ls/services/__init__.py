"""Services of one workspace, composed: no LSP here (the protocol layer shapes their results as wire).

A floor above the lifecycle, the gates, health, the insights and the cluster,
below ``protocol``: ``tests/unit/test_layers.py`` keeps it from importing the
protocol layer or the client.
"""
