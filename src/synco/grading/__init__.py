"""Everything that judges text: answer extraction and matching (with math-verify in a bounded worker),
task-card parsing, the verifier, novelty and contamination, benchmark files. Torch-free; imports only
``synco.core``."""
