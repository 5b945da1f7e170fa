#!/usr/bin/env python3
"""Reference transcription of what Pyserini (Anserini on Lucene 9/10) computes
for BM25 over the shared knowledge base: the analyzer of Anserini's
DefaultEnglishAnalyzer and the scores of Lucene's BM25Similarity for the query
of Anserini's BagOfWordsQueryGenerator. Written from the Java/JFlex sources,
independently of the Go implementation (retrieval/lucene*.go), to check it:

  tokenizer  StandardTokenizerImpl.jflex, transcribed rule by rule into
             regular expressions run by a Thompson NFA (longest match, at most
             255 UTF-16 units, the scanner's buffer); character classes from
             Python's unicodedata (categories and character names)
  filters    EnglishPossessiveFilter, LowerCaseFilter, StopFilter
             (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET), PorterStemFilter
             (PorterStemmer.java, on UTF-16 units)
  scoring    BM25Similarity: float32 idf/avgdl/norm cache/clause scores
             (numpy float32), SmallFloat.intToByte4 lengths, repeated tokens
             as one clause boosted by the count (BooleanQuery.rewrite merges
             duplicate SHOULD clauses), clause scores summed in double and
             rounded to float; ties by docid ascending
             (BREAK_SCORE_TIES_BY_DOCID)

Documents are the KB passages, contents = title + " " + text (text alone
when the title is empty), ids the passage ids. Queries are the question and
the human rewrite of the 825 judged turns of cast2020-2022 and
mtrag_human_eval_subset. Writes, per analyzer ("plain": lowercase ASCII
[a-z0-9] runs; "lucene-english"), the top 10 of every query with the float32
bits of its score, and prints Recall@10 (relevance >= 1).

  python3 scripts/lucene_ref/lucene_ref.py [--data ../shared/data] [--out retrieval/testdata/lucene_parity]
"""
import argparse
import gzip
import json
import math
import os
import re
import struct
import sys
import unicodedata

import numpy as np

# --------------------------------------------------------------------------
# Character classes (Unicode 9 Word_Break, as far as unicodedata tells)

MID_LETTER = {0x3A, 0xB7, 0x387, 0x5F4, 0x2027, 0xFE13, 0xFE55, 0xFF1A}
MID_NUM_LET = {0x2E, 0x2018, 0x2019, 0x2024, 0xFE52, 0xFF07, 0xFF0E}
MID_NUM = {0x2C, 0x3B, 0x37E, 0x589, 0x60C, 0x60D, 0x66C, 0x7F8, 0x2044, 0xFE10, 0xFE14, 0xFE50, 0xFE54,
           0xFF0C, 0xFF1B}
EXTEND_NUM_LET = {0x5F, 0x202F, 0x203F, 0x2040, 0x2054, 0xFE33, 0xFE34, 0xFE4D, 0xFE4E, 0xFE4F, 0xFF3F}
KATAKANA_EXTRA = {0x3031, 0x3032, 0x3033, 0x3034, 0x3035, 0x309B, 0x309C, 0x30A0, 0x30FC, 0xFF70}
ALETTER_EXTRA = (set(range(0x2C2, 0x2C6)) | set(range(0x2D2, 0x2D8)) | {0x2DE, 0x2DF} | set(range(0x2E5, 0x2EC))
                 | {0x2ED} | set(range(0x2EF, 0x300)) | {0x5F3, 0x55A, 0x55B, 0x55C, 0x55E, 0x58A}
                 | set(range(0xA708, 0xA717)) | {0xA720, 0xA721, 0xA789, 0xA78A, 0xAB5B})
SA_NAMES = ("THAI ", "LAO ", "MYANMAR ", "KHMER ", "TAI LE ", "NEW TAI LUE ", "TAI THAM ", "TAI VIET ")

