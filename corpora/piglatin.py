"""
Pig Latin's words (the seq2seq study): the rules, the words of a novel, the held-out splits that make
the test one of the rules rather than of memory, and the pairs of the piglatin dataset (build_piglatin,
which data.py writes into .bin files); evaluate.py groups a model's errors by rule and by compound
with pig_latin_rules and hyphen_part_groups.

The rules (one common form of the game; the source write-up's examples all follow it):
  - a word starting with a vowel (a, e, i, o, u) gets "way":            is -> isway, equal -> equalway
  - otherwise the consonants before the first vowel move to the end, then "ay":
                                                                         brown -> ownbray, strengthening ->
                                                                         engtheningstray
  - "y" is a consonant as the first letter and a vowel after it:        yellow -> ellowyay, rhythm -> ythmrhay
  - "qu" moves as one consonant (the u goes with its q):                 quite -> itequay, square -> aresquay
  - a word with no vowel at all (mr, xv) gets "ay":                      mr -> mray
  - a hyphenated word is translated part by part:                       pleasure-grounds -> easureplay-oundsgray

Read top to bottom: the characters and the rules (pig_latin_pieces, pig_latin, pig_latin_rule) -> the novel's
words and a split's words read back (novel_words, source_words) -> the pieces of hyphenated words (word_pieces)
-> the unseen words and the novel's split (unseen_words, split_novel) -> held-out compounds by whether their
parts were taught (hyphen_parts, hyphen_part_groups; mark_taught tells a dataset's held-out splits
what was) -> compounds of training words to teach hyphens by (compounds_of), added to a run's training
split (PairList, an in-memory seq2seq split; hyphen_compounds; seq2seq_with_compounds, which data.py's
training_stream calls) -> the dataset's pairs (build_piglatin).
"""

import re

import numpy as np

from configurator import ConfigError
from corpora.imdb import read_imdb
from corpora.sources import SOURCES, archive_file, fetch
from tokenizer import PAD, CharCodec, DataError

PIG_LATIN_VOCAB = ["[PAD]", "[SOS]", "[EOS]", "-", *"abcdefghijklmnopqrstuvwxyz"]  # ids 0, 1, 2, then characters
SOS, EOS = 1, 2  # PIG_LATIN_VOCAB's [SOS] and [EOS]; PAD is 0, as everywhere
_PIG_WORD = re.compile(r"[a-z]+(?:-[a-z]+)*")  # what the study translates: letters, single inner hyphens


def pig_latin_pieces(word):
    """One unhyphenated lower-case word's Pig Latin in its three pieces, (rest, moved, ending): the letters from
    the first vowel on, the consonants before it, and "way" or "ay"; joined, they are the translation. A
    vowel-initial word moves nothing (is -> is, '', way); a word without a vowel moves all of it (mr -> '', mr,
    ay), which reads the same as the word with "ay" added. The error analysis (evaluation/piglatin_errors.py)
    asks which piece a model's first wrong letter falls in."""
    if word[0] in "aeiou":
        return word, "", "way"
    i = 1  # the first letter is a consonant, 'y' included
    while i < len(word) and word[i] not in "aeiouy":
        i += 1
    if i < len(word) and word[i] == "u" and word[i - 1] == "q":
        i += 1  # 'qu' moves together
    return word[i:], word[:i], "ay"


def pig_latin_part(word):
    """One unhyphenated lower-case word in Pig Latin, by the rules above."""
    return "".join(pig_latin_pieces(word))


def pig_latin(word):
    """A word (lower-case letters, single inner hyphens) in Pig Latin, each hyphenated part apart."""
    if not _PIG_WORD.fullmatch(word):
        raise ValueError(f"{word!r}: Pig Latin here takes lower-case letters a-z and inner hyphens")
    return "-".join(pig_latin_part(part) for part in word.split("-"))


def pig_latin_rule(word):
    """The rule a word falls under, for the error analysis: 'hyphenated', 'vowel' (+way), 'no vowel'
    (+ay) or 'consonant' (the cluster moves)."""
    if "-" in word:
        return "hyphenated"
    if word[0] in "aeiou":
        return "vowel"
    return "consonant" if any(c in "aeiouy" for c in word[1:]) else "no vowel"


