// Package grpo is the training loop: an optional SFT phase, then GRPO steps
// (Loop.Step in loop.go reads top to bottom: draw prompts, sample G
// rewrites, roll out, guard, advantages, ledger, update, metrics), periodic
// evaluations on held-out turns, checkpoints and exact resume. It owns the
// advantage estimators (advantage.go), the reward-hacking guards (guards.go)
// and the step and eval metrics written to metrics.jsonl.
package grpo
