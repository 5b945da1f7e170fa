package hser

// This file is a Go port of NLTK's PorterStemmer in its default
// NLTK_EXTENSIONS mode (nltk/stem/porter.py, NLTK 3.x), the stemmer Google's
// rouge-score uses. It differs from Porter's 1980 paper where NLTK does: the
// irregular-forms table (skies→sky, dying→die), words of one or two letters
// left alone, ies/ied→ie on four-letter words, "alli" applied before the
// rest of step 2, "bli"→"ble" instead of "abli"→"able", the extra step-2
// rules "fulli"→"ful" and "logi"→"log", step 1c's (*c and not c) Y→I, and
// *o also true for a two-letter vowel-consonant stem.
//
// It works on lowercase ASCII bytes in place and does not allocate once the
// caller's buffer has room for one extra byte. Like NLTK's rule lists, the
// first rule whose suffix matches decides: when its condition fails the word
// is returned unchanged and later rules are not tried.

// porterIrregular is NLTK's pool of irregular forms: word → stem, bypassing
// the algorithm.
var porterIrregular = map[string]string{
	"sky": "sky", "skies": "sky",
	"dying": "die", "lying": "lie", "tying": "tie",
	"news":    "news",
	"innings": "inning", "inning": "inning",
	"outings": "outing", "outing": "outing",
	"cannings": "canning", "canning": "canning",
	"howe":    "howe",
	"proceed": "proceed", "exceed": "exceed", "succeed": "succeed",
}

