package trainer

import (
	"github.com/himes-rl/himes/internal/words"
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// word is one maximal run of letters/digits, lowercased, with whether its
// first letter was upper-case in the source.
type word struct {
	lower string
	upper bool
}

// splitWords splits s into maximal runs of Unicode letters and digits,
// lowercased, remembering each run's capitalization.
func splitWords(s string) []word {
	runs := words.Fields(s)
	out := make([]word, len(runs))
	for i, run := range runs {
		out[i] = mkWord(run)
	}
	return out
}

func mkWord(run string) word {
	r, _ := utf8.DecodeRuneInString(run)
	return word{lower: strings.ToLower(run), upper: unicode.IsUpper(r)}
}

// Tokens returns the lowercased letter/digit runs of s, the tokenization the
// embedded policy uses for candidates and SFT targets.
func Tokens(s string) []string {
	ws := splitWords(s)
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.lower
	}
	return out
}

// Feature indices of φ(term). Bounded magnitudes keep one learning rate
// sensible for all of them.
const (
	featBias        = iota // 1
	featLogTF              // log(1 + occurrences in the history)
	featIDF                // TermStats.IDF(term), 0 without stats
	featRecency            // 1/(1 + messages after the last one containing the term)
	featUser               // occurs in a user message
	featAssistant          // occurs in an assistant message
	featCapitalized        // some occurrence starts with an upper-case letter
	featFirstTurn          // occurs in the first history message
	featLastUser           // occurs in the last user message of the history
	featNumber             // all digits
	featLogLen             // log(length in runes)
	numFeatures
)

// featureNames name φ's components, in order (reported by info).
var featureNames = [numFeatures]string{
	"bias", "log_tf", "idf", "recency", "in_user_turn", "in_assistant_turn",
	"capitalized", "in_first_turn", "in_last_user_turn", "is_number", "log_len",
}

// candidate is one history term with its features.
type candidate struct {
	term  string
	first int // rank of first occurrence in the history, for the rewrite's word order
	phi   [numFeatures]float64
}

// rewriteContext is the structured view of a prompt the policy works on.
type rewriteContext struct {
	history  []Message
	question string
}

// contextOf resolves a prompt to (history, question): Dialogue first, then
// Messages (history = messages before the last user one), then Text.
func contextOf(p Prompt) rewriteContext {
	if p.Dialogue != nil {
		return rewriteContext{history: p.Dialogue.History, question: p.Dialogue.Question}
	}
	if len(p.Messages) > 0 {
		last := -1
		for i, m := range p.Messages {
			if m.Role == "user" {
				last = i
			}
		}
		if last >= 0 {
			var hist []Message
			for _, m := range p.Messages[:last] {
				if m.Role != "system" {
					hist = append(hist, m)
				}
			}
			return rewriteContext{history: hist, question: p.Messages[last].Content}
		}
	}
	return rewriteContext{question: p.Text}
}

// candidates returns the candidate terms of c, ranked (user-turn terms
// first, then by recency, then by first occurrence), capped at limit, and
// whether the cap cut any off.
func candidates(c rewriteContext, stats TermStats, limit int) ([]candidate, bool) {
	inQuestion := map[string]bool{}
	for _, w := range splitWords(c.question) {
		inQuestion[w.lower] = true
	}
	type acc struct {
		tf                                 int
		last                               int
		user, asst, upper, first, lastUser bool
	}
	lastUser := -1
	for i, m := range c.history {
		if m.Role == "user" {
			lastUser = i
		}
	}
	var order []string
	seen := map[string]*acc{}
	for i, m := range c.history {
		for _, w := range splitWords(m.Content) {
			if stopwords[w.lower] || inQuestion[w.lower] {
				continue
			}
			a := seen[w.lower]
			if a == nil {
				a = &acc{}
				seen[w.lower] = a
				order = append(order, w.lower)
			}
			a.tf++
			a.last = i
			a.user = a.user || m.Role == "user"
			a.asst = a.asst || m.Role == "assistant"
			a.upper = a.upper || w.upper
			a.first = a.first || i == 0
			a.lastUser = a.lastUser || i == lastUser
		}
	}
	// Rank so that a cap keeps the likeliest terms: user-turn terms before
	// assistant-only ones (answers are long passages), then the most recent.
	// The ranking does not depend on the cap, so a shorter candidate list is
	// always a prefix of a longer one (max_tokens truncation stays scorable).
	first := make(map[string]int, len(order))
	for k, t := range order {
		first[t] = k
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := seen[order[i]], seen[order[j]]
		if a.user != b.user {
			return a.user
		}
		return a.last > b.last
	})
	truncated := false
	if len(order) > limit {
		order, truncated = order[:limit], true
	}
	out := make([]candidate, len(order))
	for k, t := range order {
		a := seen[t]
		cd := candidate{term: t, first: first[t]}
		cd.phi[featBias] = 1
		cd.phi[featLogTF] = math.Log1p(float64(a.tf))
		if stats != nil {
			cd.phi[featIDF] = stats.IDF(t)
		}
		cd.phi[featRecency] = 1 / float64(1+len(c.history)-1-a.last)
		cd.phi[featUser] = b2f(a.user)
		cd.phi[featAssistant] = b2f(a.asst)
		cd.phi[featCapitalized] = b2f(a.upper)
		cd.phi[featFirstTurn] = b2f(a.first)
		cd.phi[featLastUser] = b2f(a.lastUser)
		cd.phi[featNumber] = b2f(isNumber(t))
		cd.phi[featLogLen] = math.Log(float64(utf8.RuneCountInString(t)))
		out[k] = cd
	}
	return out, truncated
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func isNumber(t string) bool {
	for _, r := range t {
		if !unicode.IsDigit(r) {
			return false
		}
	}
	return t != ""
}

// stopwords are never candidates: function words and dialogue filler.
var stopwords = words.DialogueStopwords()
