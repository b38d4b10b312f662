"""Input parsers. Each module turns one trace format into the canonical tables
(`traceview.schema`) and returns a `traceview.profile.Profile`.

Parser contract (every module here):
- `sniff(path: Path) -> bool`: True if the file is in this module's format (cheap check).
- `read(path: Path) -> Profile`: parse one file. A file may hold several ranks (nsys: one
  process per rank). The parser sets `meta.rank` when the file records it and
  `meta.rank_source` to how it knew; when it cannot know, it sets rank to -1 and the loader
  (`traceview.load`) assigns ranks from file names or order. Ids start at 0 per file; the
  loader renumbers them when merging files.
- Bad input raises `traceview.errors.TraceError(path, one_line_problem)`; never a raw exception
  for a problem in the input.
"""
