"""The torch-free foundation every other layer builds on.

Typed records (``records``), sampling types (``sampling``), the learner contract
(``policy``: ``Policy`` / ``Learner`` / ``Sampler`` protocols, ``PolicyConfig``, ``GRPOConfig``),
per-request seeds (``seeds``), prompt templates (``prompts``), the thread setting
(``threads``), the persistent pool (``pool``), the capability report (``report``) and the
reward maths (``rewards``). Imports nothing else from synco.
"""
