"""The archive: one versioned file per target arch (docs/ARCHIVE.md is the contract)."""
from attnpack.archive.format import ArchiveError, archive_filename, FORMAT_MAJOR, FORMAT_MINOR
from attnpack.archive.reader import Archive, read_archive
from attnpack.archive.writer import Image, write_archive

__all__ = ["Archive", "ArchiveError", "Image", "archive_filename", "read_archive", "write_archive",
           "FORMAT_MAJOR", "FORMAT_MINOR"]
