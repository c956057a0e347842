"""Every upstream test we do not run, with the reason: the one list, applied to every target.

Keys are node ids relative to the sdist's root, with or without parameters (without: every
parametrisation). Only tests of a framework store's own internals, or of abilities outside the
interface keepstate implements, belong here; anything else is a bug to fix.
The selection that is not per test (langgraph: only the ``memory`` parametrisation of the tests
that take ``sync_checkpointer``/``async_checkpointer``) lives in its shim and docs/integrations.md.
"""

from __future__ import annotations

import sqlite3

_SQLITE_STORE = "SQLite internals: tests a private helper or the SQL text of SqliteStore"
_SQLITE_SESSION = "SQLite internals: reaches into SQLiteSession's connections, locks or tables"


def _each(reason: str, *node_ids: str) -> dict[str, str]:
    return dict.fromkeys(node_ids, reason)


DESELECTED: dict[str, dict[str, str]] = {
    "langgraph": {},
    "langgraph-checkpoint-sqlite": {
        "tests/test_store.py::test_vector_store_initialization": (
            f"{_SQLITE_STORE} (store.conn: looks for SqliteStore's vector table in sqlite_master)"
        ),
        "tests/test_store.py::test_nonnull_migrations": "SQLite internals: reads SqliteStore.MIGRATIONS",
        "tests/test_store.py::test_escape_glob_literal": f"{_SQLITE_STORE} (_escape_glob_literal)",
        "tests/test_store.py::test_namespace_match_pattern": f"{_SQLITE_STORE} (_namespace_match_pattern)",
        "tests/test_store.py::test_list_namespaces_prefix_uses_indexable_condition": (
            f"{_SQLITE_STORE} (the GLOB in BaseSqliteStore's list_namespaces query)"
        ),
    },
    "openai-agents": {
        "tests/memory/test_session.py::test_await_mutation_cancellation_hides_later_failure_without_loop_error": (
            "SQLite internals: tests sqlite_session's private _await_mutation helper"
        ),
        **_each(
            _SQLITE_SESSION,
            "tests/memory/test_session.py::test_sqlite_session_close_closes_worker_thread_connections",
            "tests/memory/test_session.py::test_sqlite_session_reaps_connections_from_exited_worker_threads",
            "tests/memory/test_session.py::test_sqlite_session_closes_retired_connections_before_the_next_allocation",
            "tests/memory/test_session.py::test_sqlite_session_keeps_connections_of_live_worker_threads",
            "tests/memory/test_session.py::test_sqlite_session_pop_item_skips_corrupt_most_recent",
            "tests/memory/test_session.py::test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows",
            "tests/memory/test_session.py::test_sqlite_session_get_items_limit_skips_corrupt_newest_rows",
            "tests/memory/test_session.py::test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows",
            "tests/memory/test_session.py::test_sqlite_session_file_lock_is_shared_across_instances",
            "tests/memory/test_session.py::test_sqlite_session_failed_add_items_releases_write_lock",
            "tests/memory/test_session.py::test_sqlite_session_failed_clear_session_rolls_back",
            "tests/memory/test_session.py::test_sqlite_session_failed_pop_item_releases_write_lock",
            "tests/memory/test_session.py::test_sqlite_session_rollback_failure_evicts_connection",
            "tests/memory/test_session.py::test_sqlite_session_close_retries_quarantined_connection",
            "tests/memory/test_session.py::test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome",
        ),
    },
}


_NO_EXTENSIONS = (
    "the framework's own SqliteStore loads sqlite-vec for its vector index, and this Python's sqlite3 "
    "is built without loadable extensions (no enable_load_extension)"
)
_WALL_CLOCK = (
    "times real sleeps against SqliteStore's own TTL (upstream marks it flaky, retries=3): on the framework's "
    "store it failed all four tries in one fresh-clone run on a loaded machine, a coin toss for a baseline; "
    "keepstate's targets run it"
)
FRAMEWORK_ONLY: dict[str, dict[str, str]] = {
    "langgraph-checkpoint-sqlite": _each(_WALL_CLOCK, "tests/test_ttl.py::test_ttl_refresh")
    | (
        {}
        if hasattr(sqlite3.Connection, "enable_load_extension")
        else _each(
            _NO_EXTENSIONS,
            "tests/test_store.py::test_basic_store_operations",
            "tests/test_store.py::test_embed_with_path",
            "tests/test_store.py::test_embed_with_path_operation_config",
            "tests/test_store.py::test_list_namespaces_operations",
            "tests/test_store.py::test_non_ascii",
            "tests/test_store.py::test_scores",
            "tests/test_store.py::test_search_items",
            "tests/test_store.py::test_vector_insert_with_auto_embedding",
            "tests/test_store.py::test_vector_search_edge_cases",
            "tests/test_store.py::test_vector_search_pagination",
            "tests/test_store.py::test_vector_search_with_filters",
            "tests/test_store.py::test_vector_update_with_embedding",
            "tests/test_async_store.py::test_basic_store_ops",
            "tests/test_async_store.py::test_embed_with_path",
            "tests/test_async_store.py::test_list_namespaces",
            "tests/test_async_store.py::test_search_items",
            "tests/test_async_store.py::test_vector_insert_with_auto_embedding",
            "tests/test_async_store.py::test_vector_search_edge_cases",
            "tests/test_async_store.py::test_vector_search_pagination",
            "tests/test_async_store.py::test_vector_search_with_filters",
            "tests/test_async_store.py::test_vector_store_initialization",
            "tests/test_async_store.py::test_vector_update_with_embedding",
        )
    ),
}
"""Tests the ``framework`` target (the framework's own store, our baseline) does not run, with the reason:
what it cannot run on this machine, and a timing test that is a coin toss on its store. keepstate's
targets run them all: its stand-in needs no extension."""
