package rlcore

import (
	"slices"
	"strings"

	"github.com/himes-rl/himes/internal/words"
)

// The built-in reward-hacking guards, the keys of grpo.guards, in the order
// they run.
const (
	// GuardAnswerLeak: the rewrite contains a reference answer the question
	// does not — retrieval and the responder would be handed the label.
	GuardAnswerLeak = "answer_leak"
	// GuardEmpty: the rewrite has no words.
	GuardEmpty = "empty"
	// GuardTooLong: the rewrite has more than GuardInput.MaxRewriteWords words.
	GuardTooLong = "too_long"
	// GuardCopiesHistory: the rewrite holds ≥ CopyCoverage of the distinct
	// words of a history of ≥ CopyMinWords distinct words.
	GuardCopiesHistory = "copies_history"
)

// CopyCoverage is the share of the history's distinct words a rewrite must
// contain to count as copying the history; short histories (fewer than
// CopyMinWords distinct words) are never flagged, since quoting a one-line
// history is legitimate.
const (
	CopyCoverage = 0.9
	CopyMinWords = 8
)

// GuardTurn is what the guards compare a turn's rewrites with, normalized
// once per turn (a caller keeps it across epochs: reference answers can be
// paragraphs, and normalizing them for every group cost more than the
// checks).
type GuardTurn struct {
	Answers  []string        // every non-empty reference answer, words.Normalize'd
	Question string          // words.Normalize'd
	History  map[string]bool // the history's distinct words; nil when no guard reads it
}

// NewGuardTurn normalizes a turn's question and reference answers, and,
// with withHistory, collects the distinct words of its history (one text per
// message).
func NewGuardTurn(question string, answers, history []string, withHistory bool) *GuardTurn {
	gt := &GuardTurn{Question: words.Normalize(question)}
	for _, a := range answers {
		if w := words.Normalize(a); w != "" {
			gt.Answers = append(gt.Answers, w)
		}
	}
	if withHistory {
		gt.History = HistoryWords(history)
	}
	return gt
}

// GuardInput is one rollout as a guard sees it.
type GuardInput struct {
	Rewrite         string // the rewrite, words.Normalize'd
	Turn            *GuardTurn
	MaxRewriteWords int // the too_long limit
}

// Guard reports whether a rewrite shows one reward-hacking pattern
// (Registry.RegisterGuard). It decides only; the caller counts it, and in
// penalty mode replaces the reward.
type Guard func(GuardInput) bool

// AnswerLeak (GuardAnswerLeak).
func AnswerLeak(in GuardInput) bool {
	return slices.ContainsFunc(in.Turn.Answers, func(a string) bool {
		return ContainsWords(in.Rewrite, a) && !ContainsWords(in.Turn.Question, a)
	})
}

// EmptyRewrite (GuardEmpty).
func EmptyRewrite(in GuardInput) bool { return in.Rewrite == "" }

// TooLong (GuardTooLong).
func TooLong(in GuardInput) bool { return NormalizedWordCount(in.Rewrite) > in.MaxRewriteWords }

// CopiesHistory (GuardCopiesHistory): false when the turn's History is nil.
func CopiesHistory(in GuardInput) bool { return copiesHistory(in.Rewrite, in.Turn.History) }

// NormalizedWordCount is len(strings.Fields(s)) for text in
// words.Normalize's form (words separated by single spaces).
func NormalizedWordCount(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, " ") + 1
}

// copiesHistory reports whether the rewrite, normalized, contains
// CopyCoverage of the history's words.
func copiesHistory(rw string, hist map[string]bool) bool {
	if len(hist) < CopyMinWords {
		return false
	}
	// The rewrite's distinct words, without building a set: rewrites are a
	// few words, so duplicates are found by scanning the earlier ones.
	var seen [32]string
	words := seen[:0]
	var set map[string]bool // for long rewrites
	in := 0
	for w := range strings.SplitSeq(rw, " ") {
		if w == "" {
			continue
		}
		if set == nil && len(words) == len(seen) {
			set = make(map[string]bool, 2*len(words))
			for _, x := range words {
				set[x] = true
			}
		}
		if set != nil {
			if set[w] {
				continue
			}
			set[w] = true
		} else {
			if slices.Contains(words, w) {
				continue
			}
			words = append(words, w)
		}
		if hist[w] {
			in++
		}
	}
	return float64(in) >= CopyCoverage*float64(len(hist))
}

// ContainsWords reports whether the words of n occur in h as whole words:
// strings.Contains(" "+h+" ", " "+n+" ") without building either string.
func ContainsWords(h, n string) bool {
	if n == "" {
		return strings.Contains(" "+h+" ", "  ")
	}
	for off := 0; ; {
		i := strings.Index(h[off:], n)
		if i < 0 {
			return false
		}
		i += off
		if (i == 0 || h[i-1] == ' ') && (i+len(n) == len(h) || h[i+len(n)] == ' ') {
			return true
		}
		off = i + 1
	}
}

// HistoryWords is the set of distinct normalized words of a dialogue
// history (one text per message).
func HistoryWords(hist []string) map[string]bool {
	n := 0
	for _, m := range hist {
		n += len(m)
	}
	set := make(map[string]bool, n/12) // about one distinct word per 12 bytes of dialogue, sparing the rehashing
	for _, m := range hist {
		for w := range strings.SplitSeq(words.Normalize(m), " ") {
			if w != "" {
				set[w] = true
			}
		}
	}
	return set
}

// RunGuards runs, in registration order, every guard of r whose mode
// (mode(name): "off", "flag" or "penalty") is not off on in; found is called
// with each guard that found its pattern, and the names of those in penalty
// mode are returned (nil when none is).
func (r *Registry) RunGuards(mode func(name string) string, in GuardInput, found func(name string)) []string {
	var penalized []string
	for _, name := range r.guardSeq {
		m := mode(name)
		if m == "off" || !r.guards[name](in) {
			continue
		}
		found(name)
		if m == "penalty" {
			penalized = append(penalized, name)
		}
	}
	return penalized
}
