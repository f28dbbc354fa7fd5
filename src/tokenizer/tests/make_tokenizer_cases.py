#!/usr/bin/env python3
"""Builds tokenizer.json files with stock Hugging Face `tokenizers` (nothing is
downloaded: vocabularies are trained here on an embedded corpus) and records
what stock tokenizers does with them, for tokenizer_conformance_test.cpp.

  make_tokenizer_cases.py OUT_DIR              tokenizers + component cases
  make_tokenizer_cases.py OUT_DIR --unicode    only the sweep over every code point (slow)
  make_tokenizer_cases.py OUT_DIR --committed  the smaller set kept in tests/data

Writes OUT_DIR/<name>.json (tokenizer files) and OUT_DIR/cases.json:
  tokenizers:     per file: vocab_size, id_to_token, token_to_id, encode cases (text -> ids),
                  decode cases (ids -> text, with and without special tokens,
                  and the DecodeStream step outputs)
  normalizers, pre_tokenizers, decoders: component configs with their outputs
  unicode (--unicode): code points each regex class matches, NFC probes

The tokenizers:
  qwen35     byte-level BPE built by transformers' own Qwen3_5Tokenizer class
             (NFC, the Qwen3.5 Split regex + ByteLevel, ByteLevel decoder) from
             a vocabulary trained here, plus Qwen's special tokens
  wordlevel  WordLevel with Whitespace, added tokens with lstrip/rstrip/
             single_word, no decoder (tokens joined with spaces)
  llama      BPE with byte_fallback and fuse_unk, Prepend/Replace normalizers,
             Replace/ByteFallback/Fuse/Strip decoder, merges in the legacy
             "a b" string format
  bpe_unk    BPE with an unk token (no fallback), ignore_merges, Split
             pre-tokenizers with other behaviours, Fuse/Replace/Strip decoder
"""
import contextlib
import json
import os
import random
import sys

# Never reach the network (transformers is only used for its Qwen3_5Tokenizer class).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import tokenizers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers.decoders import DecodeStream  # noqa: E402

SEED = 20240611

CORPUS = """Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine.
One day, she saw a big, red ball in the park. "Can I play with it?" she asked her mom.
"Yes, you can," said Mom. Lily was so happy! She didn't know that the ball wasn't hers.
It's a beautiful day; we'll go to the beach, they've said, and I'm sure he'd come too.
IT'S LOUD. WE'LL SEE. THEY'VE GONE. I'M HERE. HE'D KNOW. DON'T STOP. She's right.
The year 2024 had 366 days. Pi is about 3.14159, and 1,000,000 is a million. Call 555-0123 at 10:30pm.
Prices: $5.99, €12,50, £3 and ¥1000. Temperatures: -3°C to +25°C. 50% off! #hashtag @user
def main():\n    return foo(bar[0], {'key': "value"}) + 42  # comment
for (int i = 0; i < n; ++i) { x += y * 2; }   /* C code */ if (a && b || !c) {}
Le café est très bon, n'est-ce pas? Où est la bibliothèque? Ça va très bien, merci.
Die Größe der Straße ist außergewöhnlich. Schöne Grüße aus München! Übung macht den Meister.
El niño comió una piña en la mañana. ¿Dónde está el baño? ¡Qué sorpresa!
Быстрая коричневая лиса прыгает через ленивую собаку. Привет, мир!
Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί. Καλημέρα κόσμε!
我们今天去公园玩。天气很好，阳光明媚。你好，世界！中文分词测试。
今日はいい天気ですね。東京に行きたいです。カタカナとひらがな。
안녕하세요, 세계! 오늘은 날씨가 좋습니다. 한국어 텍스트입니다.
مرحبا بالعالم! كيف حالك اليوم؟ اللغة العربية جميلة.
नमस्ते दुनिया! आज मौसम बहुत अच्छा है। हिन्दी पाठ।
สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ
Emoji time 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇯🇵🇫🇷 ❤️ 🎉🎉 ✨ and more 🙂!
Tabs\tand\tspaces   and    more     spaces.\nNew line.\r\nWindows line.\n\n\nThree newlines.
Numbers in other scripts: ٣٤٥ ४५६ ３４５ and superscripts x² y³ ½ ¼.
Ligatures ﬁ ﬂ, the Kelvin sign K, long s ſ, Å (angstrom) and Å, Ω (ohm) and Ω.
Decomposed: e\u0301 a\u0300 o\u0308 n\u0303 — composed: é à ö ñ. Hangul jamo: \u1100\u1161\u11a8.
A story: Tom and Sue went to the zoo. They saw lions, tigers and bears. Oh my!
The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX. the the the the.
<|endoftext|> is not special in this corpus line, nor is <|im_start|>user.
""".replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r")

QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Building blocks of the test strings: every kind of character the regexes,
# the normalizer and the byte-level map treat differently.
ATOMS = [
    "a", "Z", "hello", " world", "Hello", "HELLO", "don't", "'s", "'S", "'ll", "'LL", "'re", "'ve", "'m",
    "'d", "'x", "'", "\"", "0", "7", "123", "4567", "3.14", "1,000", "٣", "४", "３", "²", "½",
    " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", "\v", "\f", "\u0085", "\u00a0", "\u2028",
    "\u3000", "\u200b", "\u200d", ".", ",", "!", "?", "...", "--", "—", "(", ")", "[", "]", "{", "}",
    "<", ">", "|", "_", "#", "@", "$", "€", "£", "¥", "°", "+", "=", "*", "/", "\\", "~", "`",
    "é", "e\u0301", "à", "a\u0300", "ñ", "n\u0303", "ö", "o\u0308", "Å", "\u212b", "Ω", "\u2126",
    "K", "\u212a", "ſ", "ß", "ﬁ", "İ", "ı", "Ǆ", "ǅ", "\u0301", "\u0327", "\u0316", "\u0345",
    "\u07fd", "\u0898", "\u1ac1", "\U00011938", "\U00011935\U00011930", "\u1100\u1161\u11a8", "한",
    "\u0915\u093c", "\u0958", "가", "привет", "Ελλάδα", "你好", "世界", "日本語", "カタカナ",
    "مرحبا", "नमस्ते", "ไทย", "😀", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "🎉", "\U0001f9d1\u200d\U0001f4bb",
    "\u1c89", "\ua7cb", "\U000105c0", "\U0002ebf0", "\U00010d40", "\U00011f00", "\U0001e4d0",
    "\ue000", "\U000f0000", "\U0010fffd", "\ufeff", "\ufffd", "\u0000", "\u0001", "\u001f", "\u007f",
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_start", "im_end|>", "<think>", "</think>",
    "[MASK]", "[CLS]", "[UNK]", "foo", "foobar", "café", "cafe\u0301", "▁", "Ġ", "Ċ", "<0x41>",
]

