"""The framework-neutral machinery of watching a live loader: the collector every framework's
wrapper fills (``collector``), the record it assembles (``assemble``), the GPU side
(``gpu_side``), the stage rules of a watched run (``stages``), the heaviest samples kept
(``reservoir``), the worker's message (``message``) and memory-mapped files (``mapped``), and
the live panel (``live``). The wrappers themselves, one module per framework, are in
``ioprobe.loaders``.

Importing this package imports nothing: each module is imported where it is used.
"""