EMOJI = [(0x23, 0x23), (0x2A, 0x2A), (0x30, 0x39), (0xA9, 0xA9), (0xAE, 0xAE), (0x203C, 0x203C), (0x2049, 0x2049), (0x2122, 0x2122), (0x2139, 0x2139), (0x2194, 0x2199), (0x21A9, 0x21AA), (0x231A, 0x231B), (0x2328, 0x2328), (0x23CF, 0x23CF), (0x23E9, 0x23F3), (0x23F8, 0x23FA), (0x24C2, 0x24C2), (0x25AA, 0x25AB), (0x25B6, 0x25B6), (0x25C0, 0x25C0), (0x25FB, 0x25FE), (0x2600, 0x2604), (0x260E, 0x260E), (0x2611, 0x2611), (0x2614, 0x2615), (0x2618, 0x2618), (0x261D, 0x261D), (0x2620, 0x2620), (0x2622, 0x2623), (0x2626, 0x2626), (0x262A, 0x262A), (0x262E, 0x262F), (0x2638, 0x263A), (0x2640, 0x2640), (0x2642, 0x2642), (0x2648, 0x2653), (0x265F, 0x2660), (0x2663, 0x2663), (0x2665, 0x2666), (0x2668, 0x2668), (0x267B, 0x267B), (0x267E, 0x267F), (0x2692, 0x2697), (0x2699, 0x2699), (0x269B, 0x269C), (0x26A0, 0x26A1), (0x26A7, 0x26A7), (0x26AA, 0x26AB), (0x26B0, 0x26B1), (0x26BD, 0x26BE), (0x26C4, 0x26C5), (0x26C8, 0x26C8), (0x26CE, 0x26CF), (0x26D1, 0x26D1), (0x26D3, 0x26D4), (0x26E9, 0x26EA), (0x26F0, 0x26F5), (0x26F7, 0x26FA), (0x26FD, 0x26FD), (0x2702, 0x2702), (0x2705, 0x2705), (0x2708, 0x270D), (0x270F, 0x270F), (0x2712, 0x2712), (0x2714, 0x2714), (0x2716, 0x2716), (0x271D, 0x271D), (0x2721, 0x2721), (0x2728, 0x2728), (0x2733, 0x2734), (0x2744, 0x2744), (0x2747, 0x2747), (0x274C, 0x274C), (0x274E, 0x274E), (0x2753, 0x2755), (0x2757, 0x2757), (0x2763, 0x2764), (0x2795, 0x2797), (0x27A1, 0x27A1), (0x27B0, 0x27B0), (0x27BF, 0x27BF), (0x2934, 0x2935), (0x2B05, 0x2B07), (0x2B1B, 0x2B1C), (0x2B50, 0x2B50), (0x2B55, 0x2B55), (0x3030, 0x3030), (0x303D, 0x303D), (0x3297, 0x3297), (0x3299, 0x3299), (0x1F004, 0x1F004), (0x1F0CF, 0x1F0CF), (0x1F170, 0x1F171), (0x1F17E, 0x1F17F), (0x1F18E, 0x1F18E), (0x1F191, 0x1F19A), (0x1F1E6, 0x1F1FF), (0x1F201, 0x1F202), (0x1F21A, 0x1F21A), (0x1F22F, 0x1F22F), (0x1F232, 0x1F23A), (0x1F250, 0x1F251), (0x1F300, 0x1F321), (0x1F324, 0x1F393), (0x1F396, 0x1F397), (0x1F399, 0x1F39B), (0x1F39E, 0x1F3F0), (0x1F3F3, 0x1F3F5), (0x1F3F7, 0x1F4FD), (0x1F4FF, 0x1F53D), (0x1F549, 0x1F54E), (0x1F550, 0x1F567), (0x1F56F, 0x1F570), (0x1F573, 0x1F57A), (0x1F587, 0x1F587), (0x1F58A, 0x1F58D), (0x1F590, 0x1F590), (0x1F595, 0x1F596), (0x1F5A4, 0x1F5A5), (0x1F5A8, 0x1F5A8), (0x1F5B1, 0x1F5B2), (0x1F5BC, 0x1F5BC), (0x1F5C2, 0x1F5C4), (0x1F5D1, 0x1F5D3), (0x1F5DC, 0x1F5DE), (0x1F5E1, 0x1F5E1), (0x1F5E3, 0x1F5E3), (0x1F5E8, 0x1F5E8), (0x1F5EF, 0x1F5EF), (0x1F5F3, 0x1F5F3), (0x1F5FA, 0x1F64F), (0x1F680, 0x1F6C5), (0x1F6CB, 0x1F6D2), (0x1F6D5, 0x1F6D7), (0x1F6DD, 0x1F6E5), (0x1F6E9, 0x1F6E9), (0x1F6EB, 0x1F6EC), (0x1F6F0, 0x1F6F0), (0x1F6F3, 0x1F6FC), (0x1F7E0, 0x1F7EB), (0x1F7F0, 0x1F7F0), (0x1F90C, 0x1F93A), (0x1F93C, 0x1F945), (0x1F947, 0x1F9FF), (0x1FA70, 0x1FA74), (0x1FA78, 0x1FA7C), (0x1FA80, 0x1FA86), (0x1FA90, 0x1FAAC), (0x1FAB0, 0x1FABA), (0x1FAC0, 0x1FAC5), (0x1FAD0, 0x1FAD9), (0x1FAE0, 0x1FAE7), (0x1FAF0, 0x1FAF6)]
EMOJI_MODIFIER_BASE = [(0x261D, 0x261D), (0x26F9, 0x26F9), (0x270A, 0x270D), (0x1F385, 0x1F385), (0x1F3C2, 0x1F3C4), (0x1F3C7, 0x1F3C7), (0x1F3CA, 0x1F3CC), (0x1F442, 0x1F443), (0x1F446, 0x1F450), (0x1F466, 0x1F478), (0x1F47C, 0x1F47C), (0x1F481, 0x1F483), (0x1F485, 0x1F487), (0x1F48F, 0x1F48F), (0x1F491, 0x1F491), (0x1F4AA, 0x1F4AA), (0x1F574, 0x1F575), (0x1F57A, 0x1F57A), (0x1F590, 0x1F590), (0x1F595, 0x1F596), (0x1F645, 0x1F647), (0x1F64B, 0x1F64F), (0x1F6A3, 0x1F6A3), (0x1F6B4, 0x1F6B6), (0x1F6C0, 0x1F6C0), (0x1F6CC, 0x1F6CC), (0x1F90C, 0x1F90C), (0x1F90F, 0x1F90F), (0x1F918, 0x1F91F), (0x1F926, 0x1F926), (0x1F930, 0x1F939), (0x1F93C, 0x1F93E), (0x1F977, 0x1F977), (0x1F9B5, 0x1F9B6), (0x1F9B8, 0x1F9B9), (0x1F9BB, 0x1F9BB), (0x1F9CD, 0x1F9CF), (0x1F9D1, 0x1F9DD), (0x1FAC3, 0x1FAC5), (0x1FAF0, 0x1FAF6)]
EXTENDED_PICTOGRAPHIC = [(0xA9, 0xA9), (0xAE, 0xAE), (0x203C, 0x203C), (0x2049, 0x2049), (0x2122, 0x2122), (0x2139, 0x2139), (0x2194, 0x2199), (0x21A9, 0x21AA), (0x231A, 0x231B), (0x2328, 0x2328), (0x2388, 0x2388), (0x23CF, 0x23CF), (0x23E9, 0x23F3), (0x23F8, 0x23FA), (0x24C2, 0x24C2), (0x25AA, 0x25AB), (0x25B6, 0x25B6), (0x25C0, 0x25C0), (0x25FB, 0x25FE), (0x2600, 0x2605), (0x2607, 0x2612), (0x2614, 0x2685), (0x2690, 0x2705), (0x2708, 0x2712), (0x2714, 0x2714), (0x2716, 0x2716), (0x271D, 0x271D), (0x2721, 0x2721), (0x2728, 0x2728), (0x2733, 0x2734), (0x2744, 0x2744), (0x2747, 0x2747), (0x274C, 0x274C), (0x274E, 0x274E), (0x2753, 0x2755), (0x2757, 0x2757), (0x2763, 0x2767), (0x2795, 0x2797), (0x27A1, 0x27A1), (0x27B0, 0x27B0), (0x27BF, 0x27BF), (0x2934, 0x2935), (0x2B05, 0x2B07), (0x2B1B, 0x2B1C), (0x2B50, 0x2B50), (0x2B55, 0x2B55), (0x3030, 0x3030), (0x303D, 0x303D), (0x3297, 0x3297), (0x3299, 0x3299), (0x1F000, 0x1F0FF), (0x1F10D, 0x1F10F), (0x1F12F, 0x1F12F), (0x1F16C, 0x1F171), (0x1F17E, 0x1F17F), (0x1F18E, 0x1F18E), (0x1F191, 0x1F19A), (0x1F1AD, 0x1F1E5), (0x1F201, 0x1F20F), (0x1F21A, 0x1F21A), (0x1F22F, 0x1F22F), (0x1F232, 0x1F23A), (0x1F23C, 0x1F23F), (0x1F249, 0x1F3FA), (0x1F400, 0x1F53D), (0x1F546, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F774, 0x1F77F), (0x1F7D5, 0x1F7FF), (0x1F80C, 0x1F80F), (0x1F848, 0x1F84F), (0x1F85A, 0x1F85F), (0x1F888, 0x1F88F), (0x1F8AE, 0x1F8FF), (0x1F90C, 0x1F93A), (0x1F93C, 0x1F945), (0x1F947, 0x1FAFF), (0x1FC00, 0x1FFFD)]
EMOJI_MODIFIER = [(0x1F3FB, 0x1F3FF)]


