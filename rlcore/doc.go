// Package rlcore is the RL maths of himes, with no file, network or process
// I/O: the advantage estimators, the reward-hacking guards' decisions, the KL
// estimators and the loss configuration's one default table, behind open
// registries in the style of verl's core_algos.py (register a function under
// a name; an unknown name is an error that lists the registry's keys).
//
// A Registry is a value (DefaultRegistry returns a fresh one holding the
// built-ins), never package state: a caller that adds an estimator registers
// it on its own registry and validates its config against that registry.
//
// Shapes: an advantage estimator sees one reward quantity over one group's
// valid rollouts ([]float64, one per rollout, n ≥ 2); ComputeAdvantages sees
// a batch of groups ([][]SampleReward, one group per prompt); a KL estimator
// sees one token's log-ratio d = log π_ref − log π; a guard sees one
// normalized rewrite and its turn. grpo (the training loop), ablate
// (re-scoring logged rollouts), trainer (the loss on the wire),
// trainer/embedded (the objective) and trainer/conformance import it.
package rlcore
