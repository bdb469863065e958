"""JSON-RPC plumbing under the LSP application: what pygls does not do the way arena-ls needs.

- ``framing``: our own frame reader (a wrong byte on the wire costs one message, not the session);
- ``transport``: ``ArenaProtocol``, pygls's ``LanguageServerProtocol`` with the envelope checked,
  the TCP token, and a session's state reset for the next client;
- ``serving``: stdio and loopback TCP, one client at a time;
- ``preencoded``: big answers encoded off the event loop;
- ``converter``: custom methods' params kept as plain JSON;
- ``bounded_errors`` and ``refusals``: bounded client values in errors, the project's errors as JSON-RPC's.

The pygls privates these modules override or touch are listed, with a fingerprint of pygls's own
code for each, in ``tests/protocol/test_pygls_privates.py``: a pygls upgrade that changes one fails
that test, naming it. Nothing here knows a run, a job or a gate.
"""