HANDWRITTEN = [
    "", " ", "  ", "\n", "\t", "a", "Hello world", "Hello, world!", " Hello", "Hello ",
    "It's a test. We'll see, they've said; I'm here, he'd go.", "IT'S LOUD", "don't DON'T Don'T",
    "The year 2024 had 366 days and 3.14159 is pi.", "1234567890", "x²+y³=z⁴", "٣٤٥ ४५६ ３４５",
    "Le café est très bon", "Le cafe\u0301 est tre\u0300s bon", "Größe Straße", "Привет, мир!",
    "你好，世界！", "今日はいい天気ですね。", "안녕하세요", "\u1100\u1161\u11a8\u1100\u1161",
    "مرحبا بالعالم", "नमस्ते दुनिया", "สวัสดีชาวโลก", "😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇯🇵🇫🇷",
    "a" * 50, " " * 40, "\n" * 12, "\t \t \n \r\n  \n", "word" + " " * 17 + "word", "  leading", "trailing  ",
    "line1\nline2\r\nline3\n\n\nline4", "x\u0085y\u2028z\u3000w\u00a0v",
    "<|endoftext|>", "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more<|endoftext|><|endoftext|>", "<|im_start", "<|im_start|", "<|<|im_end|>|>",
    "<think>reasoning</think>answer", "a [MASK] b", "a[MASK]b", "  [MASK]  ", "[MASK][MASK]",
    "foo foobar barfoo foo_ foo. (foo)", "café cafe\u0301 CAFÉ", "[CLS] x [SEP]",
    "\u0000\u0001\u001f\u007f", "\ufeffBOM", "\u212a\u212b\u2126", "ſs SS ß ẞ", "'s's'S'S",
    "\u0301\u0301", "e\u0301\u0327", "e\u0327\u0301", "\u07fd\u0301", "a\u1ac1\u0316", "\U00011935\U00011930",
    "\u1c89\u1c8a ꟋꟌ \U000105c0\U000105c1 \U00010d40\U00010d41", "▁hello ▁ Ġx Ċ", "<0x41><0xE2>",
    "def f(x):\n    return x * 2  # twice\n", "if (a && b || !c) { x += 1; }",
    " " * 3000 + "x", "x" + " \n" * 500 + "\t" * 300, "é" * 200 + "😀" * 100,
]


def random_strings(count, rng):
    out = []
    for _ in range(count):
        n = rng.randint(1, 12)
        out.append("".join(rng.choice(ATOMS) for _ in range(n)))
    # Random code points from the whole range (no surrogates).
    for _ in range(count // 4):
        chars = []
        for _ in range(rng.randint(1, 10)):
            c = rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff), rng.randint(0x3000, 0xd7ff),
                            rng.randint(0xe000, 0xffff), rng.randint(0x10000, 0x10ffff)])
            chars.append(chr(c))
        out.append("".join(chars))
    return out


def test_strings(rng):
    return HANDWRITTEN + random_strings(400, rng)


def corpus_lines():
    return [line for line in CORPUS.split("\n") if line] + [CORPUS]


# ---------------------------------------------------------------- tokenizers


def qwen35_tokenizer():
    from transformers.models.qwen3_5.tokenization_qwen3_5 import PRETOKENIZE_REGEX, Qwen3_5Tokenizer

    trainer_tok = Tokenizer(models.BPE())
    trainer_tok.normalizer = normalizers.NFC()
    trainer_tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    trainer_tok.train_from_iterator(corpus_lines(), trainer)
    model = json.loads(trainer_tok.to_str())["model"]
    qwen = Qwen3_5Tokenizer(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]])
    tok = qwen.backend_tokenizer
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in QWEN_SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in ["<think>", "</think>"]])
    return tok


