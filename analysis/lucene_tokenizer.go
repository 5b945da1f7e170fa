package analysis

import (
	"slices"
	"unicode"
	"unicode/utf16"
)

// luceneTokens calls fn with each token of Lucene's StandardTokenizer
// (Lucene 9/10, StandardTokenizerImpl.jflex) over text. The grammar's rules
// are reproduced by longest match, the rule listed first winning ties (which
// only decides the token type, unused here):
//
//   - emoji sequences (Extended_Pictographic or Emoji characters other than
//     regional indicators, keycap bases, ©®™〰〽 and modifiers, with
//     presentation selectors, modifier, ZWJ and tag sequences; keycaps;
//     flag pairs) — so ©, ® and ™ alone are tokens, as in Lucene;
//   - words: UAX#29 rules WB5–WB13b as the grammar writes them (letters
//     joined across one MidLetter/MidNumLet/' between letters, digits across
//     one MidNum/MidNumLet/' between digits, letters and digits adjacent,
//     ExtendNumLet (_) anywhere between, Katakana runs, Hebrew ' and ");
//   - runs of South East Asian (Line_Break=Complex_Context) characters;
//   - one Han ideograph, one Hiragana character;
//   - everything else is skipped, one character at a time.
//
// Each matched character takes the Extend/Format/ZWJ characters that follow
// it (WB4). A match never spans more than 255 UTF-16 units (the scanner's
// buffer, StandardAnalyzer.DEFAULT_MAX_TOKEN_LENGTH): a longer word is cut
// there and scanning resumes after the cut.
//
// The character classes are Unicode 9 Word_Break values as far as Go's
// (newer) Unicode tables give them: see wbProps for what is approximated.
func luceneTokens(text string, fn func(tok []rune)) {
	rs := []rune(text)
	s := tokScan{rs: rs, props: make([]uint32, len(rs))}
	for i, r := range rs {
		s.props[i] = wbProps(r)
	}
	for i := 0; i < len(rs); {
		// the scanner's buffer: at most maxTokenUnits UTF-16 units
		lim, units := i, 0
		for lim < len(rs) {
			u := utf16.RuneLen(rs[lim])
			if u < 0 {
				u = 1
			}
			if units+u > maxTokenUnits {
				break
			}
			units += u
			lim++
		}
		s.lim = lim
		end := max(s.emoji(i), s.word(i), s.complexContext(i), s.single(i, pHan), s.single(i, pHiragana))
		if end <= i {
			i++
			continue
		}
		fn(rs[i:end])
		i = end
	}
}

// maxTokenUnits is StandardTokenizer's default maximum token length.
const maxTokenUnits = 255

type tokScan struct {
	rs    []rune
	props []uint32
	lim   int // matches end at or before lim
}

func (s *tokScan) has(i int, p uint32) bool { return i < s.lim && s.props[i]&p != 0 }

// ex skips the Extend/Format/ZWJ characters at i (WB4).
func (s *tokScan) ex(i int) int {
	for s.has(i, pExtend|pFormat|pZWJ) {
		i++
	}
	return i
}

// single matches one character of class p with its extenders (Han, Hiragana).
func (s *tokScan) single(i int, p uint32) int {
	if !s.has(i, p) {
		return i
	}
	return s.ex(i + 1)
}

// complexContext matches a run of Complex_Context characters.
func (s *tokScan) complexContext(i int) int {
	j := i
	for s.has(j, pSA) {
		j = s.ex(j + 1)
	}
	return j
}

// Word-rule states: the class of the last unit taken.
const (
	wStart = iota
	wLeadE // ExtendNumLet before any letter or digit
	wA     // letter (ALetter or Hebrew_Letter)
	wH     // Hebrew letter
	wN     // digit
	wK     // Katakana
	wE     // ExtendNumLet after a letter, digit or Katakana
	wMidA  // letter then one MidLetter/MidNumLet/': needs a letter
	wMidN  // digit then one MidNum/MidNumLet/': needs a digit
	wHSQ   // Hebrew letter then ' (WB7a): a token may end here
	wHDQ   // Hebrew letter then ": needs a Hebrew letter (WB7b, WB7c)
	wStop
)

