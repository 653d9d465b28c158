"""OutputPump: ordered chunks across both streams, whole characters, output cap."""

from executor.result import OutputChunk
from executor.streaming import OutputPump


def collect(max_output_bytes: int = 1000) -> tuple[OutputPump, list[OutputChunk]]:
    chunks: list[OutputChunk] = []
    return OutputPump(chunks.append, max_output_bytes), chunks


def test_it_numbers_chunks_across_both_streams_in_feed_order():
    pump, chunks = collect()
    pump.feed("stdout", b"a")
    pump.feed("stderr", b"b")
    pump.feed("stdout", b"c")
    assert [(c.seq, c.stream, c.text) for c in chunks] == [
        (0, "stdout", "a"),
        (1, "stderr", "b"),
        (2, "stdout", "c"),
    ]


def test_a_character_split_across_reads_comes_out_whole():
    pump, chunks = collect()
    euro = "€".encode()
    pump.feed("stdout", b"x" + euro[:2])
    pump.feed("stdout", euro[2:])
    assert [c.text for c in chunks] == ["x", "€"]
    assert pump.stdout == "x€"


def test_invalid_utf8_becomes_replacement_characters():
    pump, _ = collect()
    pump.feed("stdout", b"ok\xff\xfe")
    pump.close()
    assert pump.stdout == "ok\ufffd\ufffd"


def test_a_dangling_partial_character_is_replaced_at_close():
    pump, chunks = collect()
    pump.feed("stderr", "é".encode()[:1])
    pump.close()
    assert pump.stderr == "\ufffd"
    assert chunks[-1].stream == "stderr"


def test_it_stops_at_the_cap_counting_both_streams():
    pump, _ = collect(max_output_bytes=5)
    assert pump.feed("stdout", b"abc")
    assert not pump.feed("stderr", b"defgh")
    assert not pump.feed("stdout", b"more")
    pump.close()
    assert (pump.stdout, pump.stderr, pump.truncated) == ("abc", "de", True)


def test_output_exactly_at_the_cap_is_not_truncated():
    pump, _ = collect(max_output_bytes=3)
    assert pump.feed("stdout", b"abc")
    assert not pump.truncated
