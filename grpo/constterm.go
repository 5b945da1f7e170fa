package grpo

import (
	"fmt"

	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/rollout"
)

// ConstantTerm is a reward term that had the same value on every valid
// rollout of a step or evaluation: it moves every reward by the same amount
// and so cannot rank rewrites, yet the reward still reads as if it counted.
type ConstantTerm struct {
	Term  string  // "rougeL_f1", "em" or "hit", as in metrics.jsonl's terms
	Value float64 // the value every rollout had
}

func (c ConstantTerm) String() string { return fmt.Sprintf("%s≡%g", c.Term, c.Value) }

// constantTerms lists the weighted reward terms (Rouge-L always; EM when
// alpha ≠ 0; Hit when beta ≠ 0) whose value is the same on every valid
// rollout of recs. Rollouts that all retrieve for the same text of the same
// turn say nothing: their terms agree whatever the reward is (an
// evaluation of one turn, where the policy still writes the raw question).
func constantTerms(recs []rollout.Record, c hser.Config) []ConstantTerm {
	terms := []struct {
		name   string
		weight float64
		of     func(rollout.Record) float64
	}{
		{"rougeL_f1", c.RougeLWeight(), func(r rollout.Record) float64 { return r.RougeF1 }},
		{"em", c.Alpha, func(r rollout.Record) float64 { return r.EM }},
		{"hit", c.Beta, func(r rollout.Record) float64 { return r.Hit }},
		{"recall_k", c.Recall.Weight, func(r rollout.Record) float64 { return r.RecallK }},
		{"ndcg_k", c.NDCG.Weight, func(r rollout.Record) float64 { return r.NDCGK }},
		{"rr", c.RR.Weight, func(r rollout.Record) float64 { return r.RR }},
	}
	var valid []rollout.Record
	type query struct {
		prompt, rewrite string
	}
	distinct := map[query]bool{}
	for _, r := range recs {
		if !r.Failed() {
			valid = append(valid, r)
			distinct[query{r.PromptID, r.Rewrite}] = true
		}
	}
	if len(distinct) < 2 {
		return nil
	}
	var out []ConstantTerm
	for _, t := range terms {
		if t.weight == 0 {
			continue
		}
		first, same := t.of(valid[0]), true
		for _, r := range valid[1:] {
			if t.of(r) != first {
				same = false
				break
			}
		}
		if same {
			out = append(out, ConstantTerm{Term: t.name, Value: first})
		}
	}
	return out
}

// likelyCause says why a term is usually constant, and what to change.
func likelyCause(c ConstantTerm) string {
	switch {
	case c.Term == "hit" && c.Value == 1:
		return "with reward.hit: answer, an answer taken from the retrieved text (the extractive responder) always occurs in it; " +
			"reward.hit: gold scores whether retrieval found the reference instead, or set reward.beta: 0"
	case c.Term == "hit":
		return "no answer (with reward.hit: gold, no reference) ever occurs in the retrieved chunks: check the responder's answers and the retrieval"
	case c.Term == "em" && c.Value == 0:
		return "no answer ever equals a reference after normalization (extractive or long answers rarely do): " +
			"the term adds nothing; set reward.alpha: 0, or use a responder that gives short answers"
	case c.Term == "em":
		return "every answer equals its reference: the task is too easy to rank rewrites, or the answer leaks into the retrieved text"
	}
	return "every answer scores the same against its reference: the responder's answer does not depend on the rewrite (check that it reads the retrieved chunks)"
}

// termNames lists the terms for a metrics line (nil when none).
func termNames(cs []ConstantTerm) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Term)
	}
	return out
}

// noteConstantTerms logs a WARN the first time in a session that a term is
// constant over a whole step or evaluation (where: "step 3", "eval at step
// 0"), and records it for status.json. It returns the terms' names for the
// metrics line.
func (l *Loop) noteConstantTerms(where string, recs []rollout.Record) []string {
	cs := constantTerms(recs, l.deps.Reward)
	for _, c := range cs {
		if l.constantWarned[c.Term] {
			continue
		}
		if l.constantWarned == nil {
			l.constantWarned = map[string]bool{}
		}
		l.constantWarned[c.Term] = true
		cause := likelyCause(c)
		l.log.Warn("reward term is constant: it shifts every reward alike and cannot rank rewrites",
			"term", c.Term, "value", c.Value, "over", where+" (every valid rollout)", "likely_cause", cause)
		l.warnings = append(l.warnings, fmt.Sprintf("reward term %s is %g on every rollout (first at %s): %s", c.Term, c.Value, where, cause))
		if err := l.writeStatus(StateRunning, nil); err != nil {
			l.log.Warn("status.json not updated with the warning", "error", err)
		}
	}
	return termNames(cs)
}