func isVowel(c byte) bool { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u' }

// isConsonant reports whether w[i] is a consonant in Porter's sense: not
// a, e, i, o, u, and a 'y' only when it starts the word or follows a vowel.
// It walks back over a run of y's iteratively, so "yyyy…" costs O(run).
func isConsonant(w []byte, i int) bool {
	if isVowel(w[i]) {
		return false
	}
	if w[i] != 'y' {
		return true
	}
	// cons(y at i) = !cons(i-1): alternate back to the first non-y letter.
	j := i
	for j > 0 && w[j-1] == 'y' {
		j--
	}
	// w[j..i] are all 'y'.
	var c bool // consonant-ness of w[j]
	if j == 0 {
		c = true // a leading y is a consonant
	} else {
		c = !isVowel(w[j-1]) // w[j-1] is not y: consonant iff not a vowel
		c = !c               // w[j] is a y after w[j-1]
	}
	if (i-j)%2 == 1 {
		c = !c
	}
	return c
}

// measure is Porter's m: the number of vowel→consonant transitions in stem.
func measure(stem []byte) int {
	n := 0
	prevCons := false
	for i, ch := range stem {
		var cons bool
		switch {
		case isVowel(ch):
			cons = false
		case ch == 'y' && i > 0:
			cons = !prevCons
		default:
			cons = true
		}
		if cons && i > 0 && !prevCons {
			n++
		}
		prevCons = cons
	}
	return n
}

func containsVowel(stem []byte) bool {
	for i := range stem {
		if !isConsonant(stem, i) {
			return true
		}
	}
	return false
}

func endsDoubleConsonant(w []byte) bool {
	n := len(w)
	return n >= 2 && w[n-1] == w[n-2] && isConsonant(w, n-1)
}

// endsCVC is Porter's *o (consonant-vowel-consonant, the last not w, x or
// y), extended by NLTK to a two-letter vowel-consonant word.
func endsCVC(w []byte) bool {
	n := len(w)
	if n >= 3 && isConsonant(w, n-3) && !isConsonant(w, n-2) && isConsonant(w, n-1) &&
		w[n-1] != 'w' && w[n-1] != 'x' && w[n-1] != 'y' {
		return true
	}
	return n == 2 && !isConsonant(w, 0) && isConsonant(w, 1)
}

func hasSuffix(w []byte, s string) bool {
	return len(w) >= len(s) && string(w[len(w)-len(s):]) == s
}

// replace swaps the suffix of length n for repl, reusing w's storage.
func replace(w []byte, n int, repl string) []byte {
	return append(w[:len(w)-n], repl...)
}

// cond names a rule condition on the stem (the word minus the suffix).
type cond uint8

const (
	always   cond = iota
	mGT0          // m(stem) > 0
	mGT1          // m(stem) > 1
	mGT1ST        // m(stem) > 1 and the stem ends in s or t (step 4 "ion")
	logiCond      // m(stem + "l") > 0: NLTK keeps the l of "logi" with the stem
)

type rule struct {
	suffix, repl string
	c            cond
}

func (c cond) holds(stem []byte) bool {
	switch c {
	case mGT0:
		return measure(stem) > 0
	case mGT1:
		return measure(stem) > 1
	case mGT1ST:
		return measure(stem) > 1 && (stem[len(stem)-1] == 's' || stem[len(stem)-1] == 't')
	case logiCond:
		return measure(stem[:len(stem)+1]) > 0 // the stem's storage still holds the 'l'
	}
	return true
}

// applyRules applies the first rule whose suffix matches, if its condition
// holds; a matching rule whose condition fails stops the search.
func applyRules(w []byte, rules []rule) []byte {
	for _, r := range rules {
		if hasSuffix(w, r.suffix) {
			stem := w[:len(w)-len(r.suffix)]
			if r.c.holds(stem) {
				return append(stem, r.repl...)
			}
			return w
		}
	}
	return w
}

var step1aRules = []rule{{"sses", "ss", always}, {"ies", "i", always}, {"ss", "ss", always}, {"s", "", always}}

var step2Rules = []rule{
	{"ational", "ate", mGT0}, {"tional", "tion", mGT0}, {"enci", "ence", mGT0},
	{"anci", "ance", mGT0}, {"izer", "ize", mGT0}, {"bli", "ble", mGT0},
	{"alli", "al", mGT0}, {"entli", "ent", mGT0}, {"eli", "e", mGT0},
	{"ousli", "ous", mGT0}, {"ization", "ize", mGT0}, {"ation", "ate", mGT0},
	{"ator", "ate", mGT0}, {"alism", "al", mGT0}, {"iveness", "ive", mGT0},
	{"fulness", "ful", mGT0}, {"ousness", "ous", mGT0}, {"aliti", "al", mGT0},
	{"iviti", "ive", mGT0}, {"biliti", "ble", mGT0},
	{"fulli", "ful", mGT0}, {"logi", "log", logiCond},
}

var step3Rules = []rule{
	{"icate", "ic", mGT0}, {"ative", "", mGT0}, {"alize", "al", mGT0},
	{"iciti", "ic", mGT0}, {"ical", "ic", mGT0}, {"ful", "", mGT0}, {"ness", "", mGT0},
}

var step4Rules = []rule{
	{"al", "", mGT1}, {"ance", "", mGT1}, {"ence", "", mGT1}, {"er", "", mGT1},
	{"ic", "", mGT1}, {"able", "", mGT1}, {"ible", "", mGT1}, {"ant", "", mGT1},
	{"ement", "", mGT1}, {"ment", "", mGT1}, {"ent", "", mGT1}, {"ion", "", mGT1ST},
	{"ou", "", mGT1}, {"ism", "", mGT1}, {"ate", "", mGT1}, {"iti", "", mGT1},
	{"ous", "", mGT1}, {"ive", "", mGT1}, {"ize", "", mGT1},
}

func step1a(w []byte) []byte {
	if len(w) == 4 && hasSuffix(w, "ies") {
		return replace(w, 3, "ie")
	}
	return applyRules(w, step1aRules)
}

func step1b(w []byte) []byte {
	if hasSuffix(w, "ied") {
		if len(w) == 4 {
			return replace(w, 3, "ie")
		}
		return replace(w, 3, "i")
	}
	if hasSuffix(w, "eed") {
		if measure(w[:len(w)-3]) > 0 {
			return w[:len(w)-1]
		}
		return w
	}
	var stem []byte
	switch {
	case hasSuffix(w, "ed") && containsVowel(w[:len(w)-2]):
		stem = w[:len(w)-2]
	case hasSuffix(w, "ing") && containsVowel(w[:len(w)-3]):
		stem = w[:len(w)-3]
	default:
		return w
	}
	switch {
	case hasSuffix(stem, "at"), hasSuffix(stem, "bl"), hasSuffix(stem, "iz"):
		return append(stem, 'e')
	case endsDoubleConsonant(stem):
		if last := stem[len(stem)-1]; last != 'l' && last != 's' && last != 'z' {
			return stem[:len(stem)-1]
		}
		return stem
	case measure(stem) == 1 && endsCVC(stem):
		return append(stem, 'e')
	}
	return stem
}

func step1c(w []byte) []byte {
	if hasSuffix(w, "y") {
		stem := w[:len(w)-1]
		if len(stem) > 1 && isConsonant(stem, len(stem)-1) {
			return append(stem, 'i')
		}
	}
	return w
}

func step2(w []byte) []byte {
	// NLTK applies alli→al first and reruns step 2 on the result.
	if hasSuffix(w, "alli") && measure(w[:len(w)-4]) > 0 {
		return step2(w[:len(w)-2])
	}
	return applyRules(w, step2Rules)
}

func step5a(w []byte) []byte {
	if hasSuffix(w, "e") {
		stem := w[:len(w)-1]
		m := measure(stem)
		if m > 1 || (m == 1 && !endsCVC(stem)) {
			return stem
		}
	}
	return w
}

func step5b(w []byte) []byte {
	if hasSuffix(w, "ll") && measure(w[:len(w)-1]) > 1 {
		return w[:len(w)-1]
	}
	return w
}

// porterStem stems the lowercase ASCII word w in place and returns the stem,
// which shares w's storage (it may append one byte).
func porterStem(w []byte) []byte {
	if s, ok := porterIrregular[string(w)]; ok {
		return append(w[:0], s...)
	}
	if len(w) <= 2 {
		return w
	}
	w = step1a(w)
	w = step1b(w)
	w = step1c(w)
	w = step2(w)
	w = applyRules(w, step3Rules)
	w = applyRules(w, step4Rules)
	w = step5a(w)
	return step5b(w)
}

// PorterStem returns NLTK's PorterStemmer().stem(word) for a lowercase ASCII
// word (the form rouge-score passes it).
func PorterStem(word string) string {
	return string(porterStem([]byte(word)))
}
