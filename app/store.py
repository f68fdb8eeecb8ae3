"""Conversation history in SQLite (WAL): the user's data, written so that a crash never loses a chat.

Contract (see ../shared/docs/SAFETY.md, "Conversations are the user's data"):
- the user's message is committed before generation starts (`add_message`);
- a reply is a row created in state "streaming" (`begin_reply`), its text saved as it grows
  (`save_partial`, the caller throttles to ~0.5 s), and closed with `finish_reply`;
- opening the store turns rows left "streaming" by a writer that is gone into "interrupted"
  (app.stream_writers: another live Store's reply is left alone).

Threading: one Store per thread (sqlite3 connections are not shared); the app uses it on the GUI thread.
"""
from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from app.stream_writers import StreamWriters
from engine.paths import data_dir

MessageState = Literal["complete", "streaming", "interrupted", "stopped", "error"]
SCHEMA_VERSION = 4
DB_NAME = "history.sqlite3"
# How long a statement waits for another connection's write lock before SQLITE_BUSY ("database is locked"): a
# write the user is waiting for may wait LOCK_WAIT_S; one that is tried again soon (a streaming reply's partial
# saves, retries) waits at most BRIEF_LOCK_WAIT_S, so the GUI thread never stalls for seconds at each try.
LOCK_WAIT_S = 5.0
BRIEF_LOCK_WAIT_S = 0.1
# Beside the history: "damage was seen here in use" (Store.mark_damaged); the next start checks the whole file.
DAMAGE_MARK_SUFFIX = ".damaged"

_SCHEMA_V1 = """
CREATE TABLE conversations (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    title         TEXT    NOT NULL,
    created_at    REAL    NOT NULL,
    updated_at    REAL    NOT NULL,
    system_prompt TEXT    NOT NULL DEFAULT '',
    sampling_json TEXT    NOT NULL DEFAULT '{}'
);
CREATE TABLE messages (
    -- AUTOINCREMENT: a regenerated reply never takes the id of the one it replaced
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role            TEXT    NOT NULL CHECK (role IN ('user', 'assistant')),
    content         TEXT    NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'complete'
                    CHECK (state IN ('complete', 'streaming', 'interrupted', 'stopped', 'error')),
    created_at      REAL    NOT NULL,
    model           TEXT    NOT NULL DEFAULT '',
    error           TEXT    NOT NULL DEFAULT '',
    usage_json      TEXT    NOT NULL DEFAULT '{}'
);
CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
"""
# v2: a reply's reasoning ("Thinking", engine.reasoning) beside its answer, never part of `content` (so the
# next turn's prompt leaves it out, as the templates expect); per-chat chat-template switches
# (enable_thinking, reasoning_effort: the names in engine.reasoning.TEMPLATE_OPTIONS).
_SCHEMA_V2 = """
ALTER TABLE messages ADD COLUMN reasoning TEXT NOT NULL DEFAULT '';
ALTER TABLE conversations ADD COLUMN template_options_json TEXT NOT NULL DEFAULT '{}';
"""
# v3: full-text search over message text (SQLite FTS5, an external-content index kept by triggers; the
# migration indexes every existing message).
_SCHEMA_V3 = """
CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id');
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');
"""
# v4: alternatives. Messages form a tree (parent_id; NULL = first message); among siblings one is `active`,
# and the conversation shown and sent is the path of active messages from the root. A regenerated reply or an
# edited user message is a new sibling: the earlier one stays, with everything after it, as an alternative.
# The migration chains every existing message to the one before it (the single path they were).
_SCHEMA_V4 = """
ALTER TABLE messages ADD COLUMN parent_id INTEGER;
ALTER TABLE messages ADD COLUMN active INTEGER NOT NULL DEFAULT 1;
UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p
                                 WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id);
CREATE INDEX messages_by_parent ON messages(conversation_id, parent_id);
"""


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created_at: float
    updated_at: float
    system_prompt: str = ""
    sampling: dict = field(default_factory=dict)   # keys of app.settings.SamplingDefaults; missing = default
    template_options: dict = field(default_factory=dict)   # {"enable_thinking": bool, "reasoning_effort": str}


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str
    content: str
    state: MessageState
    created_at: float
    model: str = ""
    error: str = ""
    usage: dict = field(default_factory=dict)
    reasoning: str = ""
    parent_id: int | None = None       # the message this one follows (None: the first); alternatives share it


