"""StringArray: a GGUF string array as one UTF-8 blob and offsets gives back exactly the strings written,
and refuses what the per-string decode refused (naming the string and its file offset)."""
from __future__ import annotations

import random

import pytest
from gguf_builder import GGUFBytes, gstr

from engine.errors import InvalidModelError
from engine.gguf import GGUFValueType, open_gguf
from engine.gguf.strings import StringArray

V = GGUFValueType


def _varied_strings(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = ["a", "Z", " ", "\n", "\u2581", "é", "ß", "日", "本", "🚀", "\U0010FFFF", "\x00", "<", "|"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.choice((0, 0, 1, 2, 5, 17)))) for _ in range(n)]


def _parse(items: list[str | bytes], lead: bytes = b"HEAD") -> StringArray:
    data = lead + b"".join(gstr(s) for s in items) + b"TAIL"
    array, end = StringArray.parse(data, len(lead), len(data), len(items), "k")
    assert end == len(data) - 4
    return array


def test_parsed_strings_are_the_strings_written_across_the_blob_windows():
    items = _varied_strings(200_000)            # > 1 MiB of text and prefixes: several windows, empty strings
    array = _parse(items)
    assert len(array) == len(items)
    assert array == items and list(array) == items
    assert [array[i] for i in (0, 1, -1, 123_457)] == [items[i] for i in (0, 1, -1, 123_457)]
    assert array.item_bytes(7) == items[7].encode()
    assert array.byte_lengths().tolist() == [len(s.encode()) for s in items]
    assert array == StringArray.from_strs(items)
    assert array.nbytes < sum(len(s.encode()) for s in items) + 5 * len(items)


def test_an_empty_array_and_empty_strings():
    assert _parse([]) == [] and len(_parse([])) == 0
    assert list(_parse(["", "", "x", ""])) == ["", "", "x", ""]


def test_out_of_range_indexes_raise():
    array = _parse(["a", "b"])
    with pytest.raises(IndexError):
        array[2]
    with pytest.raises(IndexError):
        array.item_bytes(-3)


@pytest.mark.parametrize("bad, index, at", [
    ([b"ok", b"\xff"], 1, 0),
    ([b"ok", b"x\xed\xa0\x80"], 1, 1),           # an encoded surrogate
    ([b"ok", b"", b"ab\xc3"], 2, 2),             # a character cut at the array's end
])
def test_invalid_utf8_names_the_string_and_its_offset(bad, index, at):
    lead = b"HEAD"
    with pytest.raises(InvalidModelError, match=f"string #{index} is not valid UTF-8") as info:
        _parse(bad, lead)
    start = len(lead) + sum(8 + len(s) for s in bad[:index]) + 8
    assert info.value.offset == start + at


def test_a_character_split_between_two_strings_is_refused():
    """b"\\xc3" + b"\\xa9" is valid UTF-8 as one blob, but neither string is valid alone."""
    with pytest.raises(InvalidModelError, match=r"string #[01] is not valid UTF-8"):
        _parse([b"caf\xc3", b"\xa9"])


def test_the_parser_gives_a_string_array_for_every_string_array(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(GGUFBytes().kv("k", V.ARRAY, (V.STRING, ["x", "", "日本"])).build())
    with open_gguf(path) as g:
        value = g.metadata["k"]
    assert isinstance(value, StringArray) and value == ["x", "", "日本"]
