"""attnpack: precompiled attention bundles and the tools that build, inspect and tune them."""
__version__ = "0.1.0"