_END = object()     # a parent_id meaning "after the last message of the shown path"


def default_db_path() -> Path:
    return data_dir() / DB_NAME


class HistoryError(RuntimeError):
    """The history file can't be opened; the message names the file and says why. `damaged`: its content is
    the cause (garbage, truncated, another program's database), so a new history may start beside it; else
    the cause is outside it (in use, read-only, disk full, a newer app's file) and it is left where it is."""

    def __init__(self, message: str, damaged: bool = False):
        super().__init__(message)
        self.damaged = damaged


# SQLite errors that come from where the file is, not from what is in it.
_CIRCUMSTANCES = {"SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_IOERR",
                  "SQLITE_FULL", "SQLITE_PERM", "SQLITE_NOMEM", "SQLITE_AUTH", "SQLITE_NOLFS"}


def is_damage(error: sqlite3.Error) -> bool:
    """An error met in use that says the file's content is broken ("database disk image is malformed"), not
    that it can't be written now (locked, read-only, full: those pass)."""
    name = getattr(error, "sqlite_errorname", "") or ""
    return name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB"


def set_aside(path: Path) -> Path:
    """Renames a history file that can't be opened (with its WAL and shared-memory files, which must keep its
    name to stay paired with it) to `<name>.unreadable-<time>`, so that a new history can start beside it and
    nothing is deleted. Returns the new name of the file."""
    path = Path(path)
    kept = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
    for suffix in ("", "-wal", "-shm", DAMAGE_MARK_SUFFIX):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(kept.with_name(kept.name + suffix))
    return kept


