"""AMD AITER's hand-written assembly flash attention (fmha_v3 forward and backward) as an
attnpack family: prebuilt code objects from a pinned wheel (source.py), declared in kernels.py,
checked against their own metadata by verify.py. Built, not run (no AMD GPU here)."""
