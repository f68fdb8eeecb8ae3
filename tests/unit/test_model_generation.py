"""Stop-string matching: text that could start a stop string is held back until it is decided."""
from engine.generation import StopStringMatcher


def feed_all(stops, pieces):
    m = StopStringMatcher(stops)
    out, matched = [], False
    for piece in pieces:
        text, matched = m.feed(piece)
        out.append(text)
        if matched:
            break
    return out, matched, m


def test_no_stops_passes_text_through():
    out, matched, _ = feed_all((), ["a", "b"])
    assert out == ["a", "b"] and not matched


def test_stop_spanning_pieces_is_cut_and_held_prefix_not_emitted_early():
    out, matched, _ = feed_all(("END",), ["hello E", "N", "D tail"])
    assert out == ["hello ", "", ""] and matched
    assert "".join(out) == "hello "


def test_false_start_is_released_when_it_stops_matching():
    out, matched, m = feed_all(("END",), ["x E", "NX", "y"])
    assert not matched and "".join(out) + m.flush() == "x ENXy"
    assert out[0] == "x "                  # "E" held back until "NX" rules out "END"


def test_earliest_of_several_stops_wins():
    out, matched, _ = feed_all(("\n\n", "User:"), ["Sure. User: hi\n\nmore"])
    assert matched and out == ["Sure. "]


def test_flush_returns_held_text_at_end():
    m = StopStringMatcher(("###",))
    assert m.feed("abc#") == ("abc", False)
    assert m.flush() == "#"