class Store:
    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_db_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # isolation_level=None: autocommit; every write below is its own durable transaction.
            self._db = sqlite3.connect(self.path, isolation_level=None, timeout=LOCK_WAIT_S)
        except sqlite3.Error as e:
            raise HistoryError(f"The chat history {self.path} can't be opened: {e}.") from e
        try:
            self._open()
        except BaseException as e:
            self._db.close()       # an open handle would keep Windows from renaming the file (set_aside)
            if isinstance(e, sqlite3.DatabaseError) and e.sqlite_errorname not in _CIRCUMSTANCES:
                raise HistoryError(f"The chat history {self.path} is damaged or is not a Halo Chat history "
                                   f"file: {e}.", damaged=True) from e
            if isinstance(e, (sqlite3.Error, OSError)):
                raise HistoryError(f"The chat history {self.path} can't be opened: {e}.") from e
            raise

    def _open(self) -> None:
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")   # a commit survives power loss too, not only a crash
        self._db.execute("PRAGMA foreign_keys=ON")
        self._check_if_damage_was_seen()
        self._migrate()
        self._writers = StreamWriters(self._db, self.path)
        self.recovered_interrupted = self._mark_interrupted()

    # -- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        self._writers.close()
        self._db.close()

    @property
    def _damage_mark(self) -> Path:
        return self.path.with_name(self.path.name + DAMAGE_MARK_SUFFIX)

    def mark_damaged(self, error: sqlite3.Error) -> None:
        """Damage was met in use: the next start checks the whole file (too slow for every start on a big
        history) and, where it is damaged, offers to set it aside (app.__main__.open_history)."""
        try:
            self._damage_mark.write_text(f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {error}\n", encoding="utf-8")
        except OSError:
            pass                    # a folder that can't be written: the damage is still reported where met

    def _check_if_damage_was_seen(self) -> None:
        if not self._damage_mark.exists():
            return
        problems = [row[0] for row in self._db.execute("PRAGMA quick_check(5)").fetchall()]
        if problems != ["ok"]:
            raise HistoryError(f"The chat history {self.path} is damaged: {'; '.join(problems)}.", damaged=True)
        self._damage_mark.unlink(missing_ok=True)      # what was seen is gone (e.g. rewritten since)

    @contextmanager
    def brief_lock_waits(self) -> Iterator[None]:
        """Statements inside wait at most BRIEF_LOCK_WAIT_S for another connection's write lock."""
        self._db.execute(f"PRAGMA busy_timeout={int(BRIEF_LOCK_WAIT_S * 1000)}")
        try:
            yield
        finally:
            self._db.execute(f"PRAGMA busy_timeout={int(LOCK_WAIT_S * 1000)}")

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise HistoryError(f"The chat history {self.path} was written by a newer Halo Chat (schema "
                               f"{version}); update the app to open it.")
        # Each step is one transaction: a crash mid-migration leaves the old version and nothing half-made;
        # a step only adds (tables, columns with defaults), so every row an older version wrote stays.
        if version < 1:
            self._db.executescript("BEGIN;" + _SCHEMA_V1 + "PRAGMA user_version=1;COMMIT;")
        if version < 2:
            self._db.executescript("BEGIN;" + _SCHEMA_V2 + "PRAGMA user_version=2;COMMIT;")
        if version < 3:
            self._db.executescript("BEGIN;" + _SCHEMA_V3 + "PRAGMA user_version=3;COMMIT;")
        if version < 4:
            self._db.executescript("BEGIN;" + _SCHEMA_V4 + "PRAGMA user_version=4;COMMIT;")

    def _mark_interrupted(self) -> int:
        return self._writers.recover()       # only rows whose writer is gone (app.stream_writers)

    # -- conversations ----------------------------------------------------------------------------
    def create_conversation(self, title: str = "New chat", system_prompt: str = "",
                            sampling: dict | None = None) -> Conversation:
        now = time.time()
        cur = self._db.execute(
            "INSERT INTO conversations(title, created_at, updated_at, system_prompt, sampling_json) "
            "VALUES (?, ?, ?, ?, ?)", (title, now, now, system_prompt, json.dumps(sampling or {})))
        return self.conversation(cur.lastrowid)

    def conversation(self, conversation_id: int) -> Conversation:
        row = self._db.execute("SELECT * FROM conversations WHERE id=?", (conversation_id,)).fetchone()
        if row is None:
            raise KeyError(conversation_id)
        return _conversation(row)

    def conversations(self, search: str = "") -> list[Conversation]:
        """Most recently active first; `search` matches the title (case-insensitive substring) or the text of
        a message (full-text: every word, each also as a prefix, in any order)."""
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        words = search.split()
        if not words:
            rows = self._db.execute("SELECT * FROM conversations ORDER BY updated_at DESC, id DESC").fetchall()
            return [_conversation(r) for r in rows]
        # Each word quoted (FTS5 syntax in the user's text is taken literally), as a prefix.
        match = " ".join('"' + w.replace('"', '""') + '"*' for w in words)
        rows = self._db.execute(
            "SELECT * FROM conversations WHERE title LIKE ? ESCAPE '\\' OR id IN ("
            "  SELECT m.conversation_id FROM messages m JOIN messages_fts f ON f.rowid = m.id"
            "  WHERE messages_fts MATCH ?) ORDER BY updated_at DESC, id DESC", (pattern, match)).fetchall()
        return [_conversation(r) for r in rows]

    def rename(self, conversation_id: int, title: str) -> None:
        self._db.execute("UPDATE conversations SET title=? WHERE id=?", (title.strip() or "Untitled",
                                                                          conversation_id))

    def set_conversation_settings(self, conversation_id: int, system_prompt: str, sampling: dict,
                                  template_options: dict | None = None) -> None:
        """One write (all or nothing); `template_options` None keeps the stored ones."""
        options = None if template_options is None else json.dumps(template_options)
        self._db.execute("UPDATE conversations SET system_prompt=?, sampling_json=?, "
                         "template_options_json=COALESCE(?, template_options_json) WHERE id=?",
                         (system_prompt, json.dumps(sampling), options, conversation_id))

    def set_template_options(self, conversation_id: int, options: dict) -> None:
        self._db.execute("UPDATE conversations SET template_options_json=? WHERE id=?",
                         (json.dumps(options), conversation_id))

    def delete_conversation(self, conversation_id: int) -> None:
        """Irreversible: callers ask the user first."""
        self._db.execute("DELETE FROM conversations WHERE id=?", (conversation_id,))

    def _touch(self, conversation_id: int) -> None:
        self._db.execute("UPDATE conversations SET updated_at=? WHERE id=?", (time.time(), conversation_id))

    # -- messages ---------------------------------------------------------------------------------
    def messages(self, conversation_id: int) -> list[Message]:
        """The conversation as shown and sent: the path of active messages from the first one."""
        rows = self._db.execute("SELECT * FROM messages WHERE conversation_id=? ORDER BY id",
                                (conversation_id,)).fetchall()
        children: dict[int | None, list[sqlite3.Row]] = {}
        for r in rows:
            children.setdefault(r["parent_id"], []).append(r)
        path, parent = [], None
        while kids := children.get(parent):
            node = next((k for k in reversed(kids) if k["active"]), kids[-1])
            path.append(_message(node))
            parent = node["id"]
        return path

    def _siblings(self, message_id: int) -> list[int]:
        """Ids of a message and its alternatives (same conversation and parent), oldest first."""
        m = self._db.execute("SELECT conversation_id, parent_id FROM messages WHERE id=?", (message_id,)).fetchone()
        return [r[0] for r in self._db.execute(
            "SELECT id FROM messages WHERE conversation_id=? AND parent_id IS ? ORDER BY id",
            (m["conversation_id"], m["parent_id"])).fetchall()]

    def alternatives(self, message_id: int) -> tuple[int, int]:
        """(1-based position, count) of a message among its alternatives (siblings), oldest first."""
        ids = self._siblings(message_id)
        return ids.index(message_id) + 1, len(ids)

    def show_alternative(self, message_id: int, step: int) -> int:
        """Makes the sibling `step` places away (wrapping) the active one; returns its id."""
        ids = self._siblings(message_id)
        chosen = ids[(ids.index(message_id) + step) % len(ids)]
        self._activate(chosen)
        return chosen

    def _activate(self, message_id: int) -> None:
        self._db.execute("UPDATE messages SET active = (id = ?) WHERE conversation_id = (SELECT conversation_id "
                         "FROM messages WHERE id = ?) AND parent_id IS (SELECT parent_id FROM messages WHERE id = ?)",
                         (message_id, message_id, message_id))

    def _insert(self, conversation_id: int, parent_id, role: str, content: str, state: str,
                model: str = "") -> int:
        """A new message under `parent_id` (default: after the path's last message), made the active one."""
        if parent_id is _END:
            path = self.messages(conversation_id)
            parent_id = path[-1].id if path else None
        with self._transaction():       # all or nothing: a refused step leaves no message behind (the caller
            cur = self._db.execute(     # gives the words back to the user, who would else send them twice)
                "INSERT INTO messages(conversation_id, role, content, state, created_at, model, parent_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, state, time.time(), model, parent_id))
            self._activate(cur.lastrowid)
            self._touch(conversation_id)
        return cur.lastrowid

    def message(self, message_id: int) -> Message:
        row = self._db.execute("SELECT * FROM messages WHERE id=?", (message_id,)).fetchone()
        if row is None:
            raise KeyError(message_id)
        return _message(row)

    def add_message(self, conversation_id: int, role: str, content: str, parent_id=_END) -> Message:
        """A complete message (the user's): committed before this returns. `parent_id`: the message it follows
        (an edited message goes beside the original, under the same parent); default the path's end."""
        return self.message(self._insert(conversation_id, parent_id, role, content, "complete"))

    def begin_reply(self, conversation_id: int, model: str = "", parent_id=_END) -> Message:
        """A reply row in state "streaming" after `parent_id` (default the path's end; a regenerated reply goes
        beside the one it replaces)."""
        rid = self._insert(conversation_id, parent_id, "assistant", "", "streaming", model)
        self._writers.claim(rid)
        return self.message(rid)

    def resume_reply(self, message_id: int) -> Message:
        """A finished reply streams again (Continue): back to "streaming", its text kept, this writer's."""
        self._db.execute("UPDATE messages SET state='streaming' WHERE id=? AND role='assistant'", (message_id,))
        self._writers.claim(message_id)
        return self.message(message_id)

    def save_partial(self, message_id: int, content: str, reasoning: str = "") -> None:
        self._db.execute("UPDATE messages SET content=?, reasoning=? WHERE id=? AND state='streaming'",
                         (content, reasoning, message_id))

    def finish_reply(self, message_id: int, content: str, state: MessageState = "complete",
                     usage: dict | None = None, error: str = "", reasoning: str = "") -> None:
        """`usage` None keeps what the message holds (a reply stopped without a Finished: a continued one keeps
        its earlier figures)."""
        self._db.execute("UPDATE messages SET content=?, state=?, usage_json=COALESCE(?, usage_json), error=?, "
                         "reasoning=? WHERE id=?",
                         (content, state, None if usage is None else json.dumps(usage), error, reasoning, message_id))
        self._writers.release(message_id)

    def delete_message(self, message_id: int) -> None:
        """Removes one message; what followed it follows its parent instead, and an alternative takes its place."""
        m = self._db.execute("SELECT conversation_id, parent_id, active FROM messages WHERE id=?",
                             (message_id,)).fetchone()
        if m is None:
            return
        with self._transaction():
            self._db.execute("UPDATE messages SET parent_id=? WHERE parent_id=?", (m["parent_id"], message_id))
            self._db.execute("DELETE FROM messages WHERE id=?", (message_id,))
            if m["active"]:
                other = self._db.execute("SELECT MAX(id) FROM messages WHERE conversation_id=? AND parent_id IS ?",
                                         (m["conversation_id"], m["parent_id"])).fetchone()[0]
                if other is not None:
                    self._activate(other)

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """The writes inside commit together or not at all (the connection autocommits each statement else)."""
        self._db.execute("BEGIN")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:     # a refused COMMIT leaves it open
                self._db.execute("ROLLBACK")
            raise

    def token_estimate(self, conversation_id: int) -> int:
        """Characters / 4: a rough size of the history, shown before the engine reports real counts."""
        return sum(len(m.content) for m in self.messages(conversation_id)) // 4


def _json_object(text: str | None) -> dict:
    """A stored JSON object, or {} when the column is empty, corrupt or not an object (defaults then apply)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _conversation(row: sqlite3.Row) -> Conversation:
    return Conversation(id=row["id"], title=row["title"], created_at=row["created_at"],
                        updated_at=row["updated_at"], system_prompt=row["system_prompt"],
                        sampling=_json_object(row["sampling_json"]),
                        template_options=_json_object(row["template_options_json"]))


def _message(row: sqlite3.Row) -> Message:
    return Message(id=row["id"], conversation_id=row["conversation_id"], role=row["role"],
                   content=row["content"], state=row["state"], created_at=row["created_at"],
                   model=row["model"], error=row["error"], usage=json.loads(row["usage_json"] or "{}"),
                   reasoning=row["reasoning"], parent_id=row["parent_id"])
