"""arena-ls benchmarks: ``python -m benchmarks [--quick]``.

Each benchmark drives the real ``arena-ls`` over stdio as an editor would,
next to a reference (supervisord, the floor of a trainer writing to
``/dev/null``, a bare pygls server, ``ast.parse``), and reports every figure
as a median with its spread. See ``docs/performance.md``.
"""