def novel_words(text):
    """The distinct words of a text, sorted: runs of letters (with inner hyphens or apostrophes),
    lower-cased, keeping those of a-z and hyphens only. Possessives and contractions (darcy's, don't)
    and words with accents (tete-a-tete spelt with them) are left out, not cut: their pieces would be
    new words that the text does not have."""
    found = re.findall(r"[^\W\d_]+(?:[-'\u2019][^\W\d_]+)*", text.lower())
    return sorted({w for w in found if _PIG_WORD.fullmatch(w)})


def source_words(split):
    """The source words of a Pig Latin split (PairSplit or PairList), decoded."""
    codec = CharCodec(PIG_LATIN_VOCAB)
    return [codec.decode(split[i][0]) for i in range(len(split))]


def pig_latin_rules(split):
    """The Pig Latin rule (pig_latin_rule) of each source word of a seq2seq split, or None for a split
    whose vocabulary (its `vocab`) is not Pig Latin's characters."""
    if getattr(split, "vocab", None) != PIG_LATIN_VOCAB:
        return None
    return [pig_latin_rule(w) for w in source_words(split)]


def word_pieces(word):
    """The runs of a word's hyphenated parts, the word itself included: good-humoured -> {good-humoured, good,
    humoured}; sea-bathing-place -> also sea-bathing and bathing-place. A word occurs in another (whole or
    inside it) when it is one of the other's pieces."""
    parts = word.split("-")
    return {"-".join(parts[i:j]) for i in range(len(parts)) for j in range(i + 1, len(parts) + 1)}


def pieces_of(words):
    """Every piece (word_pieces) of every word: all that occurs in these words."""
    return set().union(*map(word_pieces, words))


UNSEEN_WORDS = 3000  # the unseen split's size: a seeded sample of the review words the novel lacks


def unseen_words(texts, novel, block_size, n=UNSEEN_WORDS, seed=1337):
    """The unseen-word test set: distinct words of `texts`, cleaned by novel_words' rule, that occur nowhere
    in `novel` (the novel's words: neither as a word nor inside a hyphenated one, as bathing in bathing-place)
    and that fit the models' context as the novel's words do (word, [EOS], [SOS] and translation in
    block_size tokens); a seeded sample of n of them (all if fewer), sorted. A novel word may be a part of
    one of them (action-packed): hyphen_parts tells those compounds apart. Returns (the sample, how many
    words qualified)."""
    in_novel = pieces_of(novel)
    candidates = [w for w in novel_words("\n".join(texts))
                  if w not in in_novel and len(w) + len(pig_latin(w)) + 2 <= block_size]
    rng = np.random.default_rng([seed, 23])  # a stream of its own: the novel's split does not depend on it
    pick = rng.choice(len(candidates), size=min(n, len(candidates)), replace=False)
    return sorted(candidates[i] for i in pick), len(candidates)


def split_novel(words, seed, n_val, n_test):
    """The novel's words split into train, val and test (sorted lists) so that no validation or test word
    occurs in another word of the novel, whole or inside it, and so in no word of another split: a word that
    is part of another word (century in eighteenth-century, self in self-conceit; in-law would be, beside
    son-in-law) always trains, and the validation and test words are drawn at random (seeded) from the
    rest. Training words may still be parts of a held-out compound (good-humoured in test, good in
    training): that tests the rule for hyphens on known words."""
    inside = {p for w in words for p in word_pieces(w) if p != w}  # the pieces of other words
    free = [w for w in words if w not in inside]
    order = np.random.default_rng(seed).permutation(len(free))
    val, test = [free[i] for i in order[:n_val]], [free[i] for i in order[n_val:n_val + n_test]]
    held_out = set(val) | set(test)
    return {"train": [w for w in words if w not in held_out], "val": sorted(val), "test": sorted(test)}


def hyphen_parts(word, taught):
    """For a hyphenated word, whether every part occurs in training ('known parts': `taught`, the pieces of
    the training words, holds each) or not ('new parts'); None for a word without hyphens. A compound of
    known parts tests the rule for hyphens alone; one with a new part tests the single-word rules too."""
    if "-" not in word:
        return None
    return "known parts" if all(p in taught for p in word.split("-")) else "new parts"


