"""Evaluation: ``synco eval`` on benchmark files, its metrics, ``synco data``, and the label harness."""
