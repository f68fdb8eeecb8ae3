"""engine.context_fit on a character-count encoder: which turns a long chat keeps under each policy."""
from engine.api import ChatMessage
from engine.context_fit import fit_messages


def encode(messages):        # one "token" per character plus 2 per message, like a template's markers
    return [0] * sum(len(m.content) + 2 for m in messages)


SYSTEM = ChatMessage("system", "s" * 8)
CHAT = [SYSTEM] + [ChatMessage(role, f"{role[0]}{i}" * 5) for i in range(4) for role in ("user", "assistant")]
CHAT.append(ChatMessage("user", "last question"))


def test_stop_keeps_everything():
    ids, dropped, turns, system = fit_messages(encode, CHAT, "stop", 40)
    assert dropped == turns == 0 and not system and len(ids) == len(encode(CHAT)) > 40


def test_drop_oldest_keeps_the_system_prompt_and_drops_whole_turns():
    ids, dropped, turns, system = fit_messages(encode, CHAT, "drop_oldest", 60)
    assert not system
    kept = [SYSTEM] + CHAT[1 + dropped:]
    assert 0 < dropped and len(ids) == len(encode(kept)) <= 60
    assert kept[1].role == "user" and kept[-1].content == "last question"
    assert turns == dropped // 2 > 0                               # whole user + assistant turns
    assert len(encode([SYSTEM] + CHAT[1 + dropped - 2:])) > 60     # the fewest turns dropped


def test_rolling_drops_the_system_prompt_too():
    ids, dropped, turns, system = fit_messages(encode, CHAT, "rolling", 60)
    assert system
    kept = CHAT[dropped:]
    assert dropped > 1 and len(ids) == len(encode(kept)) <= 60
    assert kept[0].role == "user" and SYSTEM not in kept
    assert turns == sum(m.role == "user" for m in CHAT[:dropped]) == (dropped - 1) // 2   # the system prompt too
    assert len(encode(CHAT[dropped - 2:])) > 60


def test_rolling_says_when_it_left_out_only_the_system_prompt():
    """No turn went, but the system prompt did: the caller is told (turns_dropped alone said 0)."""
    ids, dropped, turns, system = fit_messages(encode, CHAT, "rolling", len(encode(CHAT[1:])))
    assert (dropped, turns, system) == (1, 0, True) and len(ids) == len(encode(CHAT[1:]))


def test_the_newest_turn_is_kept_even_when_it_alone_is_too_long():
    ids, dropped, turns, _ = fit_messages(encode, CHAT, "drop_oldest", 5)
    assert len(ids) == len(encode([SYSTEM, CHAT[-1]])) and dropped == len(CHAT) - 2 and turns == 4
