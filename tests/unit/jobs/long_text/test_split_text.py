"""The splitter: sentence ends first (Latin, CJK and other scripts), clauses next, then words;
never inside a word; characters only in scripts written without spaces. Each segment is a slice
of the text, so joined they give the text back."""

from __future__ import annotations

import re

import pytest

from qtts.core.jobs.long_text.split_text import split_texts


def chars(texts):
    return [len(t) for t in texts]


def words(texts):
    return [len(t.split()) for t in texts]


def split(text, limit, count=words, **kw):
    (segments,) = split_texts([text], limit, count, **kw)
    assert re.sub(r"\s", "", "".join(segments)) == re.sub(r"\s", "", text)  # nothing lost
    return segments


def test_a_short_text_stays_whole_exactly():
    text = "  Hello there. How are you?  "
    assert split(text, 50) == [text]  # not even stripped: the request is today's


def test_english_is_cut_at_sentence_ends_and_sentences_are_packed():
    text = ("The fox jumps over the dog. It was not amused! Was it? Dr. Smith said so, "
            "e.g. twice. J. R. R. Tolkien wrote 3.14 and 3,000 words.")  # fmt: skip
    assert split(text, 10) == [
        "The fox jumps over the dog. It was not amused!",
        "Was it? Dr. Smith said so, e.g. twice.",
        "J. R. R. Tolkien wrote 3.14 and 3,000 words.",
    ]
    assert split(text, 10, every_sentence=True) == [
        "The fox jumps over the dog.", "It was not amused!", "Was it?",
        "Dr. Smith said so, e.g. twice.", "J. R. R. Tolkien wrote 3.14 and 3,000 words.",
    ]  # fmt: skip


def test_a_line_break_and_an_ellipsis_end_sentences():
    text = "A heading without a stop\nThe first line trails off… The next one ends."
    assert split(text, 50, every_sentence=True) == [
        "A heading without a stop", "The first line trails off…", "The next one ends."
    ]  # fmt: skip
    assert split("Wait…what now? Yes.", 50, every_sentence=True) == ["Wait…what now?", "Yes."]


def test_a_full_stop_before_a_lower_case_word_ends_no_sentence():
    """ "approx." is neither a title nor an initial: the lower-case word after it keeps it."""
    text = "It costs approx. ten dollars, etc. and more. Then we left."
    assert split(text, 50, every_sentence=True) == [
        "It costs approx. ten dollars, etc. and more.", "Then we left."
    ]  # fmt: skip


def test_a_long_sentence_is_cut_at_clauses_into_even_parts():
    text = ("When the rain stopped, the children ran outside; they played in the mud: "
            "laughing, shouting, and splashing until dark.")  # fmt: skip
    segments = split(text, 8)
    assert segments == ["When the rain stopped, the children ran outside;",
                        "they played in the mud: laughing,",
                        "shouting, and splashing until dark."]  # fmt: skip
    assert max(words(segments)) <= 8


def test_chinese_at_full_width_marks():
    text = "今天天气很好。我们去公园散步吧！你觉得怎么样？好的，我们走吧；路上小心。"
    assert split(text, 12, chars) == ["今天天气很好。", "我们去公园散步吧！", "你觉得怎么样？",
                                      "好的，我们走吧；", "路上小心。"]  # fmt: skip
    assert split(text, 18, chars) == [
        "今天天气很好。我们去公园散步吧！", "你觉得怎么样？好的，我们走吧；", "路上小心。"
    ]  # fmt: skip


def test_japanese_sentences_and_kana_kept_together():
    text = ("きょうはいい天気ですね。しゃしんをとりましょう！"
            "ちょっと待ってください、カメラを持ってきます。")  # fmt: skip
    segments = split(text, 10, chars)
    assert segments[1].endswith("ね。") and segments[3].endswith("う！")
    assert max(chars(segments)) <= 10
    for seg in segments:  # a small kana or the long-vowel mark never opens a segment
        assert seg[0] not in "ぁぃぅぇぉっゃゅょゎァィゥェォッャュョー"


def test_mixed_scripts_and_other_sentence_marks():
    text = "Hello 世界。This is English, 然后是中文。नमस्ते। आप कैसे हैं? مرحبا؟ كيف حالك"
    assert split(text, 3, every_sentence=True) == [
        "Hello 世界。", "This is English,", "然后是中文。", "नमस्ते।", "आप कैसे हैं?", "مرحبا؟",
        "كيف حالك",
    ]  # fmt: skip


def test_text_without_punctuation_is_cut_between_words():
    text = " ".join(f"word{i}" for i in range(25))
    segments = split(text, 10)
    assert [len(s.split()) for s in segments] == [8, 9, 8]  # even parts, no short tail
    assert all(re.fullmatch(r"(word\d+ ?)+", s) for s in segments)


def test_cjk_without_punctuation_is_cut_between_characters_latin_words_whole():
    text = "这是一个没有标点符号的很长的句子我们需要在字符之间切分它Python也要保持完整才行"
    segments = split(text, 10, chars)
    assert max(chars(segments)) <= 10
    assert any("Python" in s for s in segments)  # never cut inside the Latin word


def test_korean_is_cut_between_words_never_inside_one():
    text = "한국어는 단어 사이에 띄어쓰기를 합니다 그래서 음절 사이에서 자르지 않습니다"
    segments = split(text, 4, count=chars)  # "띄어쓰기를" and "않습니다" are longer than 4
    assert len(segments) > 1
    assert all(w in text.split() for s in segments for w in s.split())  # whole words only


def test_a_single_overlong_word_stays_whole():
    word = "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3
    assert split(word, 10, chars) == [word]
    text = f"Short one. {word} is long. Another."
    segments = split(text, 12, chars, every_sentence=True)
    assert any(word in s for s in segments)
    assert split("ไม่มีเว้นวรรคเลยในประโยคนี้ยาวมาก", 5, chars)  # Thai: left whole, not broken
    assert split("ไม่มีเว้นวรรคเลยในประโยคนี้ยาวมาก", 5, chars) == ["ไม่มีเว้นวรรคเลยในประโยคนี้ยาวมาก"]


def test_stray_punctuation_is_never_a_segment_alone():
    segments = split("Wait . . . what? Yes! !", 2, every_sentence=True)
    assert all(any(ch.isalnum() for ch in s) for s in segments)


@pytest.mark.parametrize("limit", [5, 20, 80])
def test_with_the_tiny_tokenizer_every_segment_fits(tmp_path, limit):
    from qtts.core.synthesis.prompt import load_tokenizer
    from qtts.core.tiny.tokenizer import write_tiny_tokenizer

    write_tiny_tokenizer(tmp_path)
    tok = load_tokenizer(tmp_path)

    def count(texts):
        return [len(ids) for ids in tok(list(texts))["input_ids"]]

    text = "The rain in Spain stays mainly in the plain, they say. 今天天气很好。" * 6
    segments = split(text, limit, count)
    assert len(segments) > 1 and max(count(segments)) <= limit + 2  # counts of parts, summed