// word matches the grammar's word rule, returning the end of the longest
// match (i when none). It is a DFA of
//
//	E* Seg (E+ Seg)* E*,  Seg = K (E* K)* | (H (' | " H) | N ((E*|MidNum) N)* | A ((E*|MidLetter) A)*)+
//
// with A = ALetter ∪ Hebrew_Letter, MidNum = MidNum ∪ MidNumLet ∪ ', and
// MidLetter = MidLetter ∪ MidNumLet ∪ '.
func (s *tokScan) word(i int) int {
	state, best := wStart, i
	for j := i; j < s.lim; {
		p := s.props[j]
		next := wStop
		letter := func() int {
			if p&pHebrew != 0 {
				return wH
			}
			return wA
		}
		isLetter := p&(pALetter|pHebrew) != 0
		switch state {
		case wStart, wLeadE, wE:
			switch {
			case p&pENL != 0:
				next = wLeadE
				if state == wE {
					next = wE
				}
			case isLetter:
				next = letter()
			case p&pNumeric != 0:
				next = wN
			case p&pKatakana != 0:
				next = wK
			}
		case wA, wH, wHSQ:
			switch {
			case isLetter:
				next = letter()
			case p&pNumeric != 0:
				next = wN
			case p&pENL != 0:
				next = wE
			case state == wH && p&pSQ != 0:
				next = wHSQ
			case state == wH && p&pDQ != 0:
				next = wHDQ
			case state != wHSQ && p&(pMidLetter|pMidNumLet|pSQ) != 0:
				next = wMidA
			}
		case wN:
			switch {
			case p&pNumeric != 0:
				next = wN
			case isLetter:
				next = letter()
			case p&pENL != 0:
				next = wE
			case p&(pMidNum|pMidNumLet|pSQ) != 0:
				next = wMidN
			}
		case wK:
			switch {
			case p&pKatakana != 0:
				next = wK
			case p&pENL != 0:
				next = wE
			}
		case wMidA:
			if isLetter {
				next = letter()
			}
		case wMidN:
			if p&pNumeric != 0 {
				next = wN
			}
		case wHDQ:
			if p&pHebrew != 0 {
				next = wH
			}
		}
		if next == wStop {
			break
		}
		state = next
		j = s.ex(j + 1)
		switch state {
		case wA, wH, wN, wK, wE, wHSQ:
			best = j
		}
	}
	return best
}

// Emoji matching works on sets of positions (a tiny NFA): each pattern maps
// the positions where it may start to those where it may end.
type posSet []int

func (s *tokScan) norm(ps posSet) posSet {
	slices.Sort(ps)
	return slices.Compact(ps)
}

// char matches one character of class p.
func (s *tokScan) char(ps posSet, p uint32) posSet {
	var out posSet
	for _, i := range ps {
		if s.has(i, p) {
			out = append(out, i+1)
		}
	}
	return out
}

// rune1 matches the character r.
func (s *tokScan) rune1(ps posSet, r rune) posSet {
	var out posSet
	for _, i := range ps {
		if i < s.lim && s.rs[i] == r {
			out = append(out, i+1)
		}
	}
	return out
}

// star matches f zero or more times.
func (s *tokScan) star(ps posSet, f func(posSet) posSet) posSet {
	all, frontier := slices.Clone(ps), ps
	for len(frontier) > 0 {
		var fresh posSet
		for _, e := range f(frontier) {
			if !slices.Contains(all, e) {
				all = append(all, e)
				fresh = append(fresh, e)
			}
		}
		frontier = fresh
	}
	return s.norm(all)
}

// exSansPres is the grammar's ExtFmtZwjSansPresSel: extenders other than
// the presentation selectors U+FE0E and U+FE0F, zero or more.
func (s *tokScan) exSansPres(ps posSet) posSet {
	return s.star(ps, func(q posSet) posSet {
		var out posSet
		for _, i := range q {
			if s.has(i, pExtend|pFormat|pZWJ) && s.rs[i] != 0xFE0E && s.rs[i] != 0xFE0F {
				out = append(out, i+1)
			}
		}
		return out
	})
}

