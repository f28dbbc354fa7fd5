#!/usr/bin/env python3
"""Writes unicode_tables.inc: the Unicode data the C++ tokenizer needs to match
stock Hugging Face `tokenizers` exactly, read out of `tokenizers` itself.

Why: tokenizers' regexes run on Oniguruma built with Unicode 16 tables, while
the system PCRE2 (10.42) has Unicode 14; its Whitespace pre-tokenizer and
added-token checks use the Rust regex crate's \\w; and its NFC normalizer
uses tables older than utf8proc's (about Unicode 9). So:
  * every general category and Oniguruma's \\w (which differs inside and
    outside a character class) are swept over all code points through
    tokenizers' Split pre-tokenizer (the regex engine it uses),
  * the regex crate's \\w is swept through the Whitespace pre-tokenizer,
  * utf8proc's canonical combining classes and decompositions are compared
    (through ctypes) with what tokenizers' NFD does to every code point; the
    code points only utf8proc knows are listed as "inert" for NFC.

Run with the virtualenv's python (tokenizers pinned in python/requirements.txt):
  python src/tokenizer/gen_unicode_tables.py src/tokenizer/unicode_tables.inc
Takes about two minutes.
"""
import ctypes
import ctypes.util
import sys

import tokenizers
from tokenizers import Regex, normalizers, pre_tokenizers

CATEGORIES = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
              "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So",
              "Zs", "Zl", "Zp", "Cc", "Cf", "Co"]  # Cs cannot occur in UTF-8 text; Cn is the rest

# Every code point except the surrogates (not representable) and U+000A, which
# serves as the separator in the NFC probes.
ALL = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def matched_code_points(pattern):
    """Code points matched by an Oniguruma pattern that matches single characters."""
    text = "".join(map(chr, ALL))
    kept = pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text)
    unmatched = set()
    for piece, _ in kept:
        unmatched.update(map(ord, piece))
    return [c for c in ALL if c not in unmatched]


def regex_crate_word_code_points():
    """Code points the Whitespace pre-tokenizer (regex crate, \\w+|[^\\w\\s]+) treats as word characters."""
    probe = [c for c in ALL if c != 10]
    text = "\n".join("a" + chr(c) for c in probe)
    pieces = [p for p, _ in pre_tokenizers.Whitespace().pre_tokenize_str(text)]
    word = []
    k = 0
    for c in probe:
        ch = chr(c)
        if pieces[k] == "a" + ch:  # "a" and c in one \w+ run
            word.append(c)
            k += 1
        elif pieces[k] == "a" and k + 1 < len(pieces) and pieces[k + 1] == ch:  # c is punctuation-like
            k += 2
        elif pieces[k] == "a":  # c is whitespace, removed
            k += 1
        else:
            sys.exit(f"unexpected Whitespace pieces around U+{c:04X}: {pieces[k:k + 2]!r}")
    if k != len(pieces):
        sys.exit("Whitespace sweep out of step")
    return word


def ranges(code_points):
    out = []
    for c in sorted(code_points):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def utf8proc():
    lib = ctypes.CDLL(ctypes.util.find_library("utf8proc") or "libutf8proc.so.2")
    lib.utf8proc_get_property.restype = ctypes.POINTER(ctypes.c_int16 * 2)  # category, combining_class
    lib.utf8proc_NFD.restype = ctypes.c_void_p
    lib.utf8proc_NFD.argtypes = [ctypes.c_char_p]
    lib.utf8proc_unicode_version.restype = ctypes.c_char_p
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.free.argtypes = [ctypes.c_void_p]

    def ccc(c):
        return lib.utf8proc_get_property(c).contents[1]

    def nfd(c):
        if c == 0:
            return chr(0)
        p = lib.utf8proc_NFD(chr(c).encode())
        s = ctypes.string_at(p).decode()
        libc.free(p)
        return s

    return ccc, nfd, lib.utf8proc_unicode_version().decode()