def in_ranges(rs, c):
    return any(a <= c <= b for a, b in rs)


def name(ch):
    return unicodedata.name(ch, "")


def is_extend(ch):
    c = ord(ch)
    return unicodedata.category(ch) in ("Mn", "Me", "Mc") or c in (0x200C, 0xFF9E, 0xFF9F)


def is_format(ch):
    return unicodedata.category(ch) == "Cf" and ord(ch) not in (0x200B, 0x200C, 0x200D)


def is_han(ch):
    n = name(ch)
    return (n.startswith("CJK UNIFIED IDEOGRAPH") or n.startswith("CJK COMPATIBILITY IDEOGRAPH")
            or n.startswith("CJK RADICAL") or n.startswith("KANGXI RADICAL")
            or ord(ch) in (0x3005, 0x3007) or 0x3021 <= ord(ch) <= 0x3029 or 0x3038 <= ord(ch) <= 0x303B)


def is_hiragana(ch):
    return name(ch).startswith("HIRAGANA")


def is_katakana(ch):
    n = name(ch)
    return ((n.startswith("KATAKANA ") or n.startswith("HALFWIDTH KATAKANA") or n.startswith("CIRCLED KATAKANA")
             or n.startswith("SQUARED KATAKANA")) and not is_extend(ch)) or ord(ch) in KATAKANA_EXTRA