def wordlevel_tokenizer():
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.normalizer = normalizers.Sequence([normalizers.NFC()])
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(vocab_size=400, min_frequency=1, show_progress=False,
                                        special_tokens=["[UNK]", "[CLS]", "[SEP]"])
    tok.train_from_iterator(corpus_lines(), trainer)
    tok.add_special_tokens([AddedToken("[MASK]", special=True, lstrip=True, rstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("foo", single_word=True, normalized=True),
                    AddedToken("cafe\u0301", normalized=True),
                    AddedToken("<think>", normalized=False, lstrip=True)])
    return tok


def llama_tokenizer(out_dir):
    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizer
    trainer = trainers.BpeTrainer(vocab_size=500, min_frequency=1, show_progress=False, limit_alphabet=90,
                                  special_tokens=["<unk>", "<s>", "</s>"])
    trainer_tok.train_from_iterator(corpus_lines(), trainer)
    model = json.loads(trainer_tok.to_str())["model"]
    vocab = dict(model["vocab"])
    for b in range(256):
        name = f"<0x{b:02X}>"
        if name not in vocab:
            vocab[name] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) for m in model["merges"]], unk_token="<unk>",
                               fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizer
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"]])
    # Rewrite the merges in the legacy "a b" format and read the file back, so
    # the expectations come from stock tokenizers parsing that format.
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [f"{a} {b}" for a, b in data["model"]["merges"]]
    path = os.path.join(out_dir, "llama.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    return Tokenizer.from_file(path)


def bpe_unk_tokenizer():
    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.NFC()
    trainer_tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[\p{P}\p{S}]"), behavior="isolated"),
    ])
    trainer = trainers.BpeTrainer(vocab_size=300, min_frequency=1, show_progress=False, limit_alphabet=50,
                                  special_tokens=["<unk>", "<pad>"])
    trainer_tok.train_from_iterator(corpus_lines(), trainer)
    model = json.loads(trainer_tok.to_str())["model"]
    tok = Tokenizer(models.BPE(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]],
                               unk_token="<unk>", fuse_unk=False, ignore_merges=True))
    tok.normalizer = trainer_tok.normalizer
    tok.pre_tokenizer = trainer_tok.pre_tokenizer
    # (Strip with right > 0 panics in Rust on an empty text, so only left here.)
    tok.decoder = decoders.Sequence([decoders.Fuse(), decoders.Replace(Regex(r"\s+"), " "),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.add_special_tokens([AddedToken("<unk>", special=True, normalized=False),
                            AddedToken("<pad>", special=True, normalized=False)])
    return tok


def stream(tok, ids, skip):
    """DecodeStream.step outputs: text, None, and {"error": ...} where it raised (the end)."""
    s = DecodeStream(skip_special_tokens=skip)
    out = []
    for i in ids:
        try:
            out.append(s.step(tok, i))
        except Exception as e:  # e.g. "Invalid prefix encountered while decoding stream"
            out.append({"error": str(e)})
            break
    return out


def tokenizer_cases(name, tok, out_dir, strings, rng, random_decodes=150):
    path = os.path.join(out_dir, name + ".json")
    if not os.path.exists(path):
        tok.save(path)
    tok = Tokenizer.from_file(path)  # expectations from the file as written
    vocab = tok.get_vocab(with_added_tokens=True)
    vocab_size = max(vocab.values()) + 1
    encode = []
    decode = []
    for text in strings:
        ids = tok.encode(text, add_special_tokens=False).ids
        encode.append({"text": text, "ids": ids})
    id_lists = [c["ids"] for c in encode]
    for _ in range(random_decodes):
        n = rng.randint(1, 24)
        id_lists.append([rng.randrange(vocab_size + 3) for _ in range(n)])
    for ids in id_lists:
        decode.append({
            "ids": ids,
            "text": tok.decode(ids, skip_special_tokens=False),
            "text_skip": tok.decode(ids, skip_special_tokens=True),
            "stream": stream(tok, ids, False),
            "stream_skip": stream(tok, ids, True),
        })
    id_to_token = [tok.id_to_token(i) for i in range(vocab_size + 3)]
    probes = [t for t in id_to_token if t is not None]
    probes += [t.content for t in tok.get_added_tokens_decoder().values()] + ["", "not a token"]
    return {
        "name": name,
        "file": name + ".json",
        "vocab_size": vocab_size,
        "id_to_token": id_to_token,
        # token_to_id of every token above and of every added token's content
        "token_to_id": {t: tok.token_to_id(t) for t in probes},
        "encode": encode,
        "decode": decode,
    }


# ---------------------------------------------------------------- components


def config_of(component, attribute):
    """The JSON tokenizers writes for a component, via a Tokenizer holding it."""
    tok = Tokenizer(models.BPE())
    setattr(tok, attribute, component)
    return json.loads(tok.to_str())[attribute]


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+"
                  r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")


def pre_tokenizer_components():
    out = []
    behaviors = ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]
    for behavior in behaviors:
        for invert in (False, True):
            out.append(pre_tokenizers.Split(Regex(r"\s+|\d"), behavior=behavior, invert=invert))
            out.append(pre_tokenizers.Split(" ", behavior=behavior, invert=invert))
    out += [
        pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated"),
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.Split(Regex(GPT4_PATTERN), behavior="isolated"),
        pre_tokenizers.Split(Regex(r"x*"), behavior="isolated"),         # empty matches
        pre_tokenizers.Split(Regex(r"\b"), behavior="isolated"),         # empty matches, \b
        pre_tokenizers.Split(Regex(r"^.|.$"), behavior="isolated"),      # Ruby line anchors
        pre_tokenizers.Split(Regex(r"(?m:a.b)|\w+|\W"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"(?<=\p{Lu})\p{Ll}|\p{^L}"), behavior="removed"),
        pre_tokenizers.Split(Regex(r"[\w\d]+|[^\w\s]|\D\S"), behavior="isolated"),
        pre_tokenizers.Split(Regex(r"\h+|\p{Letter}+|\p{Nd}+|\P{L}"), behavior="contiguous"),
        pre_tokenizers.Split("<|im_end|>", behavior="isolated"),
        pre_tokenizers.Split("", behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
        pre_tokenizers.Whitespace(),
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN35_PATTERN), behavior="isolated"),
                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
        pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                 pre_tokenizers.Split(Regex(r"\p{N}"), behavior="merged_with_previous")]),
    ]
    return out


