"""
Text to token ids: the tokenizers of this lab's datasets and models, and the encoders that turn one text
into the ids a model reads, exactly as data.py prepared its training texts (the same functions serve data
preparation, training and inference). corpora/llama2c.py downloads the tokenizer files and
evaluate.py picks a checkpoint's encoder (evaluate.text_encoder); this file reads no dataset and
downloads nothing, so they import it, never the reverse.

Token ids. tiktoken's GPT-2 BPE has no [CLS]/[PAD], so our ids put three specials first:
    0 = [PAD], 1 = [UNK], 2 = [CLS], then GPT-2 ids.
With --vocab full, GPT-2 id g becomes g + 3 (50,260 rows). With --vocab compact (the default), only
the GPT-2 ids seen in the training split get rows, in increasing order; unseen ids map to [UNK].
Every sequence starts with [CLS], whose final hidden state the classifier reads.

Read top to bottom: DataError -> the text cleaning, GPT-2 BPE and our vocabulary (TextEncoder: the encoder
study's classifiers) -> Llama 2's SentencePiece BPE, read from llama2.c's tokenizer.bin (LlamaTokenizer, as
llama2.c's run.c encodes and decodes; LlamaTextEncoder: the Llama studies) -> characters as tokens (CharCodec:
the char GPT and Pig Latin).
"""

import os
import re
import struct

import numpy as np

from configurator import ConfigError, UserError


class DataError(UserError, RuntimeError):
    """Missing, corrupt or mismatched data files, with what to do about them. Defined here, in the lowest
    module that raises it (a tokenizer.bin is a data file too); data.py raises it as data.DataError."""


# -----------------------------------------------------------------------------
# Preprocessing and GPT-2 BPE with our vocabulary (the encoder study's classifiers)

PREPROCESSING = "lower+html+url+punct+ws v2"  # stored in meta.json and checkpoints; v2: tags must start with a letter
_HTML = re.compile(r"</?[a-zA-Z][^<>]*>")  # a tag starts with a letter: 'a < b and c > d' survives
_URL = re.compile(r"(?:https?://|www\.)\S+")
_REPEAT_PUNCT = re.compile(r"([!?.,;:\-*~])\1+")
_WS = re.compile(r"\s+")


def clean_text(text):
    """The source paper's preprocessing: lowercase; remove HTML tags and URLs; collapse runs of the same
    punctuation mark ('!!!' -> '!', '...' -> '.'); collapse whitespace."""
    t = text.lower()
    t = _HTML.sub(" ", t)
    t = _URL.sub(" ", t)
    t = _REPEAT_PUNCT.sub(r"\1", t)
    return _WS.sub(" ", t).strip()


PAD, UNK, CLS = 0, 1, 2
N_SPECIAL = 3


def get_tokenizer():
    """GPT-2's BPE, from tiktoken. tiktoken keeps its two files in TIKTOKEN_CACHE_DIR (else a temporary folder)
    and downloads them when they are not there; offline, a DATA_MIRROR that holds tiktoken_cache/ (as
    shared/data does) serves them when TIKTOKEN_CACHE_DIR is not set. Files that cannot be had are a DataError
    that says what to set, not requests' traceback."""
    mirror = os.path.join(os.environ.get("DATA_MIRROR") or "", "tiktoken_cache")
    if not os.environ.get("TIKTOKEN_CACHE_DIR") and os.environ.get("DATA_MIRROR") and os.path.isdir(mirror):
        os.environ["TIKTOKEN_CACHE_DIR"] = mirror  # read by tiktoken on each load, so set before it looks
    import tiktoken

    try:
        return tiktoken.get_encoding("gpt2")
    except (OSError, ValueError) as e:  # requests' errors are OSErrors; a file of the wrong hash a ValueError
        where = os.environ.get("TIKTOKEN_CACHE_DIR") or "tiktoken's temporary cache"
        raise DataError(f"GPT-2's BPE files (tiktoken) are not in {where} and could not be downloaded "
                        f"({type(e).__name__}); without a network, set DATA_MIRROR to a copy of shared/data (it "
                        f"holds tiktoken_cache/) or TIKTOKEN_CACHE_DIR to a folder of tiktoken's files") from None