def is_sa(ch):
    return name(ch).startswith(SA_NAMES) and unicodedata.category(ch)[0] in "LM"


def is_hebrew_letter(ch):
    return name(ch).startswith("HEBREW") and unicodedata.category(ch) == "Lo"


def is_aletter(ch):
    cat = unicodedata.category(ch)
    if not (cat in ("Lu", "Ll", "Lt", "Lm", "Lo", "Nl") or ord(ch) in ALETTER_EXTRA
            or name(ch).startswith("CIRCLED LATIN") or name(ch).startswith("PARENTHESIZED LATIN")):
        return False
    return not (is_han(ch) or is_hiragana(ch) or is_katakana(ch) or is_sa(ch) or is_hebrew_letter(ch)
                or is_extend(ch))


def is_numeric(ch):
    return unicodedata.category(ch) == "Nd" or ord(ch) == 0x66B


def is_emoji_char(ch):
    c = ord(ch)
    rkam = (0x1F1E6 <= c <= 0x1F1FF or ch in "0123456789#*" or c in (0xA9, 0xAE, 0x2122, 0x3030, 0x303D)
            or in_ranges(EMOJI_MODIFIER, c))
    return in_ranges(EXTENDED_PICTOGRAPHIC, c) or (in_ranges(EMOJI, c) and not rkam)


PREDS = {
    "ext": lambda ch: is_extend(ch) or is_format(ch) or ord(ch) == 0x200D,
    "ext_sans_pres": lambda ch: (is_extend(ch) or is_format(ch) or ord(ch) == 0x200D) and ord(ch) not in (0xFE0E, 0xFE0F),
    "zwj": lambda ch: ord(ch) == 0x200D,
    "keycap_base": lambda ch: ch in "0123456789#*",
    "keycap": lambda ch: ord(ch) == 0x20E3,
    "pres_sel": lambda ch: ord(ch) == 0xFE0F,
    "emoji_char": is_emoji_char,
    "emoji_mod_base": lambda ch: in_ranges(EMOJI_MODIFIER_BASE, ord(ch)),
    "emoji_mod": lambda ch: in_ranges(EMOJI_MODIFIER, ord(ch)),
    "tag_spec": lambda ch: 0xE0020 <= ord(ch) <= 0xE007E,
    "tag_term": lambda ch: ord(ch) == 0xE007F,
    "ri": lambda ch: 0x1F1E6 <= ord(ch) <= 0x1F1FF,
    "hangul": lambda ch: name(ch).startswith("HANGUL") and (is_aletter(ch) or is_hebrew_letter(ch)),
    "ahletter": lambda ch: is_aletter(ch) or is_hebrew_letter(ch),
    "numeric": lambda ch: is_numeric(ch) or (0xFF00 <= ord(ch) <= 0xFFEF and unicodedata.category(ch) == "Nd"),
    "katakana": is_katakana,
    "mid_letter": lambda ch: ord(ch) in MID_LETTER or ord(ch) in MID_NUM_LET or ch == "'",
    "mid_numeric": lambda ch: ord(ch) in MID_NUM or ord(ch) in MID_NUM_LET or ch == "'",
    "enl": lambda ch: ord(ch) in EXTEND_NUM_LET,
    "han": is_han,
    "hiragana": is_hiragana,
    "single_quote": lambda ch: ch == "'",
    "double_quote": lambda ch: ch == '"',
    "hebrew": is_hebrew_letter,
    "sa": is_sa,
}
PRED_NAMES = sorted(PREDS)

