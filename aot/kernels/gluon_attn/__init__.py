"""Gluon dual-wave (ping-pong) attention forward for sm_90; see docs/gluon-family.md."""
