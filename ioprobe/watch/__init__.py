"""Watching a live loader while a job trains: ``api`` (watch, to_device, gpu_alone), the
collector every framework shares (``collector``), the pure stage rules (``stages``), one
adapter per framework (``torch``, ``dali``) and the ``ioprobe run`` hook (``run_hook``).

Importing this package imports nothing: each module is imported where it is used.
"""