# --------------------------------------------------------------------------
# Regular expressions over those classes, compiled to a Thompson NFA.


class NFA:
    def __init__(self):
        self.eps = []  # state -> [states]
        self.edge = []  # state -> (pred, state) or None

    def new(self):
        self.eps.append([])
        self.edge.append(None)
        return len(self.eps) - 1


# a fragment builder takes (nfa, start) and returns its end state
def C(pred):
    def build(n, s):
        m, e = n.new(), n.new()
        n.eps[s].append(m)
        n.edge[m] = (pred, e)
        return e
    return build


def Seq(*fs):
    def build(n, s):
        for f in fs:
            s = f(n, s)
        return s
    return build


def Alt(*fs):
    def build(n, s):
        e = n.new()
        for f in fs:
            m = n.new()
            n.eps[s].append(m)
            n.eps[f(n, m)].append(e)
        return e
    return build


def Star(f):
    def build(n, s):
        m = n.new()
        n.eps[s].append(m)
        n.eps[f(n, m)].append(m)
        e = n.new()
        n.eps[m].append(e)
        return e
    return build


def Plus(f):
    return Seq(f, Star(f))


def Opt(f):
    return Alt(f, Seq())


# StandardTokenizerImpl.jflex macros
ExtFmtZwjSansPresSel = Star(C("ext_sans_pres"))
ExtFmtZwj = Star(C("ext"))
KeyCapBaseCharEx = Seq(C("keycap_base"), ExtFmtZwjSansPresSel)
KeyCapEx = Seq(C("keycap"), ExtFmtZwjSansPresSel)
EmojiCharEx = Seq(C("emoji_char"), ExtFmtZwjSansPresSel)
EmojiModifierBaseEx = Seq(C("emoji_mod_base"), ExtFmtZwjSansPresSel)
EmojiModifierEx = Seq(C("emoji_mod"), ExtFmtZwjSansPresSel)
EmojiCharOrPresSeqOrModSeq = Alt(Seq(Star(C("zwj")), EmojiCharEx, Opt(C("pres_sel"))),
                                 Seq(Opt(Seq(Star(C("zwj")), EmojiModifierBaseEx)), EmojiModifierEx))
HangulEx = Seq(C("hangul"), ExtFmtZwj)
AHLetterEx = Seq(C("ahletter"), ExtFmtZwj)
NumericEx = Seq(C("numeric"), ExtFmtZwj)
KatakanaEx = Seq(C("katakana"), ExtFmtZwj)
MidLetterEx = Seq(C("mid_letter"), ExtFmtZwj)
MidNumericEx = Seq(C("mid_numeric"), ExtFmtZwj)
ExtendNumLetEx = Seq(C("enl"), ExtFmtZwj)
HanEx = Seq(C("han"), ExtFmtZwj)
HiraganaEx = Seq(C("hiragana"), ExtFmtZwj)
SingleQuoteEx = Seq(C("single_quote"), ExtFmtZwj)
DoubleQuoteEx = Seq(C("double_quote"), ExtFmtZwj)
HebrewLetterEx = Seq(C("hebrew"), ExtFmtZwj)
RegionalIndicatorEx = Seq(C("ri"), ExtFmtZwj)
ComplexContextEx = Seq(C("sa"), ExtFmtZwj)

EMOJI_RULE = Alt(
    Seq(EmojiCharOrPresSeqOrModSeq, Alt(Star(Seq(C("zwj"), EmojiCharOrPresSeqOrModSeq)),
                                        Seq(Plus(C("tag_spec")), C("tag_term")))),
    Seq(KeyCapBaseCharEx, Opt(C("pres_sel")), KeyCapEx),
    Seq(RegionalIndicatorEx, RegionalIndicatorEx))
NUMERIC_RULE = Seq(Star(ExtendNumLetEx), NumericEx, Star(Seq(Alt(Star(ExtendNumLetEx), MidNumericEx), NumericEx)),
                   Star(ExtendNumLetEx))
