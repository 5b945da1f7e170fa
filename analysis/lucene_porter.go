package analysis

// lucenePorter is Lucene's PorterStemmer (org.apache.lucene.analysis.en,
// used by PorterStemFilter): Martin Porter's own "Release 3" C/Java
// implementation of the 1980 algorithm, with its two documented departures
// from the paper (step 2 maps -bli to -ble instead of -abli to -able, and
// adds -logi → -log) and its two bounds fixes. It is not NLTK's variant
// (hser/porter.go), nor Porter2/Snowball. The word is a UTF-16 buffer, as
// in Java: words of at most two units are left alone, and every unit
// other than a, e, i, o, u (and y after a consonant) is a consonant.
type lucenePorter struct {
	b        []uint16
	j, k, k0 int
}

func (s *lucenePorter) cons(i int) bool {
	switch s.b[i] {
	case 'a', 'e', 'i', 'o', 'u':
		return false
	case 'y':
		if i == s.k0 {
			return true
		}
		return !s.cons(i - 1)
	}
	return true
}

// m counts the consonant-vowel sequences between k0 and j.
func (s *lucenePorter) m() int {
	n, i := 0, s.k0
	for {
		if i > s.j {
			return n
		}
		if !s.cons(i) {
			break
		}
		i++
	}
	i++
	for {
		for {
			if i > s.j {
				return n
			}
			if s.cons(i) {
				break
			}
			i++
		}
		i++
		n++
		for {
			if i > s.j {
				return n
			}
			if !s.cons(i) {
				break
			}
			i++
		}
		i++
	}
}

func (s *lucenePorter) vowelInStem() bool {
	for i := s.k0; i <= s.j; i++ {
		if !s.cons(i) {
			return true
		}
	}
	return false
}

func (s *lucenePorter) doublec(j int) bool {
	if j < s.k0+1 || s.b[j] != s.b[j-1] {
		return false
	}
	return s.cons(j)
}

func (s *lucenePorter) cvc(i int) bool {
	if i < s.k0+2 || !s.cons(i) || s.cons(i-1) || !s.cons(i-2) {
		return false
	}
	ch := s.b[i]
	return ch != 'w' && ch != 'x' && ch != 'y'
}

// ends reports whether b[k0..k] ends with suffix, setting j before it.
func (s *lucenePorter) ends(suffix string) bool {
	l := len(suffix)
	o := s.k - l + 1
	if o < s.k0 {
		return false
	}
	for i := 0; i < l; i++ {
		if s.b[o+i] != uint16(suffix[i]) {
			return false
		}
	}
	s.j = s.k - l
	return true
}

// setto replaces b[j+1..k] by repl.
func (s *lucenePorter) setto(repl string) {
	o := s.j + 1
	for len(s.b) < o+len(repl) {
		s.b = append(s.b, 0)
	}
	for i := 0; i < len(repl); i++ {
		s.b[o+i] = uint16(repl[i])
	}
	s.k = s.j + len(repl)
}

func (s *lucenePorter) r(repl string) {
	if s.m() > 0 {
		s.setto(repl)
	}
}

func (s *lucenePorter) step1() {
	if s.b[s.k] == 's' {
		switch {
		case s.ends("sses"):
			s.k -= 2
		case s.ends("ies"):
			s.setto("i")
		case s.b[s.k-1] != 's':
			s.k--
		}
	}
	if s.ends("eed") {
		if s.m() > 0 {
			s.k--
		}
	} else if (s.ends("ed") || s.ends("ing")) && s.vowelInStem() {
		s.k = s.j
		switch {
		case s.ends("at"):
			s.setto("ate")
		case s.ends("bl"):
			s.setto("ble")
		case s.ends("iz"):
			s.setto("ize")
		case s.doublec(s.k):
			ch := s.b[s.k]
			s.k--
			if ch == 'l' || ch == 's' || ch == 'z' {
				s.k++
			}
		case s.m() == 1 && s.cvc(s.k):
			s.setto("e")
		}
	}
}

func (s *lucenePorter) step2() {
	if s.ends("y") && s.vowelInStem() {
		s.b[s.k] = 'i'
	}
}