// emojiElem is EmojiCharOrPresSeqOrModSeq:
//
//	ZWJ* EmojiChar Ex FE0F? | (ZWJ* EmojiModifierBase Ex)? EmojiModifier Ex
func (s *tokScan) emojiElem(ps posSet) posSet {
	zwj := s.star(ps, func(q posSet) posSet { return s.char(q, pZWJ) })
	a := s.exSansPres(s.char(zwj, pEmojiChar))
	a = append(a, s.rune1(a, 0xFE0F)...)
	base := s.exSansPres(s.char(zwj, pEModBase))
	b := s.exSansPres(s.char(append(slices.Clone(ps), base...), pEModifier))
	return s.norm(append(a, b...))
}

// emoji matches the grammar's emoji rule and returns the longest end.
func (s *tokScan) emoji(i int) int {
	if !s.has(i, pEmojiChar|pEModBase|pEModifier|pZWJ|pRI|pKeycapBase) {
		return i
	}
	start := posSet{i}
	var ends posSet
	first := s.emojiElem(start)
	if len(first) > 0 {
		// ( ZWJ elem )*
		ends = append(ends, s.star(first, func(q posSet) posSet { return s.emojiElem(s.char(q, pZWJ)) })...)
		// TagSpec+ TagTerm
		tags := s.char(first, pTagSpec)
		if len(tags) > 0 {
			tags = s.star(tags, func(q posSet) posSet { return s.char(q, pTagSpec) })
			ends = append(ends, s.rune1(tags, 0xE007F)...)
		}
	}
	// KeyCapBase Ex FE0F? 20E3 Ex
	kc := s.exSansPres(s.char(start, pKeycapBase))
	kc = append(kc, s.rune1(kc, 0xFE0F)...)
	ends = append(ends, s.exSansPres(s.rune1(kc, 0x20E3))...)
	// RI Ex RI Ex
	ri := s.char(start, pRI)
	for _, e := range ri {
		if e2 := s.ex(e); s.has(e2, pRI) {
			ends = append(ends, s.ex(e2+1))
		}
	}
	best := i
	for _, e := range ends {
		best = max(best, e)
	}
	return best
}

// Word_Break and related properties of a character (bits).
const (
	pALetter uint32 = 1 << iota
	pHebrew
	pNumeric
	pKatakana
	pMidLetter
	pMidNumLet
	pMidNum
	pSQ
	pDQ
	pENL
	pRI
	pExtend
	pFormat
	pZWJ
	pHan
	pHiragana
	pSA
	pEmojiChar // Extended_Pictographic ∪ (Emoji ∖ RI, keycap bases, ©®™〰〽, modifiers)
	pEModBase
	pEModifier
	pKeycapBase
	pTagSpec
)

var asciiProps = func() (t [128]uint32) {
	for r := rune(0); r < 128; r++ {
		t[r] = wbPropsSlow(r)
	}
	return t
}()

func wbProps(r rune) uint32 {
	if r < 128 {
		return asciiProps[r]
	}
	return wbPropsSlow(r)
}

// complexScripts have Line_Break=Complex_Context letters and marks.
var complexScripts = []*unicode.RangeTable{unicode.Thai, unicode.Lao, unicode.Myanmar, unicode.Khmer,
	unicode.Tai_Le, unicode.New_Tai_Lue, unicode.Tai_Tham, unicode.Tai_Viet}

