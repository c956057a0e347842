"""What the SQL backends (SQLite, PostgreSQL) share: statement text and the logic that runs it."""
