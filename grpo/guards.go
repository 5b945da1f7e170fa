package grpo

import (
	"github.com/himes-rl/himes/internal/words"
	"slices"
	"strings"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/rollout"
)

// guardCounts counts the reward-hacking patterns seen in one group.
type guardCounts struct{ leak, empty, tooLong, copiesHistory int }

// copyCoverage is the share of the history's distinct words a rewrite must
// contain to count as copying the history; short histories (fewer than
// copyMinWords distinct words) are never flagged, since quoting a one-line
// history is legitimate.
const (
	copyCoverage = 0.9
	copyMinWords = 8
)

// guardTurn is what the guards compare a turn's rewrites with, normalized
// once per turn (the loop keeps it across epochs: reference answers can be
// paragraphs, and normalizing them for every group cost more than the
// checks).
type guardTurn struct {
	answers  []string        // every reference answer, normalized
	question string          // normalized
	hist     map[string]bool // the history's distinct words; nil when copies_history is off
}

func newGuardTurn(cfg GuardConfig, turn datasets.Turn) *guardTurn {
	gt := &guardTurn{question: words.Normalize(turn.Question)}
	for _, a := range turn.References() {
		if w := words.Normalize(a); w != "" {
			gt.answers = append(gt.answers, w)
		}
	}
	if cfg.CopiesHistory != "off" {
		gt.hist = historyWords(turn.History)
	}
	return gt
}

// applyGuards detects reward hacking in a group's rollouts and, for guards in
// "penalty" mode, replaces the reward with the configured penalty: the
// record names the guards (Guard) and carries the penalty as its own term
// (GuardPenalty); the Rouge-L, EM and Hit columns keep the answer's real
// scores, so a rescoring sees both. Failed rollouts are left alone: they
// carry no reward to hack.
func applyGuards(cfg GuardConfig, gt *guardTurn, recs []rollout.Record) guardCounts {
	var c guardCounts
	answers, question, histWords := gt.answers, gt.question, gt.hist
	for i := range recs {
		r := &recs[i]
		if r.Failed() {
			continue
		}
		rw := words.Normalize(r.Rewrite)
		hits := []struct {
			name  string
			mode  string
			found bool
			count *int
		}{
			// The reference answer written into the query: retrieval and the
			// responder would be handed the label.
			{"answer_leak", cfg.AnswerLeak, slices.ContainsFunc(answers, func(a string) bool {
				return containsWords(rw, a) && !containsWords(question, a)
			}), &c.leak},
			{"empty", cfg.Empty, rw == "", &c.empty},
			{"too_long", cfg.TooLong, normalizedWordCount(rw) > cfg.MaxRewriteWords, &c.tooLong},
			{"copies_history", cfg.CopiesHistory, copiesHistory(rw, histWords), &c.copiesHistory},
		}
		var caught []string
		for _, h := range hits {
			if !h.found || h.mode == "off" {
				continue
			}
			*h.count++
			if h.mode == "penalty" {
				caught = append(caught, h.name)
			}
		}
		if len(caught) > 0 {
			r.Guard = strings.Join(caught, ",")
			r.GuardPenalty = cfg.Penalty
			r.Reward = cfg.Penalty
		}
	}
	return c
}

// normalizedWordCount is len(strings.Fields(s)) for text in
// words.Normalize's form (words separated by single spaces).
func normalizedWordCount(s string) int {
	if s == "" {
		return 0
	}
	return strings.Count(s, " ") + 1
}

// copiesHistory reports whether the rewrite, normalized (words.Normalize:
// applyGuards has it already), contains copyCoverage of the history's words.
func copiesHistory(rw string, hist map[string]bool) bool {
	if len(hist) < copyMinWords {
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
	return float64(in) >= copyCoverage*float64(len(hist))
}

// containsWords reports whether the words of n occur in h as whole words:
// strings.Contains(" "+h+" ", " "+n+" ") without building either string.
func containsWords(h, n string) bool {
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

// historyWords is the set of distinct words of a dialogue history.
func historyWords(hist []datasets.Message) map[string]bool {
	n := 0
	for _, m := range hist {
		n += len(m.Text)
	}
	set := make(map[string]bool, n/12) // about one distinct word per 12 bytes of dialogue, sparing the rehashing
	for _, m := range hist {
		for w := range strings.SplitSeq(words.Normalize(m.Text), " ") {
			if w != "" {
				set[w] = true
			}
		}
	}
	return set
}

// guardTurn returns the turn's normalized guard inputs, computed once per
// training turn.
func (l *Loop) guardTurn(turn datasets.Turn) *guardTurn {
	if l.guardTurns == nil {
		l.guardTurns = map[string]*guardTurn{}
	}
	gt, ok := l.guardTurns[turn.ID()]
	if !ok {
		gt = newGuardTurn(l.cfg.Guards, turn)
		l.guardTurns[turn.ID()] = gt
	}
	return gt
}