def normalizer_components():
    return [
        normalizers.NFC(),
        normalizers.Sequence([normalizers.NFC(), normalizers.NFC()]),
        normalizers.Prepend("▁"),
        normalizers.Replace(" ", "▁"),
        normalizers.Replace(Regex(r"\s+"), " "),
        normalizers.Replace(Regex(r"a*"), "-"),
        normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁"), normalizers.NFC()]),
    ]


DECODER_TOKENS = [
    "<0x41>", "<0xE2>", "<0x82>", "<0xAC>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0xFF>", "<0x0A>",
    "<0x20>", "<0xe2>", "<0x+F>", "<0xZZ>", "<0x4>", "<0x411>", "▁", "▁hello", "▁▁", "world", " ", "  ",
    "Ġ", "Ġhello", "Ċ", "âĤ¬", "ðŁĺ", "Ģ", "é", "€", "😀", "x", "<s>", "abc", "a▁b", "▁a▁",
    "\ue000Once", "\ue000", "a\ue000b", "\ue000\ue000",
]


def decoder_components():
    return [
        decoders.ByteLevel(),
        decoders.ByteFallback(),
        decoders.Fuse(),
        decoders.Strip(content=" ", left=1, right=0),
        decoders.Strip(content="▁", left=2, right=1),
        decoders.Replace("▁", " "),
        decoders.Replace(Regex(r"\s+"), "_"),
        decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                           decoders.Strip(content=" ", left=1, right=0)]),
        decoders.Sequence([decoders.ByteFallback(), decoders.ByteLevel()]),
        decoders.Metaspace(replacement="▁", prepend_scheme="first"),
        decoders.Metaspace(replacement="▁", prepend_scheme="never"),
        decoders.Metaspace(replacement="\ue000", prepend_scheme="always", split=False),
        # The story machine's decoder (machine/story_tokenizer.h).
        decoders.Sequence([decoders.Metaspace(replacement="\ue000", prepend_scheme="first", split=False),
                           decoders.Replace(Regex("<0x00>|<0x7F>"), ""), decoders.ByteFallback(), decoders.Fuse()]),
    ]


