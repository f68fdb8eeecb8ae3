"""The history store on a real SQLite file: durability contract, recovery of cut-off replies, search."""
from __future__ import annotations

import sqlite3

import pytest

from app.store import SCHEMA_VERSION, HistoryError, Store


@pytest.fixture
def db_path(tmp_path):
    return tmp_path / "history.sqlite3"


def test_new_database_is_wal_and_versioned(db_path):
    Store(db_path).close()
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_messages_are_visible_to_another_connection_at_once(db_path):
    store = Store(db_path)
    conv = store.create_conversation("Trip")
    store.add_message(conv.id, "user", "hello")
    reply = store.begin_reply(conv.id, model="smol")
    store.save_partial(reply.id, "Hi th")
    # A second connection stands for the next process: nothing waits for close() or a commit call.
    other = sqlite3.connect(db_path)
    rows = other.execute("SELECT role, content, state FROM messages ORDER BY id").fetchall()
    assert rows == [("user", "hello", "complete"), ("assistant", "Hi th", "streaming")]


def test_reopening_marks_streaming_rows_interrupted(db_path):
    store = Store(db_path)
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "q1")
    done = store.begin_reply(conv.id)
    store.finish_reply(done.id, "a1", usage={"generated_tokens": 2})
    store.add_message(conv.id, "user", "q2")
    cut = store.begin_reply(conv.id)
    store.save_partial(cut.id, "partial answ")
    # no close(): the process "dies" here, and the OS drops its file lock (a real kill -9: the test below)
    store._writers._lock.release()
    again = Store(db_path)
    assert again.recovered_interrupted == 1
    msgs = again.messages(conv.id)
    assert [(m.role, m.content, m.state) for m in msgs] == [
        ("user", "q1", "complete"), ("assistant", "a1", "complete"),
        ("user", "q2", "complete"), ("assistant", "partial answ", "interrupted")]
    assert msgs[1].usage == {"generated_tokens": 2}


def test_save_partial_does_not_touch_a_finished_reply(db_path):
    store = Store(db_path)
    conv = store.create_conversation()
    reply = store.begin_reply(conv.id)
    store.finish_reply(reply.id, "final", state="stopped")
    store.save_partial(reply.id, "late write from a stale timer")
    assert store.message(reply.id).content == "final"
    assert store.message(reply.id).state == "stopped"


def test_a_reply_finished_without_usage_keeps_the_figures_it_had(db_path):
    """A continued reply stopped by closing the window gets no Finished: its earlier figures stay."""
    store = Store(db_path)
    conv = store.create_conversation()
    reply = store.begin_reply(conv.id)
    store.finish_reply(reply.id, "first part", usage={"generated_tokens": 12, "finish_reason": "length"})
    store.finish_reply(reply.id, "first part and more", state="stopped")
    assert store.message(reply.id).usage == {"generated_tokens": 12, "finish_reason": "length"}
    store.finish_reply(reply.id, "first part and more", usage={"generated_tokens": 3})
    assert store.message(reply.id).usage == {"generated_tokens": 3}


def test_search_rename_order_and_delete_cascade(db_path):
    store = Store(db_path)
    a = store.create_conversation("Python questions")
    b = store.create_conversation("Recipes 100%")
    store.add_message(a.id, "user", "newest activity")
    assert [c.id for c in store.conversations()] == [a.id, b.id]
    assert [c.title for c in store.conversations("python")] == ["Python questions"]
    assert [c.title for c in store.conversations("100%")] == ["Recipes 100%"]
    assert store.conversations("0%x") == []
    store.rename(b.id, "  ")
    assert store.conversation(b.id).title == "Untitled"
    store.delete_conversation(a.id)
    assert [c.id for c in store.conversations()] == [b.id]
    assert store.messages(a.id) == []


def test_conversation_settings_round_trip(db_path):
    store = Store(db_path)
    conv = store.create_conversation(system_prompt="Be brief.", sampling={"temperature": 0.2})
    store.set_conversation_settings(conv.id, "Be kind.", {"temperature": 0.0, "seed": 7})
    got = Store(db_path).conversation(conv.id)
    assert got.system_prompt == "Be kind."
    assert got.sampling == {"temperature": 0.0, "seed": 7}


def test_newer_schema_is_refused(db_path):
    Store(db_path).close()
    raw = sqlite3.connect(db_path)
    raw.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    with pytest.raises(HistoryError, match="newer Halo Chat") as refused:
        Store(db_path)
    assert not refused.value.damaged         # updating the app opens it: nothing may move it aside