def bpe(enc, text):
    """GPT-2 BPE ids of cleaned text. A leading space is added so the first word gets the same id it
    has mid-sentence (GPT-2 folds the preceding space into each word's token)."""
    cleaned = clean_text(text)
    return enc.encode_ordinary(" " + cleaned) if cleaned else []


def id_map_from_vocab(gpt2_ids, n_bpe=50257):
    """Array mapping every GPT-2 id to our id; ids outside the vocabulary map to [UNK]. gpt2_ids: the
    compact vocabulary (GPT-2 ids, increasing) or 'full' (all n_bpe of them)."""
    gpt2_ids = range(n_bpe) if isinstance(gpt2_ids, str) else gpt2_ids  # "full"
    m = np.full(n_bpe, UNK, dtype=np.int64)
    m[np.asarray(gpt2_ids, dtype=np.int64)] = np.arange(N_SPECIAL, N_SPECIAL + len(gpt2_ids))
    return m


def cls_ids(id_map, ids, max_len):
    """A classifier's sequence: [CLS], then the first max_len - 1 of the GPT-2 ids `ids`, mapped to ours."""
    return np.concatenate([[CLS], id_map[ids[: max_len - 1]]]).astype(np.int64)


class TextEncoder:
    """Text -> our token ids ([CLS] + mapped BPE ids, truncated to max_len), from a dataset's meta."""

    def __init__(self, meta):
        self.enc = get_tokenizer()
        self.max_len = meta["max_len"]
        self.id_map = id_map_from_vocab(meta["vocab"], self.enc.n_vocab)

    def __call__(self, text, truncate=True):
        """Token ids of one text. Over-long text is cut to max_len (as in data preparation), or with
        truncate=False refused; empty text is refused too, each with a ConfigError (bad input: the caller's
        text). `self.was_truncated` tells whether it was cut."""
        ids = bpe(self.enc, text)
        if not ids:
            raise ConfigError(f"text {text!r} is empty after preprocessing; give at least one word")
        self.was_truncated = len(ids) > self.max_len - 1
        if self.was_truncated and not truncate:
            raise ConfigError(f"text has {len(ids)} tokens but this model reads at most {self.max_len - 1} "
                              f"(plus [CLS]); shorten it, or let it be cut to the first {self.max_len - 1}")
        return cls_ids(self.id_map, ids, self.max_len)


# -----------------------------------------------------------------------------
# Llama 2's SentencePiece BPE, read from llama2.c's tokenizer.bin (encodes and decodes as its run.c does)

_WORD = re.compile(r" *[^ ]*")  # what every piece looks like for word-by-word merging to be exact
_WORDS = re.compile(r" *[^ ]+| +")  # a text cut into words: each run of spaces with the non-spaces after it
_BYTE_PIECE = re.compile(r"<0x([0-9A-F]{2})>")
_NO_MERGE = -1e10  # run.c's starting "best score": only a piece scoring strictly above it is ever merged


