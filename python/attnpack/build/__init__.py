"""The offline builder: enumerate variants, compile them (no GPU needed), pack archives."""
from attnpack.build.builder import BuildError, BuildRequest, build_archives

__all__ = ["BuildError", "BuildRequest", "build_archives"]
