package embedded

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/himes-rl/himes/internal/words"
	"github.com/himes-rl/himes/trainer"
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
	featUserTF             // log(1 + occurrences in user messages)
	featLastAsst           // occurs in the last assistant message of the history
	featInKB               // the knowledge base knows the term (df > 0); 0 without stats
	featNPMIMax            // max NPMI(term, q) over the question's content words q in the KB
	featNPMIMean           // mean of the same
	featQContent           // min(the question's content words, 10)/5: self-contained questions have more
	featQAnaphor           // the question has a pronoun or demonstrative that points back
	featAsstLead           // occurs among the first leadWords words of an assistant message (a passage's title or topic)
	featNPMIGap            // npmi_max_question minus the best npmi_max_question of the prompt's candidates (0 for the best)
	featFromMemory         // occurs only in the dialogue's memories, not in the history
	numFeatures
)

// featureNames name φ's components, in order (reported by info).
var featureNames = [numFeatures]string{
	"bias", "log_tf", "idf", "recency", "in_user_turn", "in_assistant_turn",
	"capitalized", "in_first_turn", "in_last_user_turn", "is_number", "log_len",
	"log_user_tf", "in_last_assistant_turn", "in_kb", "npmi_max_question", "npmi_mean_question",
	"question_content_words", "question_anaphor", "in_assistant_lead", "npmi_gap_to_best",
	"from_memory",
}

// namedWeights maps each feature name to its weight in w.
func namedWeights(w []float64) map[string]float64 {
	m := make(map[string]float64, len(w))
	for k, v := range w {
		m[featureNames[k]] = v
	}
	return m
}

// NamedWeights returns the current weights as "name=weight" pairs in feature
// order, for logs: what the policy has learned, readable.
func (e *Policy) NamedWeights() string {
	w := e.Weights()
	parts := make([]string, len(w))
	for k, v := range w {
		parts[k] = fmt.Sprintf("%s=%+.3f", featureNames[k], v)
	}
	return strings.Join(parts, " ")
}

// leadWords is how many leading words of an assistant message count as its lead.
const leadWords = 12

// TermStats gives knowledge-base statistics for the policy's features.
type TermStats interface {
	IDF(term string) float64
}

// CooccurrenceStats are the knowledge-base counts behind the association
// features; a TermStats that also implements it enables them.
type CooccurrenceStats interface {
	DF(term string) int
	CoDF(a, b string) int
	NumDocs() int
}

// anaphors are the question words that point back into the conversation.
var anaphors = map[string]bool{
	"it": true, "its": true, "they": true, "them": true, "their": true, "theirs": true,
	"this": true, "that": true, "these": true, "those": true, "he": true, "him": true,
	"his": true, "she": true, "her": true, "hers": true, "there": true, "such": true,
	"former": true, "latter": true, "same": true, "one": true, "ones": true,
}

// candidate is one history term with its features.
type candidate struct {
	term  string
	first int // rank of first occurrence in the history, for the rewrite's word order
	phi   [numFeatures]float64
}

// rewriteContext is the structured view of a prompt the policy works on.
type rewriteContext struct {
	history  []trainer.Message
	question string
	memories []trainer.DialogueMemory // activated memories, best first (Dialogue only)
}