class LlamaTokenizer:
    """SentencePiece-style BPE with byte fallback (Sennrich et al. 2016; Kudo & Richardson 2018), run the
    way llama2.c's run.c runs it, so that ids match a model trained on its tokens. (SentencePiece's own
    encode differs where a .model normalizes whitespace, as tok512.model does by stripping and collapsing
    spaces, and on a literal '▁' in the text, which it reads as a space.)

    tokenizer.bin (written by llama2.c's tokenizer.py from a SentencePiece .model), little-endian:
        max_token_length i32, then for every piece: score f32 | byte length i32 | the piece's UTF-8 bytes
    The vocabulary size is not stored: pieces run to the end of the file (so a file cut exactly between
    two pieces reads as a smaller vocabulary; compare vocab_size with the model's). The exporter writes
    SentencePiece's '▁' as a plain space and BOS/EOS as '\\n<s>\\n' and '\\n</s>\\n'. Ids 0, 1, 2 are
    <unk>, BOS, EOS; ids 3..258 are the byte pieces '<0x00>'..'<0xFF>', so byte b falls back to id b + 3.
    SentencePiece's BPE trainer scores its i-th learnt piece -i: merging the highest-scoring pair first
    replays the merges in the order training found them.
    """

    bos_id, eos_id = 1, 2  # fixed by run.c; the file does not name them

    def __init__(self, vocab, scores):
        if len(vocab) < 259 or any(vocab[3 + b] != f"<0x{b:02X}>" for b in range(256)):
            raise DataError(f"expected the byte pieces '<0x00>'..'<0xFF>' at ids 3..258 (SentencePiece byte "
                            f"fallback, which run.c assumes); got {len(vocab)} pieces starting {vocab[:5]}")
        self.vocab, self.scores, self.vocab_size = list(vocab), list(scores), len(vocab)
        self.ids = {piece: i for i, piece in enumerate(self.vocab)}  # run.c binary-searches a sorted copy
        # what each id prints: a byte piece is its raw byte, which may be only part of a UTF-8 character
        self._bytes = [bytes([int(m[1], 16)]) if (m := _BYTE_PIECE.fullmatch(p)) else p.encode() for p in self.vocab]
        # When no piece holds a space after a non-space (true of tok512 and Llama 2's 32k: spaces only lead
        # a piece), no merge can cross the start of a word's run of spaces, so each word merges on its
        # own: the same ids as merging the whole text (the merges inside one word keep their order), in
        # time linear in the text, and a word seen before is looked up (_word_ids caches it).
        self.by_words = all(_WORD.fullmatch(p) for p in self.vocab)
        self._word_ids = {}

    @classmethod
    def from_file(cls, path):
        """Read a tokenizer.bin; anything else raises DataError saying what was expected."""
        expected = f"{path}: expected llama2.c's tokenizer.bin (i32 max_token_length, then per piece f32 score, " \
                   f"i32 length, the bytes)"
        if not os.path.isfile(path):
            raise DataError(f"no tokenizer file at {path}: llama2.c's tokenizer.py writes one from a "
                            f"SentencePiece tokenizer.model")
        with open(path, "rb") as f:
            raw = f.read()
        if len(raw) < 4:
            raise DataError(f"{expected}; it holds only {len(raw)} bytes")
        (max_len,), pos = struct.unpack_from("<i", raw), 4
        vocab, scores = [], []
        while pos < len(raw):
            if pos + 8 > len(raw):
                raise DataError(f"{expected}; piece {len(vocab)}'s score and length are cut off at byte {pos}")
            score, n = struct.unpack_from("<fi", raw, pos)
            pos += 8
            if not 0 <= n <= max_len or pos + n > len(raw):
                raise DataError(f"{expected}; piece {len(vocab)} claims {n} bytes at byte {pos}, but "
                                f"max_token_length is {max_len} and {len(raw) - pos} bytes remain")
            try:
                vocab.append(raw[pos:pos + n].decode("utf-8"))
            except UnicodeDecodeError:
                raise DataError(f"{expected}; piece {len(vocab)} is not UTF-8") from None
            scores.append(score)
            pos += n
        try:
            return cls(vocab, scores)
        except DataError as e:
            raise DataError(f"{path}: {e}") from None

    def encode(self, text, bos=True, eos=False):
        """Token ids of `text`, as run.c's encode: [BOS] + a dummy-prefix space (when text is non-empty)
        + one piece per character (its UTF-8 bytes as byte pieces when the character is not a piece),
        then merges: while some adjacent pair concatenates to a piece, merge the pair whose piece scores
        highest (the leftmost on a tie, as run.c's strict '>'), then [EOS].

        Cost: merging rescans the pair scores after each merge, O(n^2) in the length merged at once; word
        by word (see by_words) that is a word's length, so a long text costs time linear in its length,
        and a word seen before costs a lookup: IMDB's 25,000 test-half reviews (tok512) take under a minute
        on one core (Python 3.11), reading the archive included."""
        ids = [self.bos_id] if bos else []
        # SentencePiece's add_dummy_prefix: the first word gets the space-led pieces it gets mid-sentence.
        text = " " + text if text else text
        if not self.by_words:
            return self.merge(ids + self.pieces(text)) + ([self.eos_id] if eos else [])
        for word in _WORDS.findall(text):  # ' the', '  quick', ...: a run of spaces, then non-spaces
            if (done := self._word_ids.get(word)) is None:
                if len(self._word_ids) > 100_000:
                    self._word_ids.clear()
                done = self._word_ids[word] = self.merge(self.pieces(word))
            ids.extend(done)
        return ids + [self.eos_id] if eos else ids

    def pieces(self, text):
        """One id per character: its piece, or its UTF-8 bytes as byte pieces (byte fallback). (A
        vocabulary without ' ' gets the byte for the dummy prefix; run.c would write id -1.)"""
        ids = []
        for ch in text:
            i = self.ids.get(ch)
            ids.extend([i] if i is not None else [b + 3 for b in ch.encode("utf-8")])
        return ids

    def merge(self, ids):
        """run.c's merge loop over a list of ids (changed in place and returned): while some adjacent
        pair concatenates to a piece, merge the pair whose piece scores highest, leftmost on a tie."""
        vocab, lookup, scores = self.vocab, self.ids, self.scores

        def pair_score(k):  # the score of merging ids[k] and ids[k + 1]; BOS takes part, as in run.c
            j = lookup.get(vocab[ids[k]] + vocab[ids[k + 1]])
            return _NO_MERGE if j is None else scores[j]

        pair = [pair_score(k) for k in range(len(ids) - 1)]
        while pair and (best := max(pair)) > _NO_MERGE:
            k = pair.index(best)  # the first maximum: the leftmost pair on a tie
            ids[k] = lookup[vocab[ids[k]] + vocab[ids[k + 1]]]
            del ids[k + 1], pair[k]  # the pair is one token now; rescore its neighbours
            if k < len(pair):
                pair[k] = pair_score(k)
            if k > 0:
                pair[k - 1] = pair_score(k - 1)
        return ids

    def decode_piece(self, prev_id, id):
        """The bytes run.c prints for token `id` after `prev_id` (for streaming): right after BOS the
        piece loses its leading space (the dummy prefix), and a byte piece is its raw byte."""
        b = self._bytes[id]
        return b[1:] if prev_id == self.bos_id and self.vocab[id].startswith(" ") else b

    def decode(self, ids):
        """Text of token ids: decode_piece's bytes joined, read as UTF-8 only at the end so a character
        split over byte pieces comes out whole (a broken one becomes U+FFFD). BOS and EOS print nothing,
        as SentencePiece drops control pieces (run.c stops at BOS before printing it). Without a BOS the
        dummy-prefix space stays, as in run.c: decode(encode(s)) == s needs bos=True."""
        out, prev = bytearray(), None
        for i in map(int, ids):
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside this vocabulary of {self.vocab_size}")
            if i not in (self.bos_id, self.eos_id):
                out += self.decode_piece(prev, i)
            prev = i
        return out.decode("utf-8", errors="replace")