@contextlib.contextmanager
def rust_panics_silenced():
    """Rust prints a panic report on stderr before raising; keep the log readable."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def component_cases(strings, rng):
    pre = []
    for p in pre_tokenizer_components():
        pre.append({"config": config_of(p, "pre_tokenizer"),
                    "cases": [{"text": s, "pieces": [piece for piece, _ in p.pre_tokenize_str(s)]}
                              for s in strings]})
    norm = []
    for n in normalizer_components():
        norm.append({"config": config_of(n, "normalizer"),
                     "cases": [{"text": s, "normalized": n.normalize_str(s)} for s in strings]})
    dec = []
    token_lists = [[t] for t in DECODER_TOKENS]
    for _ in range(200):
        token_lists.append([rng.choice(DECODER_TOKENS) for _ in range(rng.randint(0, 8))])
    for d in decoder_components():
        cases = []
        for tokens in token_lists:
            try:
                with rust_panics_silenced():
                    cases.append({"tokens": tokens, "text": d.decode(tokens)})
            except BaseException:  # Strip panics (index out of range) on some inputs; skip those
                pass
        dec.append({"config": config_of(d, "decoder"), "cases": cases})
    return {"normalizers": norm, "pre_tokenizers": pre, "decoders": dec}


# ---------------------------------------------------------------- unicode


UNICODE_PATTERNS = [r"\p{L}", r"\p{N}", r"\p{M}", r"\w", r"[\w]", r"\W", r"\s", r"\d", r"[^\s\p{L}\p{M}\p{N}]",
                    r"\p{P}", r"\p{S}", r"\p{Z}", r"\p{Cf}", r"(?i:[strevmld])"]


def unicode_cases():
    everything = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    text = "".join(map(chr, everything))
    classes = {}
    for pattern in UNICODE_PATTERNS:
        kept = pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text)
        unmatched = set()
        for piece, _ in kept:
            unmatched.update(map(ord, piece))
        rs = []
        for c in everything:
            if c in unmatched:
                continue
            if rs and rs[-1][1] == c - 1:
                rs[-1][1] = c
            else:
                rs.append([c, c])
        classes[pattern] = rs
    # NFC probes around every code point (U+000A separates them); only the
    # results that differ from the input are recorded.
    nfc = normalizers.NFC()
    probes = {"c": ("", ""), "acute+c": ("\u0301", ""), "c+acute": ("", "\u0301"), "c+grave_below": ("", "\u0316"),
              "e+c": ("e", "")}
    nfc_changed = {}
    for name, (before, after) in probes.items():
        inputs = [before + (chr(c) if c != 10 else "x") + after for c in everything]
        outputs = nfc.normalize_str("\n".join(inputs)).split("\n")
        nfc_changed[name] = {"before": before, "after": after,
                             "changed": {str(c): o for c, i, o in zip(everything, inputs, outputs) if i != o}}
    return {"classes": classes, "nfc": nfc_changed}


def main():
    if len(sys.argv) < 2 or sys.argv[2:] not in ([], ["--unicode"], ["--committed"]):
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else ""
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(SEED)
    cases = {"tokenizers_version": tokenizers.__version__}
    if mode == "--unicode":
        cases["unicode"] = unicode_cases()
    elif mode == "--committed":
        # (The very long texts stay in the live test only, to keep the files small.)
        strings = [t for t in HANDWRITTEN if len(t) < 500] + random_strings(60, rng)
        cases["tokenizers"] = [
            tokenizer_cases("qwen35", qwen35_tokenizer(), out_dir, strings, rng, random_decodes=40),
            tokenizer_cases("llama", llama_tokenizer(out_dir), out_dir, strings, rng, random_decodes=40),
        ]
    else:
        strings = test_strings(rng)
        cases["tokenizers"] = [
            tokenizer_cases("qwen35", qwen35_tokenizer(), out_dir, strings, rng),
            tokenizer_cases("wordlevel", wordlevel_tokenizer(), out_dir, strings, rng),
            tokenizer_cases("llama", llama_tokenizer(out_dir), out_dir, strings, rng),
            tokenizer_cases("bpe_unk", bpe_unk_tokenizer(), out_dir, strings, rng),
        ]
        cases.update(component_cases(strings, rng))
    with open(os.path.join(out_dir, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
