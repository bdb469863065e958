"""Editor features, one module each, each a ``LanguageFeature`` plug-in.

``arena_ls.protocol.app.create_server`` adds them to the server; the server
calls their hooks from one handler per LSP notification, each feature
isolated from the others (see ``arena_ls.protocol.feature``).
"""