class LlamaTextEncoder:
    """Text -> [BOS] + the Llama tokenizer's ids, cut to max_len; the counterpart of TextEncoder for
    a dataset tokenized for a Llama (meta["tokenizer"] = 'llama2c:<name>', the LlamaTokenizer that
    corpora/llama2c.py's load_llama_tokenizer loads by that name)."""

    def __init__(self, meta, tokenizer):
        self.tok = tokenizer
        self.max_len = meta["max_len"]

    def __call__(self, text, truncate=True):
        ids = self.tok.encode(text.strip(), bos=True)
        if len(ids) < 2:
            raise ConfigError(f"text {text!r} is empty; give at least one word")
        self.was_truncated = len(ids) > self.max_len
        if self.was_truncated and not truncate:
            raise ConfigError(f"text has {len(ids)} tokens but this model reads at most {self.max_len}; shorten "
                              f"it, or let it be cut to the first {self.max_len}")
        return np.asarray(ids[:self.max_len], dtype=np.int64)


# -----------------------------------------------------------------------------
# Characters as tokens (the char GPT on Tiny Shakespeare, the Pig Latin models)


class CharCodec:
    """Characters <-> ids of a character vocabulary (meta["vocab"], a list of characters: itos)."""

    def __init__(self, chars):
        self.itos = list(chars)
        self.stoi = {c: i for i, c in enumerate(self.itos)}

    def encode(self, text):
        unknown = sorted(set(text) - set(self.stoi))
        if unknown:
            raise ValueError(f"characters {''.join(unknown)!r} are not in this model's vocabulary of "
                             f"{len(self.itos)} characters")
        return np.array([self.stoi[c] for c in text], dtype=np.int64)

    def decode(self, ids):
        return "".join(self.itos[int(i)] for i in ids)
