import random

import numpy as np
import pytest

from synco.grading.novelty import NoveltyIndex, jaccard, normalize_text, shingle_hashes

LONG = (
    "A farmer has 17 cows and buys 5 more each week for 3 weeks. Then he sells half of them at the "
    "market and gives 2 to his neighbour. How many cows does the farmer have left at the end?"
)
OTHERS = [
    "What is the sum of the first 100 positive integers that are divisible by 7?",
    "Compute the determinant of the 3 by 3 matrix whose entries are 1 through 9 in row order.",
    "A circle of radius 4 is inscribed in a square. What is the area between them?",
    "How many ways can 6 people sit around a round table if two of them refuse to sit together?",
]


def build(*texts: str, **kw: float) -> NoveltyIndex:
    index = NoveltyIndex(**kw)  # type: ignore[arg-type]
    for key, text in enumerate(texts):
        index.add(key, text)
    return index


def test_normalize_text():
    assert normalize_text("  Hello\n\tWORLD  ＡＢ ") == "hello world ab"


def test_shingles_hand_counted():
    # "abcabc" has 3-grams abc, bca, cab, abc -> 3 distinct
    assert shingle_hashes("abcabc", 3).size == 3
    assert shingle_hashes("ab", 3).size == 1  # shorter than n: one shingle
    assert shingle_hashes("", 3).size == 1


def test_jaccard_hand_value():
    # 3-grams: "abcd" -> {abc, bcd}; "abce" -> {abc, bce}: 1 shared of 3
    assert jaccard(shingle_hashes("abcd", 3), shingle_hashes("abce", 3)) == pytest.approx(1 / 3)


def test_exact_duplicate_found_after_normalisation():
    index = build(*OTHERS, LONG)
    assert index.query("  " + LONG.upper().replace(" ", "\n ")) == (4, 1.0)


def test_near_duplicate_one_word_changed():
    index = build(*OTHERS, LONG)
    variant = LONG.replace("neighbour", "brother")
    expected = jaccard(shingle_hashes(normalize_text(LONG), 5), shingle_hashes(normalize_text(variant), 5))
    assert 0.8 < expected < 1.0
    key, sim = index.query(variant)  # type: ignore[misc]
    assert key == 4 and sim == pytest.approx(expected)
    assert index.max_similarity(variant) == pytest.approx(expected)


def test_unrelated_text_not_found():
    index = build(*OTHERS, LONG)
    text = "Let f(x) = x^3 - 2x + 1. Find all real roots of f and their product."
    assert index.query(text) is None
    assert index.max_similarity(text) < 0.3


def test_similar_but_below_threshold_is_not_a_duplicate():
    index = build(LONG)
    half = LONG[: len(LONG) // 2] + " Then what is the total number of goats and sheep on the farm in spring?"
    truth = jaccard(shingle_hashes(normalize_text(LONG), 5), shingle_hashes(normalize_text(half), 5))
    assert 0.35 < truth < 0.5
    assert index.max_similarity(half) == pytest.approx(truth)  # shares enough bands to be a candidate
    assert index.query(half) is None
    assert index.nearest(half) == (0, pytest.approx(truth))
    assert build(LONG, threshold=0.35).query(half) == (0, pytest.approx(truth))


def test_short_texts():
    index = build("1+1", "x^2")
    assert index.query("1+1") == (0, 1.0)
    assert index.query(" 1+1 ") == (0, 1.0)
    assert index.query("1+2") is None
    assert index.query("x^2") == (1, 1.0)
    assert index.max_similarity("1-1") == 0.0


def test_empty_index():
    index = NoveltyIndex()
    assert len(index) == 0
    assert index.query(LONG) is None and index.max_similarity(LONG) == 0.0 and index.nearest(LONG) is None


def test_len_and_non_unique_keys():
    index = build("a b c d e f g", "h i j k l m n")
    index.add("x", "a b c d e f g")
    assert len(index) == 3
    assert index.query("a b c d e f g") == (0, 1.0)  # ties go to the earliest entry


def test_deterministic_signatures():
    a, b = NoveltyIndex(seed=3), NoveltyIndex(seed=3)
    sh = shingle_hashes(normalize_text(LONG), 5)
    assert np.array_equal(a._signature(sh), b._signature(sh))
    assert not np.array_equal(a._signature(sh), NoveltyIndex(seed=4)._signature(sh))


def test_results_same_across_merges():
    """Entries found before and after the pending buffer is merged into the sorted arrays."""
    rng = random.Random(0)
    texts = [f"Problem {i}: {rng.randint(0, 10**9)} apples and {rng.randint(0, 10**9)} pears; how many fruits?" for i in range(2500)]
    index = build(*texts)
    assert index._sorted_keys.size > 0 and index._pending  # both parts in use
    for i in (0, 1000, 2499):
        assert index.query(texts[i]) == (i, 1.0)
    twin = build(*texts)
    probe = texts[7].replace("apples", "plums")
    assert index.max_similarity(probe) == twin.max_similarity(probe)


@pytest.mark.parametrize("kw", [{"threshold": 0.0}, {"threshold": 1.5}, {"ngram": 0}, {"num_perm": 60, "bands": 16}])
def test_bad_parameters(kw):
    with pytest.raises(ValueError):
        NoveltyIndex(**kw)


@pytest.mark.parametrize("popcount", [True, False])
def test_packed_agreement_matches_plain_byte_comparison(popcount, monkeypatch):
    if not popcount:
        monkeypatch.delattr(np, "bitwise_count", raising=False)  # the numpy < 2 path
    index = build(*OTHERS, LONG, LONG.replace("cows", "goats"))
    sig = index._signature(shingle_hashes(normalize_text(LONG), 5))
    cands = np.arange(len(index))
    stored = index._sketch[: len(index)].view(np.uint8).reshape(len(index), -1)
    plain = (stored == sig.astype(np.uint8)).mean(axis=1)
    assert np.allclose(index._agreement(cands, sig), plain)
    assert index._agreement(np.array([4]), sig)[0] == 1.0


def test_long_text_signature_is_chunked_consistently():
    rng = random.Random(1)
    text = " ".join(str(rng.randint(0, 10**6)) for _ in range(3000))  # ~20k shingles: several chunks
    index = build(text)
    sh = shingle_hashes(normalize_text(text), 5)
    assert sh.size > 2 * 4096
    with np.errstate(over="ignore"):
        full = ((index._a[:, None] * sh[None, :] + index._b[:, None]).min(axis=1) >> np.uint64(32)).astype(np.uint32)
    assert np.array_equal(index._signature(sh), full)
    assert index.query(text + " 7") == (0, pytest.approx(1.0, abs=0.01))
