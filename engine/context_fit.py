"""What to do when a chat no longer fits the context: the request's `context_overflow` policy.

- "stop": the request fails with ContextOverflowError (the caller shortens the chat itself);
- "drop_oldest": the oldest turns are left out, a leading system prompt is kept;
- "rolling": the oldest messages are left out, the system prompt too (a window over the newest ones).
Turns are dropped whole: what is kept starts at a user message (chat templates expect that), and the
newest user message is always kept. The prompt must leave room for the reply (`reply_room`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

from engine.api import ChatMessage

OverflowPolicy = Literal["stop", "drop_oldest", "rolling"]
OVERFLOW_POLICIES: tuple[str, ...] = ("stop", "drop_oldest", "rolling")


def reply_room(max_context: int, max_tokens: int) -> int:
    """Tokens kept free for the reply when turns are dropped: max_tokens, at most a quarter of the context."""
    return max(1, min(max_tokens, max_context // 4))


class Fitted(NamedTuple):
    ids: list[int]          # the prompt
    dropped: int            # messages left out (the oldest ones after any kept system prompt)
    turns_dropped: int      # of them, the turns: a user message and the replies after it
    system_dropped: bool = False   # "rolling" left the system prompt out too


def fit_messages(encode: Callable[[Sequence[ChatMessage]], list[int]], messages: Sequence[ChatMessage],
                 policy: str, budget: int) -> Fitted:
    """The prompt and what was left out of it. `encode(messages)` renders and tokenizes; `budget`: the most
    prompt tokens allowed. Under "stop", or when even the newest turn alone is too long, the ids may exceed
    it (the scheduler then refuses the request with its own error)."""
    ids = encode(messages)
    if len(ids) <= budget or policy == "stop":
        return Fitted(ids, 0, 0)
    head = list(messages[:1]) if policy == "drop_oldest" and messages and messages[0].role == "system" else []
    body = list(messages[len(head):])
    cuts = [k for k in range(1, len(body)) if body[k].role == "user"]   # kept part starts at a user turn

    def fitted(cut: int, cut_ids: list[int]) -> Fitted:
        left_out = body[:cut]
        return Fitted(cut_ids, cut, sum(m.role == "user" for m in left_out), any(m.role == "system" for m in left_out))

    if not cuts:
        return Fitted(ids, 0, 0)
    best = cuts[-1]
    best_ids = encode(head + body[best:])
    if len(best_ids) > budget:
        return fitted(best, best_ids)
    lo, hi = 0, len(cuts) - 1              # the fewest dropped that fits: fitting is monotone in the cut
    while lo < hi:
        mid = (lo + hi) // 2
        mid_ids = encode(head + body[cuts[mid]:])
        if len(mid_ids) <= budget:
            hi, best, best_ids = mid, cuts[mid], mid_ids
        else:
            lo = mid + 1
    return fitted(best, best_ids)