_word_part = Alt(Seq(KatakanaEx, Star(Seq(Star(ExtendNumLetEx), KatakanaEx))),
                 Plus(Alt(Seq(HebrewLetterEx, Alt(SingleQuoteEx, Seq(DoubleQuoteEx, HebrewLetterEx))),
                          Seq(NumericEx, Star(Seq(Alt(Star(ExtendNumLetEx), MidNumericEx), NumericEx))),
                          Seq(AHLetterEx, Star(Seq(Alt(Star(ExtendNumLetEx), MidLetterEx), AHLetterEx))))))
WORD_RULE = Seq(Star(ExtendNumLetEx), _word_part, Star(Seq(Plus(ExtendNumLetEx), _word_part)), Star(ExtendNumLetEx))
TOKEN_RULES = Alt(EMOJI_RULE, NUMERIC_RULE, Plus(HangulEx), Plus(KatakanaEx), WORD_RULE, Plus(ComplexContextEx),
                  HanEx, HiraganaEx)


class Scanner:
    def __init__(self, rule):
        self.n = NFA()
        self.start = self.n.new()
        self.final = rule(self.n, self.start)
        self.sig_cache = {}
        self.dfa = {}
        self.start_set = self.closure({self.start})

    def closure(self, states):
        stack, seen = list(states), set(states)
        while stack:
            s = stack.pop()
            for t in self.n.eps[s]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    def sig(self, ch):
        s = self.sig_cache.get(ch)
        if s is None:
            s = frozenset(p for p in PRED_NAMES if PREDS[p](ch))
            self.sig_cache[ch] = s
        return s

    def step(self, states, ch):
        sig = self.sig(ch)
        key = (states, sig)
        r = self.dfa.get(key)
        if r is None:
            nxt = set()
            for s in states:
                e = self.n.edge[s]
                if e is not None and e[0] in sig:
                    nxt.add(e[1])
            r = self.closure(nxt)
            self.dfa[key] = r
        return r

    def longest(self, text, i):
        states, best, units, j = self.start_set, 0, 0, i
        while j < len(text):
            units += 2 if ord(text[j]) > 0xFFFF else 1
            if units > 255:
                break
            states = self.step(states, text[j])
            if not states:
                break
            j += 1
            if self.final in states:
                best = j - i
        return best

    def tokens(self, text):
        out, i = [], 0
        while i < len(text):
            n = self.longest(text, i)
            if n == 0:
                i += 1
            else:
                out.append(text[i:i + n])
                i += n
        return out


SCANNER = Scanner(TOKEN_RULES)

# --------------------------------------------------------------------------
# Filters

STOP = set("a an and are as at be but by for if in into is it no not of on or such that the their then there "
           "these they this to was will with".split())


def possessive(tok):
    if len(tok) >= 2 and tok[-2] in "'\u2019\uff07" and tok[-1] in "sS":
        return tok[:-2]
    return tok


def lower(tok):
    out = []
    for ch in tok:
        lo = ch.lower()
        if len(lo) != 1:  # Python's full case mapping; Java's toLowerCase(int) is the simple one
            lo = {"\u0130": "i"}.get(ch, ch)
        out.append(lo)
    return "".join(out)


