package grpo

import (
	"strings"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/internal/words"
	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/rollout"
)

// guardCounts counts the reward-hacking patterns seen in one group.
type guardCounts struct{ leak, empty, tooLong, copiesHistory int }

// add counts one detection by the guard named name; a guard registered
// beyond the built-ins has no step metric of its own.
func (c *guardCounts) add(name string) {
	switch name {
	case rlcore.GuardAnswerLeak:
		c.leak++
	case rlcore.GuardEmpty:
		c.empty++
	case rlcore.GuardTooLong:
		c.tooLong++
	case rlcore.GuardCopiesHistory:
		c.copiesHistory++
	}
}

// newGuardTurn is a turn's guard inputs (rlcore.NewGuardTurn), its history
// only when copies_history reads it.
func newGuardTurn(cfg GuardConfig, turn datasets.Turn) *rlcore.GuardTurn {
	var hist []string
	if cfg.CopiesHistory != "off" {
		hist = make([]string, len(turn.History))
		for i, m := range turn.History {
			hist[i] = m.Text
		}
	}
	return rlcore.NewGuardTurn(turn.Question, turn.References(), hist, cfg.CopiesHistory != "off")
}

// applyGuards detects reward hacking in a group's rollouts with the guards
// of reg (rlcore.Registry.RunGuards) and, for guards in "penalty" mode,
// replaces the reward with the configured penalty: the record names the
// guards (Guard) and carries the penalty as its own term (GuardPenalty);
// the Rouge-L, EM and Hit columns keep the answer's real scores, so a
// rescoring sees both. Failed rollouts are left alone: they carry no reward
// to hack.
func applyGuards(reg *rlcore.Registry, cfg GuardConfig, gt *rlcore.GuardTurn, recs []rollout.Record) guardCounts {
	var c guardCounts
	for i := range recs {
		r := &recs[i]
		if r.Failed() {
			continue
		}
		in := rlcore.GuardInput{Rewrite: words.Normalize(r.Rewrite), Turn: gt, MaxRewriteWords: cfg.MaxRewriteWords}
		if caught := reg.RunGuards(cfg.mode, in, c.add); len(caught) > 0 {
			r.Guard = strings.Join(caught, ",")
			r.GuardPenalty = cfg.Penalty
			r.Reward = cfg.Penalty
		}
	}
	return c
}

// guardTurn returns the turn's normalized guard inputs, computed once per
// training turn.
func (l *Loop) guardTurn(turn datasets.Turn) *rlcore.GuardTurn {
	if l.guardTurns == nil {
		l.guardTurns = map[string]*rlcore.GuardTurn{}
	}
	gt, ok := l.guardTurns[turn.ID()]
	if !ok {
		gt = newGuardTurn(l.cfg.Guards, turn)
		l.guardTurns[turn.ID()] = gt
	}
	return gt
}

// registry is the loop's rlcore registry: the built-ins unless a caller set
// its own.
func (l *Loop) registry() *rlcore.Registry {
	if l.reg == nil {
		l.reg = rlcore.DefaultRegistry()
	}
	return l.reg
}
