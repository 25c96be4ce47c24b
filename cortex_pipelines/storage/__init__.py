"""DuckDB persistence: short transactions, lock retries, versioned migrations."""

from cortex_pipelines.storage.db import Database, utcnow

__all__ = ["Database", "utcnow"]