class Porter:
    """PorterStemmer.java, line by line, on a list of UTF-16 code units."""

    def stem(self, units):
        self.b = list(units)
        self.k = len(self.b) - 1
        self.k0 = 0
        self.j = 0
        if self.k > self.k0 + 1:
            self.step1(); self.step2(); self.step3(); self.step4(); self.step5(); self.step6()
        return self.b[:self.k + 1]

    def ch(self, i):
        return chr(self.b[i]) if self.b[i] < 128 else None

    def cons(self, i):
        c = self.ch(i)
        if c in ("a", "e", "i", "o", "u"):
            return False
        if c == "y":
            return True if i == self.k0 else not self.cons(i - 1)
        return True

    def m(self):
        n = 0
        i = self.k0
        while True:
            if i > self.j:
                return n
            if not self.cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > self.j:
                    return n
                if self.cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > self.j:
                    return n
                if not self.cons(i):
                    break
                i += 1
            i += 1

    def vowelinstem(self):
        return any(not self.cons(i) for i in range(self.k0, self.j + 1))

    def doublec(self, j):
        if j < self.k0 + 1:
            return False
        if self.b[j] != self.b[j - 1]:
            return False
        return self.cons(j)

    def cvc(self, i):
        if i < self.k0 + 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.ch(i) not in ("w", "x", "y")

    def ends(self, s):
        l = len(s)
        o = self.k - l + 1
        if o < self.k0:
            return False
        for i in range(l):
            if self.b[o + i] != ord(s[i]):
                return False
        self.j = self.k - l
        return True

    def setto(self, s):
        o = self.j + 1
        for i, c in enumerate(s):
            if o + i < len(self.b):
                self.b[o + i] = ord(c)
            else:
                self.b.append(ord(c))
        self.k = self.j + len(s)

    def r(self, s):
        if self.m() > 0:
            self.setto(s)

    def step1(self):
        if self.ch(self.k) == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.setto("i")
            elif self.ch(self.k - 1) != "s":
                self.k -= 1
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowelinstem():
            self.k = self.j
            if self.ends("at"):
                self.setto("ate")
            elif self.ends("bl"):
                self.setto("ble")
            elif self.ends("iz"):
                self.setto("ize")
            elif self.doublec(self.k):
                ch = self.ch(self.k)
                self.k -= 1
                if ch in ("l", "s", "z"):
                    self.k += 1
            elif self.m() == 1 and self.cvc(self.k):
                self.setto("e")

    def step2(self):
        if self.ends("y") and self.vowelinstem():
            self.b[self.k] = ord("i")

    def step3(self):
        if self.k == self.k0:
            return
        table = {
            "a": [("ational", "ate"), ("tional", "tion")],
            "c": [("enci", "ence"), ("anci", "ance")],
            "e": [("izer", "ize")],
            "l": [("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")],
            "o": [("ization", "ize"), ("ation", "ate"), ("ator", "ate")],
            "s": [("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")],
            "t": [("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")],
            "g": [("logi", "log")],
        }
        for suf, rep in table.get(self.ch(self.k - 1), []):
            if self.ends(suf):
                self.r(rep)
                break

    def step4(self):
        table = {
            "e": [("icate", "ic"), ("ative", ""), ("alize", "al")],
            "i": [("iciti", "ic")],
            "l": [("ical", "ic"), ("ful", "")],
            "s": [("ness", "")],
        }
        for suf, rep in table.get(self.ch(self.k), []):
            if self.ends(suf):
                self.r(rep)
                break

    def step5(self):
        if self.k == self.k0:
            return
        c = self.ch(self.k - 1)
        if c == "o":
            if not (self.ends("ion") and self.j >= 0 and self.ch(self.j) in ("s", "t")):
                if not self.ends("ou"):
                    return
        else:
            table = {"a": ["al"], "c": ["ance", "ence"], "e": ["er"], "i": ["ic"], "l": ["able", "ible"],
                     "n": ["ant", "ement", "ment", "ent"], "s": ["ism"], "t": ["ate", "iti"], "u": ["ous"],
                     "v": ["ive"], "z": ["ize"]}
            if not any(self.ends(s) for s in table.get(c, [])):
                return
        if self.m() > 1:
            self.k = self.j

    def step6(self):
        self.j = self.k
        if self.ch(self.k) == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.ch(self.k) == "l" and self.doublec(self.k) and self.m() > 1:
            self.k -= 1


def to_units(s):
    b = s.encode("utf-16-le")
    return [b[i] | b[i + 1] << 8 for i in range(0, len(b), 2)]


def from_units(u):
    return b"".join(struct.pack("<H", x) for x in u).decode("utf-16-le")


_porter = Porter()
_term_cache = {}


def lucene_english(text):
    out = []
    for tok in SCANNER.tokens(text):
        t = lower(possessive(tok))
        r = _term_cache.get(t)
        if r is None:
            r = "" if t in STOP else from_units(_porter.stem(to_units(t)))
            r = (r, t in STOP)
            _term_cache[t] = r
        if not r[1]:
            out.append(r[0])
    return out


def plain(text):
    return [m.decode() for m in re.findall(rb"[a-z0-9]+", text.encode("utf-8").lower())]


# --------------------------------------------------------------------------
# Lucene's BM25


def int_to_byte4(i):
    def long_to_int4(v):
        nbits = v.bit_length()
        if nbits < 4:
            return v
        shift = nbits - 4
        return ((v >> shift) & 0x07) | ((shift + 1) << 3)
    free = 255 - long_to_int4(2 ** 31 - 1)
    return i if i < free else free + long_to_int4(i - free)


def byte4_to_int(b):
    def int4_to_long(i):
        bits, shift = i & 0x07, (i >> 3) - 1
        return bits if shift == -1 else (bits | 0x08) << shift
    free = 255 - 231
    return b if b < free else free + int4_to_long(b - free)


