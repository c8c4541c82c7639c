"""Near-duplicate lookup over task texts: MinHash signatures, LSH banding, exact Jaccard.

A text is normalised (Unicode NFKC, lowercase, whitespace collapsed;
punctuation is kept because ``1+2`` and ``1-2`` are different problems) and cut
into overlapping character n-grams ("shingles"). A text shorter than n is one
shingle, so ``"1+1"`` still duplicates ``"1+1"``. Similarity is the Jaccard
index of two shingle sets (shingles are 64-bit hashes; collisions are
negligible).

Lookup must stay around a millisecond with 100k entries, so no linear scan:

1. MinHash: ``num_perm`` hash functions ``h_k(x) = high32(a_k * x + b_k mod 2^64)``
   over the shingle hashes, minimum per function (numpy, seeded, deterministic).
2. LSH: the signature is cut into ``bands`` bands of ``num_perm / bands`` rows;
   texts sharing any whole band are candidates. With 16 bands of 4 rows a pair
   at Jaccard 0.8 becomes a candidate with probability 1 - (1 - 0.8^4)^16 ≈ 0.9998,
   at 0.5 with ≈ 0.64, at 0.2 with ≈ 0.025.
3. Candidates are ranked by signature agreement (the MinHash estimate of
   Jaccard). For that, only the low 8 bits of each signature value are kept
   ("b-bit MinHash": 64 bytes per entry, two unrelated values agree with
   probability 1/256), packed in uint64 words and compared eight at a time
   with a zero-byte bit trick, so even thousands of candidates (a pool of
   near-identical templated problems) cost well under a millisecond.
4. Candidates whose agreement is within 0.2 of the best one's, at most
   ``max_exact`` of them, get their exact Jaccard recomputed from the stored
   normalised text; ``query`` also skips those more than 0.2 below the threshold.

Band keys live in one sorted ``uint64`` array (plus a small dict of recent
additions merged in geometrically), so memory is ~16 bytes per band per entry,
64 bytes of sketch and the normalised text, and a lookup is one ``searchsorted``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable
from functools import lru_cache

import numpy as np

_WS = re.compile(r"\s+")
_BASE = np.uint64(0x100000001B3)  # odd multiplier of the rolling polynomial hash
_BAND_SALT = np.uint64(0x9E3779B97F4A7C15)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_HIGH = np.uint64(0x8080808080808080)
_BYTE_SUM = np.uint64(0x0101010101010101)
_SIG_CHUNK = 4096  # shingles per MinHash block (bounds memory at 64 x 4096 x 8 bytes)
_EST_MARGIN = 0.2
"""Signature agreement has std <= 0.0625 at 64 permutations: >3 sigma below the best is hopeless."""


def normalize_text(text: str) -> str:
    """NFKC, lowercase, whitespace runs -> one space, stripped."""
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, in place: spreads the bits of each uint64 (array arithmetic wraps silently)."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


@lru_cache(maxsize=16)
def _powers(n: int) -> np.ndarray:
    """BASE^(n-1-j) mod 2^64 for j = 0..n-1: weights of the rolling polynomial hash (do not modify)."""
    return np.array([pow(int(_BASE), n - 1 - j, 2**64) for j in range(n)], dtype=np.uint64)


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """Sorted distinct values (``np.unique`` without its overhead); sorts ``x`` in place."""
    x.sort()
    keep = np.empty(x.size, dtype=bool)
    keep[:1] = True
    np.not_equal(x[1:], x[:-1], out=keep[1:])
    return x[keep]


def shingle_hashes(norm: str, ngram: int) -> np.ndarray:
    """Sorted unique uint64 hashes of the character n-grams of an already normalised text.

    A text shorter than ``ngram`` (the empty text included) is a single shingle.
    """
    codes = np.frombuffer(norm.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.uint64)
    n = min(ngram, codes.size)
    if n == 0:
        return _mix64(np.zeros(1, dtype=np.uint64))
    count = codes.size - n + 1
    weights = _powers(n)
    raw = codes[n - 1 : n - 1 + count] + np.uint64(n)  # the last weight is 1; n marks the length
    tmp = np.empty_like(raw)
    for j in range(n - 1):
        np.multiply(codes[j : j + count], weights[j], out=tmp)
        raw += tmp
    return _sorted_unique(_mix64(raw))


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Jaccard index of two sorted unique hash arrays."""
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