def nfc_inert():
    """Code points whose normalization behaviour utf8proc knows but tokenizers does not."""
    ccc, nfd_utf8proc, version = utf8proc()
    probe = [c for c in ALL if c != 10]
    nfd = normalizers.NFD()

    def run(make):
        return nfd.normalize_str("\n".join(make(chr(c)) for c in probe)).split("\n")

    alone = run(lambda c: c)
    after_acute = run(lambda c: "\u0301" + c)   # reorders when 0 < ccc < 230
    before_acute = run(lambda c: c + "\u0301")  # reorders when ccc > 230
    before_grave = run(lambda c: c + "\u0316")  # reorders when ccc > 220
    known = set()
    for i, c in enumerate(probe):
        ch = chr(c)
        if (alone[i] != ch or after_acute[i] != "\u0301" + ch or before_acute[i] != ch + "\u0301"
                or before_grave[i] != ch + "\u0316"):
            known.add(c)
    inert = set()
    for c in probe:
        relevant = ccc(c) != 0 or nfd_utf8proc(c) != chr(c)
        if relevant and c not in known:
            inert.add(c)
            # Its decomposition's parts must not compose into it either.
            inert.update(ord(p) for p in nfd_utf8proc(c))
    missing = sorted(c for c in known if not (ccc(c) != 0 or nfd_utf8proc(c) != chr(c)))
    if missing:
        sys.exit("tokenizers knows normalization data utf8proc lacks: "
                 + " ".join(f"U+{c:04X}" for c in missing[:20]))
    return sorted(inert), version


def emit_ranges(out, name, rs):
    out.append(f"inline constexpr CodeRange {name}[] = {{")
    line = "   "
    for a, b in rs:
        item = f" {{0x{a:X}, 0x{b:X}}},"
        if len(line) + len(item) > 100:
            out.append(line)
            line = "   "
        line += item
    out.append(line)
    out.append("};")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    category_of = {}
    for cat in CATEGORIES:
        for c in matched_code_points(r"\p{" + cat + "}"):
            if c in category_of:
                sys.exit(f"U+{c:04X} is in both {category_of[c]} and {cat}")
            category_of[c] = cat
    runs = []
    for c in range(0x110000):
        cat = category_of.get(c, "Cs" if 0xD800 <= c <= 0xDFFF else "Cn")
        if not runs or runs[-1][1] != cat:
            runs.append((c, cat))
    word = matched_code_points(r"\w")
    class_word = matched_code_points(r"[\w]")
    crate_word = regex_crate_word_code_points()
    inert, utf8proc_version = nfc_inert()

    out = [
        "// Generated by gen_unicode_tables.py from tokenizers "
        f"{tokenizers.__version__} and utf8proc (Unicode {utf8proc_version}). Do not edit.",
        "//",
        "// General categories as tokenizers' Oniguruma sees them: (first code point,",
        "// category) runs, each lasting until the next one.",
        "inline constexpr CategoryRun kCategoryRuns[] = {",
    ]
    line = "   "
    for c, cat in runs:
        item = f" {{0x{c:X}, Gc::{cat}}},"
        if len(line) + len(item) > 100:
            out.append(line)
            line = "   "
        line += item
    out.append(line)
    out.append("};")
    out.append("")
    out.append("// Oniguruma's \\w outside a character class.")
    emit_ranges(out, "kOnigWordRanges", ranges(word))
    out.append("")
    out.append("// Oniguruma's \\w inside a character class (it lacks a few Latin-1 numbers).")
    emit_ranges(out, "kOnigClassWordRanges", ranges(class_word))
    out.append("")
    out.append("// The Rust regex crate's \\w (Whitespace pre-tokenizer, added-token checks).")
    emit_ranges(out, "kRegexCrateWordRanges", ranges(crate_word))
    out.append("")
    out.append("// Code points utf8proc normalizes but tokenizers' NFC tables do not know")
    out.append("// (and the parts of their decompositions): NFC leaves them alone.")
    emit_ranges(out, "kNfcInertRanges", ranges(inert))
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