// contextOf resolves a prompt to (history, question): Dialogue first, then
// Messages (history = messages before the last user one), then Text.
func contextOf(p trainer.Prompt) rewriteContext {
	if p.Dialogue != nil {
		return rewriteContext{history: p.Dialogue.History, question: p.Dialogue.Question, memories: p.Dialogue.Memories}
	}
	if len(p.Messages) > 0 {
		last := -1
		for i, m := range p.Messages {
			if m.Role == "user" {
				last = i
			}
		}
		if last >= 0 {
			var hist []trainer.Message
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

// npmi is the normalized pointwise mutual information of two terms from
// document counts: log(p(a,b)/(p(a)p(b))) / −log p(a,b), in [−1, 1]; −1 when
// they never co-occur.
func npmi(dfA, dfB, co, n int) float64 {
	if co == 0 || dfA == 0 || dfB == 0 || n == 0 {
		return -1
	}
	N := float64(n)
	pab := float64(co) / N
	if pab >= 1 {
		return 1
	}
	return math.Log(pab/((float64(dfA)/N)*(float64(dfB)/N))) / -math.Log(pab)
}

// candidates returns the candidate terms of c, ranked (user-turn terms
// first, then by recency, then by first occurrence; terms that occur only in
// the memories after the user-turn terms, in memory order), capped at limit,
// and whether the cap cut any off.
func candidates(c rewriteContext, stats TermStats, limit int) ([]candidate, bool) {
	inQuestion := map[string]bool{}
	var qContent []string
	anaphor := false
	for _, w := range splitWords(c.question) {
		anaphor = anaphor || anaphors[w.lower]
		if !inQuestion[w.lower] && !stopwords[w.lower] {
			qContent = append(qContent, w.lower)
		}
		inQuestion[w.lower] = true
	}
	type acc struct {
		tf, userTF                                   int
		last                                         int
		user, asst, upper, first, lastUser, lastAsst bool
		lead                                         bool
		mem                                          bool // only in the memories
	}
	lastUser, lastAsst := -1, -1
	for i, m := range c.history {
		switch m.Role {
		case "user":
			lastUser = i
		case "assistant":
			lastAsst = i
		}
	}
	var order []string
	seen := map[string]*acc{}
	for i, m := range c.history {
		for pos, w := range splitWords(m.Content) {
			// One-letter runs are initials and debris ("u", "s", a mojibake
			// "â"): they never make a query better.
			if stopwords[w.lower] || inQuestion[w.lower] || utf8.RuneCountInString(w.lower) < 2 {
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
			if m.Role == "user" {
				a.userTF++
			}
			a.user = a.user || m.Role == "user"
			a.asst = a.asst || m.Role == "assistant"
			a.upper = a.upper || w.upper
			a.first = a.first || i == 0
			a.lastUser = a.lastUser || i == lastUser
			a.lastAsst = a.lastAsst || i == lastAsst
			a.lead = a.lead || (m.Role == "assistant" && pos < leadWords)
		}
	}
	// Memory terms the history lacks: candidates of their own, marked
	// from_memory; a term the history has keeps its history features.
	for _, m := range c.memories {
		for _, w := range splitWords(m.Text) {
			if stopwords[w.lower] || inQuestion[w.lower] || utf8.RuneCountInString(w.lower) < 2 {
				continue
			}
			a := seen[w.lower]
			if a == nil {
				a = &acc{mem: true}
				seen[w.lower] = a
				order = append(order, w.lower)
			}
			if a.mem {
				a.upper = a.upper || w.upper
			}
		}
	}
	// Rank so that a cap keeps the likeliest terms: user-turn terms before
	// memory-only ones before assistant-only ones (answers are long
	// passages), then the most recent (memory-only terms in memory order).
	// The ranking does not depend on the cap, so a shorter candidate list is
	// always a prefix of a longer one (max_tokens truncation stays scorable).
	first := make(map[string]int, len(order))
	for k, t := range order {
		first[t] = k
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := seen[order[i]], seen[order[j]]
		if ra, rb := rankClass(a.user, a.mem), rankClass(b.user, b.mem); ra != rb {
			return ra < rb
		}
		if a.mem {
			return false // both memory-only: memory order (the sort is stable)
		}
		return a.last > b.last
	})
	co, _ := stats.(CooccurrenceStats)
	var qDF []int
	var nDocs int
	if co != nil {
		nDocs = co.NumDocs()
		qDF = make([]int, len(qContent))
		for k, q := range qContent {
			qDF[k] = co.DF(q)
		}
	}
	qc := min(float64(len(qContent)), 10) / 5
	out := make([]candidate, len(order))
	for k, t := range order {
		a := seen[t]
		cd := candidate{term: t, first: first[t]}
		cd.phi[featBias] = 1
		cd.phi[featLogTF] = math.Log1p(float64(a.tf))
		if stats != nil {
			cd.phi[featIDF] = stats.IDF(t)
		}
		if !a.mem {
			cd.phi[featRecency] = 1 / float64(1+len(c.history)-1-a.last)
		}
		cd.phi[featUser] = b2f(a.user)
		cd.phi[featAssistant] = b2f(a.asst)
		cd.phi[featCapitalized] = b2f(a.upper)
		cd.phi[featFirstTurn] = b2f(a.first)
		cd.phi[featLastUser] = b2f(a.lastUser)
		cd.phi[featNumber] = b2f(isNumber(t))
		cd.phi[featLogLen] = math.Log(float64(utf8.RuneCountInString(t)))
		cd.phi[featUserTF] = math.Log1p(float64(a.userTF))
		cd.phi[featLastAsst] = b2f(a.lastAsst)
		cd.phi[featQContent] = qc
		cd.phi[featQAnaphor] = b2f(anaphor)
		cd.phi[featAsstLead] = b2f(a.lead)
		cd.phi[featFromMemory] = b2f(a.mem)
		if co != nil {
			df := co.DF(t)
			cd.phi[featInKB] = b2f(df > 0)
			var maxN, sum float64
			known := 0
			maxN = -1
			for j, q := range qContent {
				if qDF[j] == 0 {
					continue
				}
				known++
				v := -1.0
				if df > 0 {
					v = npmi(df, qDF[j], co.CoDF(t, q), nDocs)
				}
				maxN = max(maxN, v)
				sum += v
			}
			if known > 0 {
				cd.phi[featNPMIMax] = maxN
				cd.phi[featNPMIMean] = sum / float64(known)
			}
		}
		out[k] = cd
	}
	// The gap is taken over all candidates, before the cap, so that a
	// capped list's features equal the full list's.
	if co != nil && len(out) > 0 {
		best := math.Inf(-1)
		for _, cd := range out {
			best = max(best, cd.phi[featNPMIMax])
		}
		for k := range out {
			out[k].phi[featNPMIGap] = out[k].phi[featNPMIMax] - best
		}
	}
	if len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// weightedBCE is the cross-entropy of keep-logit z against target y ∈ {0, 1}
// with the keep class weighted by pos, and its derivative in z.
func weightedBCE(z, y, pos float64) (loss, dz float64) {
	loss = -(pos*y*logSigmoid(z) + (1-y)*logSigmoid(-z))
	dz = pos*y*(sigmoid(z)-1) + (1-y)*sigmoid(z)
	return loss, dz
}

// rankClass orders candidates: terms of user turns (0), terms only in the
// memories (1), the rest (2, assistant-only).
func rankClass(user, mem bool) int {
	switch {
	case user:
		return 0
	case mem:
		return 1
	}
	return 2
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