def _truncated_history(path):
    store = Store(path)
    for i in range(100):
        store.add_message(store.create_conversation(f"chat {i}").id, "user", "words " * 500)
    store.close()
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])


def _another_programs_database(path):
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE conversations (who TEXT)")     # a name ours uses, another meaning
    raw.commit()
    raw.close()


@pytest.mark.parametrize("make", [lambda p: p.write_bytes(b"garbage\x00" * 1000), _truncated_history,
                                  _another_programs_database], ids=["garbage", "truncated", "foreign"])
def test_a_damaged_file_is_refused_by_name_and_kept(db_path, make):
    make(db_path)
    before = db_path.read_bytes()
    with pytest.raises(HistoryError, match="damaged or is not a Halo Chat history") as refused:
        Store(db_path)
    assert refused.value.damaged and str(db_path) in str(refused.value)
    assert db_path.read_bytes()[100:] == before[100:]   # the header's journal-mode bytes aside, as it was


def test_role_and_state_are_constrained(db_path):
    store = Store(db_path)
    conv = store.create_conversation()
    with pytest.raises(sqlite3.IntegrityError):
        store.add_message(conv.id, "system", "x")
    with pytest.raises(sqlite3.IntegrityError):
        store.add_message(conv.id + 99, "user", "orphan")


_CHILD_WRITER = """
import sys, time
from app.store import Store
store = Store(sys.argv[1])
conv = store.create_conversation()
reply = store.begin_reply(conv.id)
store.save_partial(reply.id, "first part")
print(reply.id, flush=True)
sys.stdin.readline()                          # wait until the parent opened its own store
store.save_partial(reply.id, "first part and the rest")
print("saved", flush=True)
time.sleep(60)
"""


def test_a_second_store_leaves_a_live_writers_reply_alone_and_recovers_it_once_killed(db_path):
    import os
    import signal
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", _CHILD_WRITER, str(db_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        reply_id = int(child.stdout.readline())
        second = Store(db_path)                   # a second app on the same data folder
        assert second.recovered_interrupted == 0
        assert second.message(reply_id).state == "streaming"
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "saved"
        assert second.message(reply_id).content == "first part and the rest"   # its later saves land
        child.send_signal(signal.SIGKILL if hasattr(signal, "SIGKILL") else signal.SIGTERM)
        child.wait(10)
        second.close()
        third = Store(db_path)
        assert third.recovered_interrupted == 1
        recovered = third.message(reply_id)
        assert (recovered.state, recovered.content) == ("interrupted", "first part and the rest")
        third.close()
    finally:
        if child.poll() is None:
            child.kill()