// wbPropsSlow classifies r. Word_Break values are those of UAX#29 for
// Unicode 9 (the grammar's %unicode 9) where they are explicit lists
// (MidLetter, MidNumLet, MidNum, ExtendNumLet, quotes, Regional_Indicator,
// Katakana's extras) and derived from Go's Unicode tables otherwise:
// Extend = Mn ∪ Me ∪ Mc ∪ Other_Grapheme_Extend; Format = Cf except
// U+200B–U+200D; ALetter = letters, Nl and a few modifier symbols, minus
// Han, Hiragana, Katakana, Complex_Context (Thai, Lao, Myanmar, Khmer, Tai
// scripts) and Hebrew letters; Numeric = Nd ∪ U+066B. Characters assigned
// after Unicode 9 are therefore classified too, where Lucene's scanner
// treats them as unassigned. The emoji properties are those of Lucene's
// UnicodeEmojiProperties.jflex (Unicode 14 emoji data).
func wbPropsSlow(r rune) uint32 {
	var p uint32
	switch r {
	case 0x27:
		return pSQ
	case 0x22:
		return pDQ
	case 0x3A, 0xB7, 0x387, 0x5F4, 0x2027, 0xFE13, 0xFE55, 0xFF1A:
		return pMidLetter
	case 0x2E, 0x2018, 0x2019, 0x2024, 0xFE52, 0xFF07, 0xFF0E:
		return pMidNumLet
	case 0x2C, 0x3B, 0x37E, 0x589, 0x60C, 0x60D, 0x66C, 0x7F8, 0x2044, 0xFE10, 0xFE14, 0xFE50, 0xFE54, 0xFF0C, 0xFF1B:
		return pMidNum
	case 0x5F, 0x202F, 0x203F, 0x2040, 0x2054, 0xFE33, 0xFE34, 0xFE4D, 0xFE4E, 0xFE4F, 0xFF3F:
		return pENL
	case 0x200D:
		return pZWJ
	case 0x066B:
		return pNumeric
	case 0x23, 0x2A:
		return pKeycapBase
	}
	if r >= 0x30 && r <= 0x39 {
		return pNumeric | pKeycapBase
	}
	if r >= 0x1F1E6 && r <= 0x1F1FF {
		return pRI
	}
	if r >= 0xE0020 && r <= 0xE007E {
		p |= pTagSpec
	}
	if inRanges(emojiModBase, r) {
		p |= pEModBase
	}
	if r >= 0x1F3FB && r <= 0x1F3FF {
		return p | pEModifier
	}
	switch r {
	case 0xA9, 0xAE, 0x2122, 0x3030, 0x303D:
		// "accidental emoji": Extended_Pictographic, so still emoji characters
		p |= pEmojiChar
	default:
		if inRanges(extPict, r) || inRanges(emojiProp, r) {
			p |= pEmojiChar
		}
	}
	switch {
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc, unicode.Other_Grapheme_Extend):
		p |= pExtend
		if unicode.In(r, complexScripts...) {
			p |= pSA
		}
		return p
	case unicode.Is(unicode.Cf, r):
		if r != 0x200B && r != 0x200C {
			return p | pFormat
		}
		if r == 0x200C {
			return p | pExtend // ZWNJ is Grapheme_Extend
		}
		return p
	case unicode.Is(unicode.Nd, r):
		return p | pNumeric
	case unicode.Is(unicode.Han, r):
		return p | pHan
	case unicode.Is(unicode.Hiragana, r):
		return p | pHiragana
	case unicode.Is(unicode.Katakana, r) || r == 0x3031 || r == 0x3032 || r == 0x3033 || r == 0x3034 ||
		r == 0x3035 || r == 0x309B || r == 0x309C || r == 0x30A0 || r == 0x30FC || r == 0xFF70:
		return p | pKatakana
	case unicode.In(r, complexScripts...) && unicode.IsLetter(r):
		return p | pSA
	case unicode.Is(unicode.Hebrew, r) && unicode.Is(unicode.Lo, r):
		return p | pHebrew
	case unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		(r >= 0x2C2 && r <= 0x2C5) || (r >= 0x2D2 && r <= 0x2D7) || r == 0x2DE || r == 0x2DF ||
		(r >= 0x2E5 && r <= 0x2EB) || r == 0x2ED || (r >= 0x2EF && r <= 0x2FF) || r == 0x5F3 ||
		(r >= 0x55A && r <= 0x55C) || r == 0x55E || r == 0x58A || (r >= 0xA708 && r <= 0xA716) ||
		r == 0xA720 || r == 0xA721 || r == 0xA789 || r == 0xA78A || r == 0xAB5B:
		return p | pALetter
	}
	return p
}

func inRanges(rs [][2]rune, r rune) bool {
	i, found := slices.BinarySearchFunc(rs, r, func(e [2]rune, r rune) int {
		switch {
		case e[1] < r:
			return -1
		case e[0] > r:
			return 1
		}
		return 0
	})
	_ = i
	return found
}
