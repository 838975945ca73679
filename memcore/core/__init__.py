"""The store core, backend-free (no file, no SQL): a validated batch (:mod:`~memcore.core.rows`),
a resolved query (:mod:`~memcore.core.query`), the in-memory table (:mod:`~memcore.core.table`),
ranking (:mod:`~memcore.core.rank`) and the API written once (:mod:`~memcore.core.store`)."""