def test_a_version_1_file_migrates_to_reasoning_and_template_options_losing_nothing(db_path):
    """A history file written by the first release (schema 1, its exact DDL) opens in this one: every row
    and column kept, replies gain an empty reasoning, chats empty template switches."""
    from app.store import _SCHEMA_V1

    raw = sqlite3.connect(db_path)
    raw.executescript(_SCHEMA_V1 + "PRAGMA user_version=1;")
    raw.execute("INSERT INTO conversations(title, created_at, updated_at, system_prompt, sampling_json) "
                "VALUES ('Old chat', 1.0, 2.0, 'be brief', '{\"temperature\": 0.3}')")
    raw.execute("INSERT INTO messages(conversation_id, role, content, state, created_at, model, usage_json) "
                "VALUES (1, 'user', 'hi', 'complete', 1.5, '', '{}')")
    raw.execute("INSERT INTO messages(conversation_id, role, content, state, created_at, model, error, usage_json)"
                " VALUES (1, 'assistant', 'hello there', 'stopped', 1.6, 'smol', '', '{\"generated_tokens\": 3}')")
    raw.commit()
    raw.close()
    store = Store(db_path)
    conv = store.conversation(1)
    assert (conv.title, conv.system_prompt, conv.sampling, conv.template_options) == \
        ("Old chat", "be brief", {"temperature": 0.3}, {})
    user, reply = store.messages(1)
    assert (user.role, user.content, user.reasoning) == ("user", "hi", "")
    assert (reply.content, reply.state, reply.model, reply.usage, reply.reasoning) == \
        ("hello there", "stopped", "smol", {"generated_tokens": 3}, "")
    store.set_template_options(1, {"enable_thinking": False})
    new = store.begin_reply(1)
    store.finish_reply(new.id, "answer", reasoning="because")
    store.close()
    again = Store(db_path)
    assert again.conversation(1).template_options == {"enable_thinking": False}
    assert again.message(new.id).reasoning == "because" and again.message(new.id).content == "answer"
    assert sqlite3.connect(db_path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    again.close()


def test_search_finds_message_text_with_fts5_and_keeps_up_with_edits(db_path):
    store = Store(db_path)
    trip = store.create_conversation("Trip")
    store.add_message(trip.id, "user", "Which train goes from Lyon to Marseille?")
    reply = store.begin_reply(trip.id)
    store.save_partial(reply.id, "The TGV runs hourly")
    store.finish_reply(reply.id, "The TGV runs hourly from Part-Dieu.")
    cake = store.create_conversation("Cake")
    store.add_message(cake.id, "user", "A recipe with chocolate, please")
    ids = lambda q: [c.id for c in store.conversations(q)]          # noqa: E731
    assert ids("marseille") == [trip.id]              # a word of a message, any case
    assert ids("part-dieu tgv") == [trip.id]          # every word, in any order; FTS syntax taken literally
    assert ids("choc") == [cake.id]                   # prefixes
    assert ids("Cak") == [cake.id]                    # titles still match as substrings
    assert ids('"') == [] and ids("NEAR(") == []      # no query error from the user's text
    assert ids("hourly") == [trip.id]                 # the finished text is indexed ...
    store.delete_message(reply.id)
    assert ids("hourly") == []                        # ... and a deleted message leaves the index
    assert set(ids("")) == {trip.id, cake.id}
    store.close()


def test_migration_indexes_messages_written_before_search_existed(db_path):
    from app.store import _SCHEMA_V1, _SCHEMA_V2

    raw = sqlite3.connect(db_path)
    raw.executescript(_SCHEMA_V1 + _SCHEMA_V2 + "PRAGMA user_version=2;")
    raw.execute("INSERT INTO conversations(title, created_at, updated_at) VALUES ('Old', 1, 1)")
    raw.execute("INSERT INTO messages(conversation_id, role, content, created_at) VALUES (1, 'user', "
                "'penguins of Patagonia', 1)")
    raw.commit()
    raw.close()
    store = Store(db_path)
    assert [c.title for c in store.conversations("patagonia")] == ["Old"]
    store.close()


def test_alternatives_form_a_tree_whose_active_path_is_the_conversation(db_path):
    store = Store(db_path)
    c = store.create_conversation().id
    q = store.add_message(c, "user", "q")
    a1 = store.begin_reply(c)
    store.finish_reply(a1.id, "a1")
    q2 = store.add_message(c, "user", "q2")
    a2 = store.begin_reply(c, parent_id=q.id)                 # a regenerated answer to q, beside a1
    store.finish_reply(a2.id, "a2")
    assert [m.id for m in store.messages(c)] == [q.id, a2.id]   # the new one is shown; a1 and q2 wait behind
    assert store.alternatives(a2.id) == (2, 2) and store.alternatives(q.id) == (1, 1)
    assert store.show_alternative(a2.id, -1) == a1.id
    assert [m.id for m in store.messages(c)] == [q.id, a1.id, q2.id]
    assert store.token_estimate(c) == len("q" + "a1" + "q2") // 4
    store.delete_message(a1.id)                                # its follower moves up; a2 takes its place
    assert [m.id for m in store.messages(c)] == [q.id, a2.id]
    assert store.message(q2.id).parent_id == q.id
    store.close()


def test_migration_chains_old_messages_into_one_path(db_path):
    from app.store import _SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3

    raw = sqlite3.connect(db_path)
    raw.executescript(_SCHEMA_V1 + _SCHEMA_V2 + _SCHEMA_V3 + "PRAGMA user_version=3;")
    raw.execute("INSERT INTO conversations(title, created_at, updated_at) VALUES ('Old', 1, 1)")
    for i, role in enumerate(["user", "assistant", "user", "assistant"]):
        raw.execute("INSERT INTO messages(conversation_id, role, content, created_at) VALUES (1, ?, ?, ?)",
                    (role, f"m{i}", i))
    raw.commit()
    raw.close()
    store = Store(db_path)
    path = store.messages(1)
    assert [m.content for m in path] == ["m0", "m1", "m2", "m3"]
    assert [m.parent_id for m in path] == [None, path[0].id, path[1].id, path[2].id]
    store.close()
