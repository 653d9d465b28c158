"""SecretMasker: every value becomes ****, however the output is split into chunks."""

from __future__ import annotations

import itertools
import random

import pytest

from webapp.credentials.masking import MASK, SecretMasker, mask_text


def stream(values: list[str], pieces: list[str]) -> str:
    masker = SecretMasker(values)
    return "".join(masker.feed(piece) for piece in pieces) + masker.flush()


def splits_in_two(text: str) -> list[list[str]]:
    return [[text[:i], text[i:]] for i in range(len(text) + 1)]


def test_it_masks_a_secret_in_one_chunk() -> None:
    assert mask_text("token=xoxb-123 done", ["xoxb-123"]) == "token=**** done"


def test_it_masks_a_secret_split_at_every_position() -> None:
    text = "before xoxb-SECRET-42 after"
    for pieces in splits_in_two(text):
        assert stream(["xoxb-SECRET-42"], pieces) == "before **** after"


def test_it_masks_a_secret_fed_one_character_at_a_time() -> None:
    text = "a=s3cr3t, b=s3cr3t\n"
    assert stream(["s3cr3t"], list(text)) == "a=****, b=****\n"


def test_it_masks_every_repetition_including_back_to_back() -> None:
    assert mask_text("tok tok toktok", ["tok"]) == f"{MASK} {MASK} {MASK}{MASK}"


def test_it_masks_the_union_of_overlapping_secrets() -> None:
    # Neither "abc" nor "bcd" may leak a single character.
    assert mask_text("xabcdx", ["abc", "bcd"]) == f"x{MASK}x"
    assert mask_text("xaaaax", ["aa"]) == f"x{MASK}x"


def test_it_prefers_the_longest_secret_that_contains_a_shorter_one() -> None:
    assert mask_text("key=abcdef", ["abc", "abcdef"]) == f"key={MASK}"


def test_streaming_equals_masking_whole_for_overlapping_secrets_at_every_split() -> None:
    values = ["abab", "bab", "aba", "ba"]
    text = "xabababbabaxbabx"
    whole = mask_text(text, values)
    for i, j in itertools.combinations(range(len(text) + 1), 2):
        assert stream(values, [text[:i], text[i:j], text[j:]]) == whole
    assert "a" not in whole.replace("x", "")


def test_streaming_equals_masking_whole_for_random_chunkings() -> None:
    rng = random.Random(4)
    values = ["sk-ŁÓdź🔑", "🔑🔑", "xoxb-1", "xoxb-12345"]
    alphabet = "xob-12345🔑ŁÓdźsk\n "
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(40)) + rng.choice(values)
        cuts = sorted(rng.sample(range(len(text) + 1), 5))
        pieces = [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]
        result = stream(values, pieces)
        assert result == mask_text(text, values)
        assert not any(value in result for value in values)


def test_it_masks_unicode_secrets_split_between_code_points() -> None:
    secret = "пароль-🔑-密码"
    for pieces in splits_in_two(f"[{secret}]"):
        assert stream([secret], pieces) == f"[{MASK}]"


def test_it_delays_only_a_tail_that_could_start_a_secret() -> None:
    masker = SecretMasker(["secret"])
    assert masker.feed("hello sec") == "hello "
    assert masker.feed("ond line") == "second line"
    assert masker.feed("xsecr") == "x"
    assert masker.flush() == "secr"


def test_it_emits_everything_at_once_when_no_tail_could_start_a_secret() -> None:
    masker = SecretMasker(["secret"])
    assert masker.feed("plain output\n") == "plain output\n"
    assert masker.flush() == ""


def test_it_ignores_empty_values() -> None:
    assert mask_text("abc", ["", "b"]) == f"a{MASK}c"
    assert stream([""], ["a", "b"]) == "ab"


@pytest.mark.parametrize("values", [[], [""]])
def test_it_passes_text_through_without_secrets(values: list[str]) -> None:
    masker = SecretMasker(values)
    assert masker.feed("anything") == "anything"
    assert masker.flush() == ""


def test_flush_empties_the_masker() -> None:
    masker = SecretMasker(["secret"])
    masker.feed("sec")
    assert masker.flush() == "sec"
    assert masker.flush() == ""
    assert masker.feed("ret") == "ret"


def reference_mask(text: str, values: list[str]) -> str:
    """A slow, obviously-correct masker: mark covered characters, merge overlapping spans."""
    spans = sorted(
        (i, i + len(v)) for v in set(values) if v for i in range(len(text)) if text.startswith(v, i)
    )
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    out, pos = [], 0
    for start, end in merged:
        out += [text[pos:start], MASK]
        pos = end
    return "".join([*out, text[pos:]])


def test_it_agrees_with_a_brute_force_masker_on_random_text() -> None:
    rng = random.Random(7)
    for _ in range(300):
        values = ["".join(rng.choice("abc") for _ in range(rng.randint(1, 4))) for _ in range(3)]
        text = "".join(rng.choice("abcx") for _ in range(30))
        pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
        assert stream(values, pieces) == reference_mask(text, values)
