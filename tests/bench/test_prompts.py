import pytest

from tenor.bench.prompts import MAX_WORDS, MIN_WORDS, load_prompts, make_prompts
from tenor.errors import UserError


def test_prompts_are_deterministic_and_within_the_word_range():
    prompts = make_prompts(300, seed=3)
    assert prompts == make_prompts(300, seed=3)
    words = [len(p.split()) for p in prompts]
    assert min(words) >= MIN_WORDS and max(words) <= MAX_WORDS
    assert max(words) - min(words) > 150  # varied lengths, not one size
    assert len(set(prompts)) == len(prompts)


def test_other_seeds_give_other_prompts():
    assert make_prompts(5, seed=0) != make_prompts(5, seed=1)


def test_prompt_arguments_are_checked():
    with pytest.raises(ValueError, match="at least 1"):
        make_prompts(0)
    with pytest.raises(ValueError, match="min_words"):
        make_prompts(1, min_words=100, max_words=50)


def test_a_prompts_file_is_split_on_blank_lines_and_cycled(tmp_path):
    path = tmp_path / "prompts.txt"
    path.write_text("first prompt\nstill first\n\n\nsecond prompt\n", encoding="utf-8")
    assert load_prompts(path, 3) == ["first prompt still first", "second prompt", "first prompt still first"]


def test_a_missing_or_empty_prompts_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        load_prompts(tmp_path / "nope.txt", 1)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(UserError, match="no prompts"):
        load_prompts(empty, 1)