def hyphen_part_groups(split):
    """hyphen_parts of each source word of a Pig Latin split that knows what was taught (`taught`, set by
    mark_taught on the held-out splits); else None."""
    taught = getattr(split, "taught", None)
    if taught is None or getattr(split, "vocab", None) != PIG_LATIN_VOCAB:
        return None
    return [hyphen_parts(w, taught) for w in source_words(split)]


def mark_taught(splits):
    """Give each held-out split of a Pig Latin dataset ({name: split}, data.Dataset's) `taught`, the
    pieces of the training words, so hyphen_part_groups can tell compounds of taught parts from the
    others."""
    taught = pieces_of(source_words(splits["train"]))
    for name, split in splits.items():
        if name != "train":
            split.taught = taught


def compounds_of(pairs, share, seed, block_size, exclude=()):
    """Hyphenated compounds of the plain words of a training split's pairs [(word, translation)], to
    add to it: round(share * len(pairs)) of them, each 2 (three times in four) or 3 plain training words
    joined by hyphens, source to source and translation to translation. Nothing here knows the rules:
    that a compound's translation is its parts' translations joined is what the model is to learn from
    these pairs (the hyphenated words of the novel alone are too few: 138 in training). Seeded; a
    compound must fit block_size (as the data's words do), be no training word, and hold none of the
    words in `exclude` (val, test, unseen: no held-out word is taught), whole or inside it
    (brand-new-house would teach a held-out brand-new). Returns [(compound, its translation)]."""
    plain = [p for p in pairs if "-" not in p[0]]
    taken, excluded = {w for w, _ in pairs}, set(exclude)
    rng = np.random.default_rng([seed, 1342])
    want, made, tries = round(share * len(pairs)), [], 0
    while len(made) < want:
        tries += 1
        if tries > 100 * want + 1000:
            raise DataError(f"hyphen_compounds: only {len(made)} of {want} compounds fit block_size "
                            f"{block_size} and hold no excluded word")
        parts = [plain[i] for i in rng.choice(len(plain), size=2 if rng.random() < 0.75 else 3)]
        word, translation = "-".join(w for w, _ in parts), "-".join(t for _, t in parts)
        if word in taken or word_pieces(word) & excluded or len(word) + len(translation) + 2 > block_size:
            continue
        taken.add(word)
        made.append((word, translation))
    return made


class PairList:
    """An in-memory seq2seq split with PairSplit's interface: (source ids, target ids) pairs, and the
    characters they index (vocab) if known."""

    def __init__(self, pairs, vocab=None):
        self.pairs = [(np.asarray(s, dtype=np.int64), np.asarray(t, dtype=np.int64)) for s, t in pairs]
        self.lengths = np.array([len(s) for s, _ in self.pairs], dtype=np.int64)
        self.vocab = vocab

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return self.pairs[i]


def hyphen_compounds(train, share, seed, block_size, exclude=()):
    """A Pig Latin training split with hyphenated compounds of its own words added
    (piglatin.compounds_of: seeded, none a training word or holding a word of `exclude`): a PairList of
    train's pairs, then the compounds."""
    if getattr(train, "vocab", None) is None:
        raise ConfigError("hyphen_compounds joins words: this dataset's pairs have no character vocabulary")
    codec = CharCodec(train.vocab)
    pairs = [(codec.decode(s), codec.decode(t)) for s, t in (train[i] for i in range(len(train)))]
    made = compounds_of(pairs, share, seed, block_size, exclude)
    return PairList([(codec.encode(w), codec.encode(t)) for w, t in pairs + made], train.vocab)


def seq2seq_with_compounds(dataset, share, seed, block_size):
    """The training split with hyphen_compounds' compounds of its words added, none made of a
    held-out word: every other split's words are excluded."""
    train = dataset.splits["train"]
    codec = CharCodec(train.vocab) if getattr(train, "vocab", None) else None
    held_out = [codec.decode(split[i][0]) for name, split in dataset.splits.items()
                if name != "train" for i in range(len(split))] if codec else []
    out = hyphen_compounds(train, share, seed, block_size, held_out)
    print(f"hyphen_compounds: {len(out) - len(train):,} compounds of training words added to its "
          f"{len(train):,} words")
    return out


