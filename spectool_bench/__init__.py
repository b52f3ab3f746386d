"""spectool benchmarks: the offline OOLONG-style benchmark (`spectool bench oolong`)."""
