"""Tuning: the per-arch database of measured winners, and `attnpack tune` that measures them."""
