"""The store core: a validated batch (:mod:`~memcore.core.rows`), the in-memory table
(:mod:`~memcore.core.table`), ranking (:mod:`~memcore.core.rank`) and the API written once
(:mod:`~memcore.core.store`)."""