class NoveltyIndex:
    """Near-duplicate index over task texts (see the module docstring for the method).

    ``add`` keys are opaque (a pool task id, say) and need not be unique.
    ``query`` returns the most similar stored entry at or above ``threshold``;
    ``max_similarity`` the best similarity among LSH candidates (0.0 when there
    are none, so novelty = 1 - max_similarity). Ties go to the earliest entry.
    """

    def __init__(self, threshold: float = 0.8, ngram: int = 5, num_perm: int = 64, bands: int = 16,
                 seed: int = 0, max_exact: int = 4) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if ngram < 1:
            raise ValueError(f"ngram must be >= 1, got {ngram}")
        if bands < 1 or num_perm % bands:
            raise ValueError(f"num_perm ({num_perm}) must be a positive multiple of bands ({bands})")
        if num_perm % 8:
            raise ValueError(f"num_perm ({num_perm}) must be a multiple of 8 (sketches are packed in uint64 words)")
        self.threshold = threshold
        self.ngram = ngram
        self.num_perm = num_perm
        self.bands = bands
        self.rows = num_perm // bands
        self.max_exact = max_exact
        rng = np.random.default_rng(seed)
        self._a = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self._b = rng.integers(0, 2**63, size=num_perm, dtype=np.uint64)
        self._row_mult = rng.integers(0, 2**63, size=self.rows, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self._band_ids = np.arange(bands, dtype=np.uint64) * _BAND_SALT
        self._keys: list[Hashable] = []
        self._texts: list[str] = []
        self._sketch = np.empty((0, num_perm // 8), dtype=np.uint64)  # low bytes of the signatures, packed
        self._sorted_keys = np.empty(0, dtype=np.uint64)
        self._sorted_ids = np.empty(0, dtype=np.int64)
        self._pending: dict[int, list[int]] = {}
        self._pending_docs = 0

    def __len__(self) -> int:
        return len(self._keys)

    # ------------------------------------------------------------------ public

    def add(self, key: Hashable, text: str) -> None:
        """Store ``text`` under ``key``."""
        norm = normalize_text(text)
        sig = self._signature(shingle_hashes(norm, self.ngram))
        idx = len(self._keys)
        self._keys.append(key)
        self._texts.append(norm)
        self._append_sketch(sig)
        for bk in self._band_keys(sig).tolist():
            self._pending.setdefault(bk, []).append(idx)
        self._pending_docs += 1
        if self._pending_docs > max(1024, len(self._keys) // 4):
            self._merge_pending()

    def query(self, text: str) -> tuple[Hashable, float] | None:
        """The most similar stored ``(key, jaccard)`` with jaccard >= threshold, else None."""
        best = self._best(text, threshold_only=True)
        if best is None or best[1] < self.threshold:
            return None
        return self._keys[best[0]], best[1]

    def max_similarity(self, text: str) -> float:
        """Highest Jaccard among the LSH candidates of ``text``; 0.0 when there are none."""
        best = self._best(text)
        return 0.0 if best is None else best[1]

    def nearest(self, text: str) -> tuple[Hashable, float] | None:
        """The most similar LSH candidate ``(key, jaccard)`` whatever its similarity; None without candidates.

        One lookup for callers that need both the similarity and the duplicate decision.
        """
        best = self._best(text)
        return None if best is None else (self._keys[best[0]], best[1])

    # ------------------------------------------------------------------ internals

    def _signature(self, shingles: np.ndarray) -> np.ndarray:
        """MinHash signature: per hash function the minimum of high32(a*x + b).

        Shingles go through in chunks so a huge text never builds a huge
        (num_perm x shingles) matrix.
        """
        best = np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        for start in range(0, shingles.size, _SIG_CHUNK):
            chunk = shingles[None, start : start + _SIG_CHUNK]
            h = self._a[:, None] * chunk
            h += self._b[:, None]
            np.minimum(best, h.min(axis=1), out=best)
        return (best >> np.uint64(32)).astype(np.uint32)

    def _band_keys(self, sig: np.ndarray) -> np.ndarray:
        """One uint64 key per band (the band's rows hashed together with the band number)."""
        rows = sig.astype(np.uint64).reshape(self.bands, self.rows)
        combined = (rows * self._row_mult).sum(axis=1, dtype=np.uint64) + self._band_ids
        return _mix64(combined)

    def _packed(self, sig: np.ndarray) -> np.ndarray:
        """The low byte of every signature value, packed into ``num_perm / 8`` uint64 words."""
        return np.ascontiguousarray(sig.astype(np.uint8)).view(np.uint64)

    def _append_sketch(self, sig: np.ndarray) -> None:
        """Append a packed sketch row, growing the matrix geometrically."""
        n = len(self._keys) - 1  # the entry's id (its key is already appended)
        if n == self._sketch.shape[0]:
            grown = np.empty((max(64, 2 * n), self._sketch.shape[1]), dtype=np.uint64)
            grown[:n] = self._sketch[:n]
            self._sketch = grown
        self._sketch[n] = self._packed(sig)

    def _agreement(self, cands: np.ndarray, sig: np.ndarray) -> np.ndarray:
        """Share of the ``num_perm`` sketch bytes each candidate shares with ``sig``."""
        x = np.take(self._sketch, cands, axis=0)
        x ^= self._packed(sig)  # a zero byte = one agreeing permutation
        t = x & _LOW7
        t += _LOW7
        t |= x
        t &= _HIGH  # the high bit of every non-zero byte
        if hasattr(np, "bitwise_count"):  # numpy >= 2.0
            differing = np.bitwise_count(t).sum(axis=1, dtype=np.int64)
        else:
            t >>= np.uint64(7)
            t *= _BYTE_SUM
            t >>= np.uint64(56)
            differing = t.sum(axis=1, dtype=np.int64)
        return 1.0 - differing / self.num_perm

    def _merge_pending(self) -> None:
        """Fold the recent additions into the sorted band-key array."""
        if not self._pending:
            return
        keys = np.fromiter((k for k, ids in self._pending.items() for _ in ids), dtype=np.uint64)
        ids = np.fromiter((i for v in self._pending.values() for i in v), dtype=np.int64)
        all_keys = np.concatenate([self._sorted_keys, keys])
        all_ids = np.concatenate([self._sorted_ids, ids])
        order = np.argsort(all_keys, kind="stable")  # stable: ids stay ascending within a key
        self._sorted_keys, self._sorted_ids = all_keys[order], all_ids[order]
        self._pending.clear()
        self._pending_docs = 0

    def _candidates(self, sig: np.ndarray) -> np.ndarray:
        """Sorted unique ids of entries sharing at least one band with ``sig``."""
        bkeys = self._band_keys(sig)
        parts: list[np.ndarray] = []
        if self._sorted_keys.size:
            lo = np.searchsorted(self._sorted_keys, bkeys, side="left")
            hi = np.searchsorted(self._sorted_keys, bkeys, side="right")
            parts.extend(self._sorted_ids[a:b] for a, b in zip(lo.tolist(), hi.tolist()) if b > a)
        for bk in bkeys.tolist():
            hit = self._pending.get(bk)
            if hit:
                parts.append(np.asarray(hit, dtype=np.int64))
        if not parts:
            return np.empty(0, dtype=np.int64)
        return _sorted_unique(np.concatenate(parts))

    def _best(self, text: str, threshold_only: bool = False) -> tuple[int, float] | None:
        """(entry id, exact jaccard) of the most similar candidate, or None without candidates.

        Exact Jaccard is computed only for candidates whose signature agreement is
        within ``_EST_MARGIN`` of the best agreement (at most ``max_exact`` of them);
        with ``threshold_only`` also only for those within the margin of the threshold.
        """
        if not self._keys:
            return None
        norm = normalize_text(text)
        shingles = shingle_hashes(norm, self.ngram)
        sig = self._signature(shingles)
        cands = self._candidates(sig)
        if cands.size == 0:
            return None
        agree = self._agreement(cands, sig)
        top = float(agree.max())
        floor = max(top, self.threshold if threshold_only else 0.0) - _EST_MARGIN
        keep = np.flatnonzero(agree >= floor)
        if keep.size == 0:
            return None
        if keep.size > self.max_exact:
            keep = keep[np.argsort(-agree[keep], kind="stable")[: self.max_exact]]
        best_id, best_sim = -1, -1.0
        for i in np.sort(cands[keep]).tolist():
            other = self._texts[i]
            sim = 1.0 if other == norm else jaccard(shingles, shingle_hashes(other, self.ngram))
            if sim > best_sim:
                best_id, best_sim = i, sim
        return best_id, best_sim