// step3 maps double suffixes to single ones; each entry is tried in order
// for the letter before the last, the first that ends the word applies.
func (s *lucenePorter) step3() {
	if s.k == s.k0 {
		return
	}
	var rules [][2]string
	switch s.b[s.k-1] {
	case 'a':
		rules = [][2]string{{"ational", "ate"}, {"tional", "tion"}}
	case 'c':
		rules = [][2]string{{"enci", "ence"}, {"anci", "ance"}}
	case 'e':
		rules = [][2]string{{"izer", "ize"}}
	case 'l':
		rules = [][2]string{{"bli", "ble"}, {"alli", "al"}, {"entli", "ent"}, {"eli", "e"}, {"ousli", "ous"}}
	case 'o':
		rules = [][2]string{{"ization", "ize"}, {"ation", "ate"}, {"ator", "ate"}}
	case 's':
		rules = [][2]string{{"alism", "al"}, {"iveness", "ive"}, {"fulness", "ful"}, {"ousness", "ous"}}
	case 't':
		rules = [][2]string{{"aliti", "al"}, {"iviti", "ive"}, {"biliti", "ble"}}
	case 'g':
		rules = [][2]string{{"logi", "log"}}
	}
	s.apply(rules)
}

func (s *lucenePorter) apply(rules [][2]string) {
	for _, rl := range rules {
		if s.ends(rl[0]) {
			s.r(rl[1])
			return
		}
	}
}

func (s *lucenePorter) step4() {
	var rules [][2]string
	switch s.b[s.k] {
	case 'e':
		rules = [][2]string{{"icate", "ic"}, {"ative", ""}, {"alize", "al"}}
	case 'i':
		rules = [][2]string{{"iciti", "ic"}}
	case 'l':
		rules = [][2]string{{"ical", "ic"}, {"ful", ""}}
	case 's':
		rules = [][2]string{{"ness", ""}}
	}
	s.apply(rules)
}

func (s *lucenePorter) step5() {
	if s.k == s.k0 {
		return
	}
	var suffixes []string
	switch s.b[s.k-1] {
	case 'a':
		suffixes = []string{"al"}
	case 'c':
		suffixes = []string{"ance", "ence"}
	case 'e':
		suffixes = []string{"er"}
	case 'i':
		suffixes = []string{"ic"}
	case 'l':
		suffixes = []string{"able", "ible"}
	case 'n':
		suffixes = []string{"ant", "ement", "ment", "ent"}
	case 'o':
		if s.ends("ion") && s.j >= 0 && (s.b[s.j] == 's' || s.b[s.j] == 't') {
			break
		}
		suffixes = []string{"ou"}
	case 's':
		suffixes = []string{"ism"}
	case 't':
		suffixes = []string{"ate", "iti"}
	case 'u':
		suffixes = []string{"ous"}
	case 'v':
		suffixes = []string{"ive"}
	case 'z':
		suffixes = []string{"ize"}
	default:
		return
	}
	if suffixes != nil {
		found := false
		for _, suf := range suffixes {
			if s.ends(suf) {
				found = true
				break
			}
		}
		if !found {
			return
		}
	}
	if s.m() > 1 {
		s.k = s.j
	}
}

func (s *lucenePorter) step6() {
	s.j = s.k
	if s.b[s.k] == 'e' {
		a := s.m()
		if a > 1 || a == 1 && !s.cvc(s.k-1) {
			s.k--
		}
	}
	if s.b[s.k] == 'l' && s.doublec(s.k) && s.m() > 1 {
		s.k--
	}
}

// stem returns the stem of a lowercase word (a new slice).
func (s *lucenePorter) stem(word []uint16) []uint16 {
	s.b = append(s.b[:0], word...)
	s.k, s.k0, s.j = len(word)-1, 0, 0
	if s.k > s.k0+1 {
		s.step1()
		s.step2()
		s.step3()
		s.step4()
		s.step5()
		s.step6()
	}
	return append([]uint16(nil), s.b[:s.k+1]...)
}
