"""The offline builder: enumerate variants, compile each step through its family's backend
(no GPU needed), pack one archive per target."""
from attnpack.builder.build import BuildError, BuildRequest, build_archives

__all__ = ["BuildError", "BuildRequest", "build_archives"]
