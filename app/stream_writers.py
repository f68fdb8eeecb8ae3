"""Who is streaming which reply: so start-up recovery relabels only rows whose writer is gone.

A reply row in state "streaming" belongs to the Store that began it. Each Store is a writer with an id
and an OS file lock (`<history>.writers/<id>.lock`, held for the Store's life; the OS drops it when the
process dies, even by kill -9). The side table `stream_writers(message_id, writer)` says which writer
owns which streaming row. Recovery turns a streaming row into "interrupted" only when its writer's lock
can be taken (the writer is gone) or the row has no writer recorded (rows from before this table).
Additive: its own table, created if missing; the messages schema is untouched.
"""
from __future__ import annotations

import os
import secrets
import sqlite3
from pathlib import Path

from filelock import FileLock, Timeout

_TABLE = "CREATE TABLE IF NOT EXISTS stream_writers (message_id INTEGER PRIMARY KEY, writer TEXT NOT NULL)"


class StreamWriters:
    def __init__(self, db: sqlite3.Connection, db_path: Path):
        self._db = db
        self.folder = db_path.with_name(db_path.name + ".writers")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.writer_id = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._lock = FileLock(self._lock_path(self.writer_id))
        self._lock.acquire(timeout=5)
        db.execute(_TABLE)

    def _lock_path(self, writer_id: str) -> Path:
        return self.folder / f"{writer_id}.lock"

    def claim(self, message_id: int) -> None:
        self._db.execute("INSERT OR REPLACE INTO stream_writers(message_id, writer) VALUES (?, ?)",
                         (message_id, self.writer_id))

    def release(self, message_id: int) -> None:
        self._db.execute("DELETE FROM stream_writers WHERE message_id=?", (message_id,))

    def is_alive(self, writer_id: str) -> bool:
        if writer_id == self.writer_id:
            return True
        path = self._lock_path(writer_id)
        if not path.exists():
            return False
        probe = FileLock(path)
        try:
            probe.acquire(timeout=0)
        except Timeout:
            return True                     # its owner holds it: still writing
        probe.release()
        try:
            path.unlink()
        except OSError:
            pass
        return False

    def recover(self) -> int:
        """Mark streaming rows of gone writers "interrupted"; returns how many."""
        rows = self._db.execute("SELECT m.id, w.writer FROM messages m LEFT JOIN stream_writers w "
                                "ON w.message_id = m.id WHERE m.state='streaming'").fetchall()
        alive: dict[str, bool] = {}
        gone = [row[0] for row in rows
                if row[1] is None or not alive.setdefault(row[1], self.is_alive(row[1]))]
        for message_id in gone:
            self._db.execute("UPDATE messages SET state='interrupted' WHERE id=? AND state='streaming'",
                             (message_id,))
            self.release(message_id)
        return len(gone)

    def close(self) -> None:
        self._lock.release()
        try:
            self._lock_path(self.writer_id).unlink()
        except OSError:
            pass