class LuceneIndex:
    def __init__(self, ids, texts, analyze, k1=0.9, b=0.4):
        self.ids = ids
        self.post = {}  # term -> ([doc], [tf])
        lengths = []
        for d, text in enumerate(texts):
            toks = analyze(text)
            lengths.append(len(toks))
            tf = {}
            for t in toks:
                tf[t] = tf.get(t, 0) + 1
            for t, f in tf.items():
                p = self.post.setdefault(t, ([], []))
                p[0].append(d)
                p[1].append(f)
        self.post = {t: (np.array(d, dtype=np.int64), np.array(f, dtype=np.float32)) for t, (d, f) in self.post.items()}
        doc_count = sum(1 for l in lengths if l > 0)
        self.doc_count = doc_count
        sum_ttf = sum(lengths)
        k1, b = np.float32(k1), np.float32(b)
        avgdl = np.float32(sum_ttf / float(doc_count))
        cache = np.zeros(256, dtype=np.float32)
        for i in range(256):
            cache[i] = np.float32(1) / (k1 * ((np.float32(1) - b) + b * np.float32(byte4_to_int(i)) / avgdl))
        self.norm_inv = cache[np.array([int_to_byte4(l) for l in lengths], dtype=np.int64)]

    def idf(self, df):
        return np.float32(math.log(1 + (self.doc_count - df + 0.5) / (df + 0.5)))

    def search(self, tokens, k):
        counts = {}
        for t in tokens:
            if t in self.post:
                counts[t] = counts.get(t, 0) + 1
        acc = {}
        for t, c in counts.items():
            docs, tfs = self.post[t]
            w = np.float32(c) * self.idf(len(docs))
            s = w - w / (np.float32(1) + tfs * self.norm_inv[docs])
            assert s.dtype == np.float32
            for d, v in zip(docs.tolist(), s.astype(np.float64).tolist()):
                acc[d] = acc.get(d, 0.0) + v
        hits = [(float(np.float32(v)), self.ids[d]) for d, v in acc.items()]
        hits.sort(key=lambda h: (-h[0], h[1]))
        return hits[:k]


def f32bits(x):
    return "%08x" % struct.unpack("<I", struct.pack("<f", x))[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap.add_argument("--data", default=os.path.join(root, "..", "shared", "data"))
    ap.add_argument("--out", default=os.path.join(root, "retrieval", "testdata", "lucene_parity"))
    args = ap.parse_args()
    ids, texts = [], []
    for line in open(os.path.join(args.data, "kb", "passages.jsonl"), encoding="utf-8"):
        r = json.loads(line)
        ids.append(r["id"])
        texts.append(r["text"] if not r.get("title") else r["title"] + " " + r["text"])
    turns = []
    for f in ("cast2020", "cast2021", "cast2022", "mtrag_human_eval_subset"):
        for line in open(os.path.join(args.data, "conversations", f + ".jsonl"), encoding="utf-8"):
            r = json.loads(line)
            rel = {p["id"] for p in r["passages"] if p.get("relevance", 1) >= 1}
            q, rw = (r.get("question") or "").strip(), (r.get("rewrite") or "").strip()
            if q and rw and rel:
                turns.append(("%s_%s" % (r["conv_id"], r["turn"]), r["question"], r["rewrite"], rel))
    print("%d documents, %d judged turns" % (len(ids), len(turns)), file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    for an_name, analyze in (("plain", plain), ("lucene-english", lucene_english)):
        ix = LuceneIndex(ids, texts, analyze)
        path = os.path.join(args.out, an_name + ".jsonl.gz")
        recall = {"question": 0.0, "rewrite": 0.0}
        with gzip.GzipFile(path, "wb", mtime=0) as gz:
            for qid, question, rewrite, rel in turns:
                for field, text in (("question", question), ("rewrite", rewrite)):
                    hits = ix.search(analyze(text), 10)
                    recall[field] += len({h[1] for h in hits} & rel) / len(rel)
                    rec = {"qid": qid, "field": field, "text": text, "hits": [[h[1], f32bits(h[0])] for h in hits]}
                    gz.write((json.dumps(rec, ensure_ascii=False) + "\n").encode("utf-8"))
        print("%s: Recall@10 question %.4f rewrite %.4f -> %s" % (
            an_name, recall["question"] / len(turns), recall["rewrite"] / len(turns), path))


if __name__ == "__main__":
    main()