def build_piglatin(mirror=None, out_dir=None, seed=1337, n_unseen=UNSEEN_WORDS, verbose=True,
                   **_ignored):
    """The piglatin dataset from the distinct words of Pride and Prejudice: each word with its Pig
    Latin, split 80/10/10 by word (split_novel), and `unseen`, n_unseen IMDB review words the novel
    lacks (unseen_words), to tell a model that learnt the rules from one that learnt the novel's words.
    block_size in meta.json is the longest sequence a model reads: word [EOS] [SOS] translation, the
    decoder-only layout. Returns ({split: (word ids, translation ids)}, meta.json's dict)."""
    (raw,) = fetch("pride_and_prejudice", mirror).values()
    words = novel_words(raw.decode("utf-8"))
    block_size = max(len(w) + len(pig_latin(w)) + 2 for w in words)
    n_val = n_test = len(words) // 10
    split = split_novel(words, seed, n_val, n_test)
    imdb = archive_file("imdb", mirror)
    reviews = [text for half in ("train", "test") for text, _, _ in read_imdb(imdb, half)]
    split["unseen"], n_candidates = unseen_words(reviews, words, block_size, n_unseen, seed)
    taught = pieces_of(split["train"])
    codec = CharCodec(PIG_LATIN_VOCAB)
    splits, counts = {}, {}
    for k, chosen in split.items():
        pairs = [(w, pig_latin(w)) for w in chosen]
        splits[k] = ([codec.encode(w) for w, _ in pairs], [codec.encode(t) for _, t in pairs])
        rules = [pig_latin_rule(w) for w, _ in pairs]
        counts[k] = {"n": len(pairs), "rules": {r: rules.count(r) for r in sorted(set(rules))},
                     "max_word": max(len(w) for w, _ in pairs), "max_translation": max(len(t) for _, t in pairs)}
        if k != "train":  # the held-out compounds by whether their parts were taught (hyphen_parts)
            groups = [g for g in (hyphen_parts(w, taught) for w in chosen) if g]
            counts[k]["hyphenated_parts"] = {g: groups.count(g) for g in ("known parts", "new parts")}
    n_inside = len(set(words) & {p for w in words for p in word_pieces(w) if p != w})  # split_novel's `inside`
    meta = {"dataset": "piglatin", "task": "seq2seq", "tokenizer": "char", "vocab": PIG_LATIN_VOCAB,
            "vocab_size": len(PIG_LATIN_VOCAB), "block_size": block_size, "seed": seed,
            "specials": {"pad": PAD, "sos": SOS, "eos": EOS}, "words": len(words), "counts": counts,
            "split": {"rule": "a word that is part of another word of the novel always trains; "
                              "val and test are drawn at random from the rest; unseen words occur "
                              "nowhere in the novel, not even inside a hyphenated word",
                      "parts_always_train": n_inside},
            "unseen": {"from": f"the IMDB reviews, both halves ({len(reviews):,})", "qualified": n_candidates,
                       "sample": len(split["unseen"])},
            "rules": "vowel-initial +way; else the consonants before the first vowel (y a vowel "
                     "after the first letter; qu together) to the end +ay; no vowel +ay; hyphenated "
                     "words part by part",
            "sources": {"pride_and_prejudice": SOURCES["pride_and_prejudice"], "imdb": SOURCES["imdb"]}}
    if verbose:
        print(f"piglatin: {len(words):,} distinct words -> {out_dir} (30 tokens, block_size "
              f"{block_size}); {n_inside} are parts of other words and always train; unseen: "
              f"{len(split['unseen']):,} of the {n_candidates:,} words of {len(reviews):,} IMDB reviews "
              f"that occur nowhere in the novel (not even inside a word) and fit block_size")
        for k, c in counts.items():
            parts = f"  hyphenated: {c['hyphenated_parts']}" if "hyphenated_parts" in c else ""
            print(f"  {k:6s} {c['n']:5,d} words  {c['rules']}  longest word {c['max_word']}, "
                  f"translation {c['max_translation']}{parts}")
    return splits, meta
