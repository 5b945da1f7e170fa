package rlcore

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Registry holds the named advantage estimators, KL estimators and guards a
// run may select. It is built by NewRegistry (empty) or DefaultRegistry (the
// built-ins) and extended with the Register methods; it is not safe for
// registration concurrent with lookups (register first, then share it).
type Registry struct {
	advantage map[string]AdvantageEstimator
	kl        map[string]KLEstimator
	guards    map[string]Guard
	guardSeq  []string // registration order: the order guards run and are named in
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{advantage: map[string]AdvantageEstimator{}, kl: map[string]KLEstimator{}, guards: map[string]Guard{}}
}

// DefaultRegistry returns a fresh registry holding the built-ins: the
// advantage estimators group, batch, none, rloo and greedy; the KL estimators k3
// and low_var_kl; the guards answer_leak, empty, too_long and
// copies_history (in that order). Each is registered through the same
// Register method a caller's own entry uses.
func DefaultRegistry() *Registry {
	r := NewRegistry()
	for _, e := range []struct {
		name string
		est  AdvantageEstimator
	}{
		{EstimatorGroup, AdvantageEstimator{Fn: GroupAdvantages}},
		{EstimatorBatch, AdvantageEstimator{Fn: BatchAdvantages, UsesBatchStd: true}},
		{EstimatorNone, AdvantageEstimator{Fn: CentredAdvantages}},
		{EstimatorRLOO, AdvantageEstimator{Fn: RLOOAdvantages}},
		{EstimatorGreedy, AdvantageEstimator{Fn: GreedyAdvantages, UsesGreedy: true}},
	} {
		must(r.RegisterAdvantageEstimator(e.name, e.est))
	}
	must(r.RegisterKLEstimator(KLK3, K3))
	must(r.RegisterKLEstimator(KLLowVar, LowVarKL))
	for _, g := range []struct {
		name  string
		guard Guard
	}{
		{GuardAnswerLeak, AnswerLeak},
		{GuardEmpty, EmptyRewrite},
		{GuardTooLong, TooLong},
		{GuardCopiesHistory, CopiesHistory},
	} {
		must(r.RegisterGuard(g.name, g.guard))
	}
	return r
}

// must panics on a built-in's registration error: a programming error
// (a duplicate name in the table above), never an input error.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// RegisterAdvantageEstimator adds an advantage estimator under name (the
// value of grpo.advantage.estimator that selects it). A name already taken,
// an empty name or a nil Fn is an error.
func (r *Registry) RegisterAdvantageEstimator(name string, e AdvantageEstimator) error {
	if e.Fn == nil {
		return fmt.Errorf("advantage estimator %q: nil Fn", name)
	}
	return register(r.advantage, "advantage estimator", name, e)
}

// RegisterKLEstimator adds a KL estimator under name (the value of
// grpo.loss.kl_estimator / a grpo_step's loss.kl_estimator).
func (r *Registry) RegisterKLEstimator(name string, e KLEstimator) error {
	if e == nil {
		return fmt.Errorf("KL estimator %q: nil function", name)
	}
	return register(r.kl, "KL estimator", name, e)
}

// RegisterGuard adds a reward-hacking guard under name; guards run, and a
// rollout's guard list names them, in registration order.
func (r *Registry) RegisterGuard(name string, g Guard) error {
	if g == nil {
		return fmt.Errorf("guard %q: nil function", name)
	}
	if err := register(r.guards, "guard", name, g); err != nil {
		return err
	}
	r.guardSeq = append(r.guardSeq, name)
	return nil
}

func register[T any](m map[string]T, what, name string, v T) error {
	if name == "" {
		return fmt.Errorf("%s: empty name", what)
	}
	if _, ok := m[name]; ok {
		return fmt.Errorf("%s %q is already registered", what, name)
	}
	m[name] = v
	return nil
}

// AdvantageEstimator returns the estimator registered under name, or an
// error listing the registered names: `unknown "foo" (known: batch, group,
// none, rloo)`.
func (r *Registry) AdvantageEstimator(name string) (AdvantageEstimator, error) {
	return lookup(r.advantage, name)
}

// KLEstimator returns the KL estimator registered under name, or an error
// listing the registered names.
func (r *Registry) KLEstimator(name string) (KLEstimator, error) {
	return lookup(r.kl, name)
}

// Guard returns the guard registered under name, or an error listing the
// registered names.
func (r *Registry) Guard(name string) (Guard, error) {
	return lookup(r.guards, name)
}

// AdvantageEstimators lists the registered advantage estimators, sorted.
func (r *Registry) AdvantageEstimators() []string { return slices.Sorted(maps.Keys(r.advantage)) }

// KLEstimators lists the registered KL estimators, sorted.
func (r *Registry) KLEstimators() []string { return slices.Sorted(maps.Keys(r.kl)) }

// Guards lists the registered guards in registration order (the order they
// run in).
func (r *Registry) Guards() []string { return slices.Clone(r.guardSeq) }

func lookup[T any](m map[string]T, name string) (T, error) {
	v, ok := m[name]
	if !ok {
		return v, fmt.Errorf("unknown %q (known: %s)", name, strings.Join(slices.Sorted(maps.Keys(m)), ", "))
	}
	return v, nil
}
