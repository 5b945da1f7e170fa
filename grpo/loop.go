package grpo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// Deps are the components one training run wires together. cmd/himes
// builds them from the run config.
type Deps struct {
	Policy   trainer.Policy
	Runner   *rollout.Runner
	Renderer *datasets.Renderer
	// Ranker returns a passage-level ranking for a rewrite, for Recall@10 and
	// MRR in evaluations (nil: retrieval metrics are not reported).
	Ranker func(ctx context.Context, user, rewrite, query string) ([]retrieval.Scored, error)
	Train  []datasets.Turn // GRPO prompt set: turns with a reference answer
	Eval   []datasets.Turn // held-out turns for periodic evaluation
	SFT    []datasets.Turn // turns with a human rewrite, for the SFT phase
	Reward hser.Config     // every term of R and its weight (the advantages weigh the same terms)
	Run    *rundir.RunDir
	Seed   int64
	Logger *slog.Logger
	// Progress is told about every step (a progress bar on a terminal, log
	// lines otherwise). Nil means none.
	Progress Progress
	// Fault, when set, is called at named points of a step ("before_sample",
	// "before_update", "after_update"); crash tests use it to kill the
	// process there and check that --resume continues exactly.
	Fault func(point string, step int)
	// Tracker mirrors every metrics line (and the eval samples) to an
	// experiment tracker such as TensorBoard. Nil means none.
	Tracker Tracker
	// Now is the wall clock of the metrics' time stamps (nil: time.Now).
	Now func() time.Time
}

// Tracker receives the run's metrics as they are written to metrics.jsonl.
type Tracker interface {
	// Begin is called once per session before anything else, with the first
	// step the session writes: a resumed run rewrites the steps its
	// checkpoint does not cover, and the tracker should drop what an earlier
	// session wrote for them.
	Begin(firstStep int) error
	// Scalars records the numbers of one metrics line (see Flatten).
	Scalars(step int, wall time.Time, values []Scalar) error
	// Text records a Markdown text under tag.
	Text(step int, wall time.Time, tag, markdown string) error
	// Flush makes what was recorded durable (called with each checkpoint).
	Flush() error
	Close() error
}

// trackerRepairs is a Tracker whose Begin repairs what an earlier session
// left damaged (a TensorBoard record cut by a full disk or a kill) and says
// what it repaired.
type trackerRepairs interface{ Repaired() []string }

// noteTrackerRepairs reports the tracker's repairs in the log and in
// status.json's warnings (item 5 of issue 33: a cut record stayed, unreported).
func (l *Loop) noteTrackerRepairs(t Tracker) error {
	tr, ok := t.(trackerRepairs)
	if !ok {
		return nil
	}
	reps := tr.Repaired()
	for _, r := range reps {
		l.log.Warn("tensorboard: an earlier session's events file ended in a partial or damaged record: cut back to its whole records (the events of the steps it held are rewritten as the run redoes them)", "repair", r)
		l.warnings = append(l.warnings, "tensorboard events file repaired on resume: "+r)
	}
	if len(reps) == 0 {
		return nil
	}
	return l.writeStatus(StateRunning, nil)
}

// Progress receives the run's progress.
type Progress interface {
	Start(done, total int)
	Step(m StepMetrics)
	Eval(m EvalMetrics)
	Finish()
}

// Loop runs SFT then GRPO steps, and owns the run's state.
type Loop struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	state   State
	metrics *metricsLog
	// deleter deletes pruned trainer checkpoints; nil when the endpoint
	// cannot (asked once, on the first pruned checkpoint).
	deleter       trainer.Deleter
	deleteChecked bool
	// limits are the trainer's request limits (info.limits), checked at start.
	limits trainer.Limits
	// guardTurns caches each training turn's normalized guard inputs
	// (histories and answers are long; turns recur every epoch).
	guardTurns map[string]*rlcore.GuardTurn
	// reg holds the advantage estimators and guards (registry()).
	reg *rlcore.Registry
	// caps are the trainer's capabilities (does it compute entropy?).
	caps trainer.Capabilities
	// loss is grpo.loss resolved (Config.ResolvedLoss); each grpo_step
	// sends it with that step's learning rate.
	loss trainer.ResolvedLoss
	// ledger holds the completed steps not yet in a ledger file (ledger.go).
	ledger *rollout.LedgerChunk
	// sessionStart and elapsedBase give elapsed_s: the training time the
	// checkpoint covered plus this session's.
	sessionStart time.Time
	elapsedBase  float64
	// constantWarned and warnings: constant reward terms, warned once per session (constterm.go).
	constantWarned map[string]bool
	warnings       []string
	// final is the finished run's final checkpoint (bestend.go).
	final *FinalCheckpoint
	// repair: --resume --repair (resume_files.go).
	repair bool
}

// NewLoop checks the dependencies and returns a loop ready to Run.
func NewLoop(cfg Config, deps Deps) (*Loop, error) {
	if deps.Run == nil {
		return nil, errors.New("grpo: no run directory")
	}
	loss, err := checkDeps(cfg, deps)
	if err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Loop{cfg: cfg, deps: deps, log: deps.Logger.With("component", "grpo"), loss: loss}, nil
}

// checkDeps is every check of NewLoop that needs no run directory: Train
// makes them before it opens one, so that a run that cannot start does not
// first clear the run it was told to --overwrite. It returns the resolved
// loss, the one thing of them the loop keeps.
func checkDeps(cfg Config, deps Deps) (trainer.ResolvedLoss, error) {
	switch {
	case deps.Policy == nil:
		return trainer.ResolvedLoss{}, errors.New("grpo: no policy")
	case deps.Runner == nil:
		return trainer.ResolvedLoss{}, errors.New("grpo: no rollout runner")
	case deps.Renderer == nil:
		return trainer.ResolvedLoss{}, errors.New("grpo: no prompt renderer")
	case len(deps.Train) == 0 && cfg.Steps > 0:
		return trainer.ResolvedLoss{}, errors.New("grpo: the training set has no turns with a reference answer")
	}
	if err := checkBestMetric(cfg, deps); err != nil {
		return trainer.ResolvedLoss{}, err
	}
	if err := checkSFTData(cfg, deps.SFT); err != nil {
		return trainer.ResolvedLoss{}, err
	}
	loss, err := cfg.ResolvedLoss()
	if err != nil {
		return trainer.ResolvedLoss{}, fmt.Errorf("grpo.loss: %w", err)
	}
	return loss, nil
}

// maxTrainerReloads bounds the reloads of the last checkpoint after the
// trainer's policy changed under the run, counted since the last step that
// completed: a trainer that keeps restarting stops the run.
const maxTrainerReloads = 3

// Run trains from the start, or from the newest checkpoint when resume is
// set, until cfg.Steps. On cancellation (SIGINT/SIGTERM) it saves a
// checkpoint of the last completed step and returns the context's error.
//
// When the trainer's policy turns out not to be the run's (every call
// carries the expected policy version, and every answer's version is
// compared with it), the run reloads its last checkpoint into the trainer
// and continues from there, exactly as --resume would; without a checkpoint
// it starts over on a fresh policy, or stops.
func (l *Loop) Run(ctx context.Context, resume bool) error {
	if l.cfg.Steps == 0 && !l.sftRuns() {
		// A run that trains nothing still ends "finished" with a "best"
		// checkpoint: say that its policy is the trainer's starting one.
		msg := "nothing is trained: grpo.steps is 0 and there is no SFT phase (grpo.sft.epochs 0), so the run's policy is the trainer's starting policy"
		l.log.Warn(msg)
		l.warnings = append(l.warnings, msg)
	}
	reloads, lastStep := 0, -1
	for {
		err := l.run(ctx, resume)
		if err == nil || ctx.Err() != nil || !isPolicyChanged(err) {
			return err
		}
		if l.state.Step > lastStep {
			reloads, lastStep = 0, l.state.Step
		}
		if reloads++; reloads > maxTrainerReloads {
			return fmt.Errorf("%w (reloaded the last checkpoint %d times without progress; giving up)", err, maxTrainerReloads)
		}
		l.log.Warn("the trainer's policy is not the run's: reloading the last checkpoint", "step", l.state.Step, "error", err)
		resume = true
	}
}

// keepBest checkpoints the run as its best when evaluation m sets a new
// best (between checkpoint_every steps too).
func (l *Loop) keepBest(ctx context.Context, m *EvalMetrics) error {
	if best := l.newBest(m); best != nil {
		return l.saveCheckpoint(ctx, best)
	}
	return nil
}

func (l *Loop) run(ctx context.Context, resume bool) (err error) {
	// A reload restores the checkpoint's elapsed time; the steps redone since
	// count once, from here.
	l.sessionStart = l.deps.Now()
	if err := l.restore(ctx, resume); err != nil {
		return err
	}
	l.elapsedBase = l.state.ElapsedSeconds
	if err := l.writeStatus(StateRunning, nil); err != nil {
		return err
	}
	defer func() {
		if serr := l.writeStatus(endState(err), err); serr != nil && err == nil {
			err = serr
		}
	}()
	// The steps completed since the last ledger file, whatever ends the run.
	defer func() {
		if ferr := l.flushLedger(); ferr != nil && err == nil {
			err = ferr
		}
	}()
	covered := l.state.Step
	if l.state.TrainerCheckpoint == "" {
		covered = -1 // no checkpoint: nothing in an earlier log is covered
	}
	if l.metrics, err = l.openMetricsLog(covered); err != nil {
		return err
	}
	defer l.metrics.Close()
	if t := l.deps.Tracker; t != nil {
		if err := t.Begin(covered + 1); err != nil {
			return fmt.Errorf("tracker: %w", err)
		}
		if err := l.noteTrackerRepairs(t); err != nil {
			return err
		}
		defer func() {
			if cerr := t.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("tracker: %w", cerr)
			}
		}()
	}
	if p := l.deps.Progress; p != nil {
		p.Start(l.state.Step, l.cfg.Steps)
		defer p.Finish()
	}

	sft := l.sftRuns()
	if !l.state.SFTDone {
		if sft {
			// Evaluate the untrained policy first, so SFT's effect is visible
			// (not a best-checkpoint candidate: no checkpoint holds that policy).
			if _, err := l.evaluate(ctx, 0, "init"); err != nil {
				return err
			}
		}
		if err := l.sftPhase(ctx); err != nil {
			return err
		}
		l.state.SFTDone = true
		if err := l.saveCheckpoint(ctx, nil); err != nil {
			return err
		}
	}
	// The evaluation before any GRPO update; later ones happen inside the
	// loop, before the checkpoint of their step.
	if l.state.Step == 0 && !l.state.EvalDone {
		phase := "init"
		if sft {
			phase = "sft"
		}
		m, err := l.evaluate(ctx, 0, phase)
		if err != nil {
			return err
		}
		l.state.EvalDone = true // "init" too, when no SFT follows it
		if err := l.keepBest(ctx, m); err != nil {
			return err
		}
	}
	// An evaluation due at the checkpointed step that did not complete
	// (interrupted, or stopped by failing rollouts) runs before the next step.
	if s := l.state.Step; s > 0 && !l.state.EvalDone && l.evalDue(s) {
		m, err := l.evaluate(ctx, s, "grpo")
		if err != nil {
			return l.stopped(ctx, err)
		}
		if err := l.keepBest(ctx, m); err != nil {
			return err
		}
	}
	for step := l.state.Step + 1; step <= l.cfg.Steps; step++ {
		if ctx.Err() != nil {
			return l.interrupted(ctx)
		}
		m, err := l.Step(ctx, step)
		if err != nil {
			return l.stopped(ctx, fmt.Errorf("step %d: %w", step, err))
		}
		if err := l.writeLine(&m); err != nil {
			return err
		}
		if p := l.deps.Progress; p != nil {
			p.Step(m)
		}
		l.state.EvalDone = false
		last := step == l.cfg.Steps
		var best *BestCheckpoint
		var collapsed bool
		var stop error
		if l.evalDue(step) {
			em, err := l.evaluate(ctx, step, "grpo")
			if err != nil {
				return l.stopped(ctx, err)
			}
			best = l.newBest(em)
			// The collapse detector (collapse.go): warn, stop or roll back.
			if collapsed, stop = l.collapseCheck(ctx, step, em, m.Entropy, best); stop != nil && !collapsed {
				return stop
			}
		}
		if last || best != nil || collapsed || (l.cfg.CheckpointEvery > 0 && step%l.cfg.CheckpointEvery == 0) {
			if err := l.saveCheckpoint(ctx, best); err != nil {
				return err
			}
		}
		if stop != nil {
			return stop
		}
	}
	// grpo.load_best_at_end (bestend.go).
	return l.loadBestAtEnd(ctx)
}

// evalDue reports whether an evaluation follows step.
func (l *Loop) evalDue(step int) bool {
	return step == l.cfg.Steps || (l.cfg.EvalEvery > 0 && step%l.cfg.EvalEvery == 0)
}

// stopped handles an error that ends the run: on cancellation it saves a
// checkpoint (interrupted); when too many rollouts failed it saves one of the
// last completed step, whose work is sound, so that --resume redoes only the
// failed step or evaluation once the responder is back.
func (l *Loop) stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return l.interrupted(ctx)
	}
	if !errors.Is(err, rollout.ErrTooManyFailed) {
		return err
	}
	l.log.Error("stopping: too many failed rollouts", "error", err)
	if info, ierr := l.deps.Policy.Info(ctx); ierr != nil || info.PolicyVersion != l.state.PolicyVersion {
		l.log.Warn("keeping the last checkpoint", "error", ierr)
	} else if cerr := l.checkpoint(ctx, nil); cerr != nil {
		l.log.Warn("checkpoint of the last completed step failed; keeping the last one", "error", cerr)
	}
	if !l.Resumable() {
		return fmt.Errorf("%w (nothing was trained yet: run the same command again once the responder answers)", err)
	}
	return fmt.Errorf("%w (resume with --resume once the responder answers; the last completed step is step %d)", err, l.state.Step)
}

// Step runs one GRPO step, top to bottom: draw prompts, sample G rewrites
// each, roll them out (retrieve → respond → HSER), apply the reward-hacking
// guards, turn rewards into group-normalized advantages (re-sampling
// zero-variance groups if configured), send the policy update, and add the
// step's rollouts to the ledger.
func (l *Loop) Step(ctx context.Context, step int) (StepMetrics, error) {
	start := time.Now()
	var timing stageTimes

	// 1. Draw this step's prompts from the seeded epoch order. The cursor
	// moves only once the step is complete, so an interrupted step is redone.
	l.fault("before_sample", step)
	turns, next := l.drawPrompts()
	prompts, err := l.render(ctx, turns)
	if err != nil {
		return StepMetrics{}, err
	}

	// 2–4. Sample G rewrites per prompt, roll out, guard. Groups whose
	// rewards are all equal teach nothing; DAPO-style dynamic sampling draws
	// them again, a bounded number of times.
	batch, err := l.sampleAndRollOut(ctx, step, 0, turns, prompts, allIndices(len(turns)), &timing)
	if err != nil {
		return StepMetrics{}, err
	}
	resampled := 0
	for round := 1; round <= l.cfg.DynamicSampling.MaxRounds; round++ {
		flat := batch.zeroVarianceGroups(l.cfg.Advantage, RewardWeights(l.deps.Reward))
		if len(flat) == 0 || float64(len(flat)) < l.cfg.DynamicSampling.MinZeroVarFrac*float64(len(turns)) {
			break
		}
		again, err := l.sampleAndRollOut(ctx, step, round, turns, prompts, flat, &timing)
		if err != nil {
			return StepMetrics{}, err
		}
		resampled += batch.replaceWithVaried(l.cfg.Advantage, RewardWeights(l.deps.Reward), again)
	}

	// The greedy rollouts: how the samples fare against greedy
	// (grpo.greedy_probe), and the greedy estimator's baseline.
	var probe [3]*float64
	if l.cfg.GreedyProbe || l.greedyBaseline() {
		if probe[0], probe[1], probe[2], err = l.greedyProbe(ctx, step, batch, &timing); err != nil {
			return StepMetrics{}, err
		}
	}

	// 5. Advantages: group-normalized (or against the greedy rollout),
	// failed rollouts excluded.
	scoreStart := time.Now()
	adv, err := l.registry().ComputeAdvantagesGreedy(l.cfg.Advantage, RewardWeights(l.deps.Reward), batch.sampleRewards(), batch.greedy)
	if err != nil {
		return StepMetrics{}, fmt.Errorf("advantages: %w", err)
	}
	batch.applyAdvantages(adv)
	timing.score += time.Since(scoreStart)

	// 6. The policy update, idempotent through its step_id.
	l.fault("before_update", step)
	updateStart := time.Now()
	upd, err := l.update(ctx, step, batch)
	if err != nil {
		return StepMetrics{}, err
	}
	l.fault("after_update", step)
	timing.update = time.Since(updateStart)
	l.state.Step = step
	l.state.PolicyVersion = upd.resp.PolicyVersion
	l.state.Epoch, l.state.Cursor = next.Epoch, next.Cursor

	// 7. The ledger gets the completed step's rollouts (in memory until its
	// chunk is written: grpo/ledger.go).
	if err := l.appendLedger(step, batch.records()); err != nil {
		return StepMetrics{}, err
	}

	// 8. Metrics.
	m := stepMetrics(step, l.state.Epoch, batch, adv, upd, resampled)
	m.Terms.addRetrieval(batch, l.deps.Reward)
	m.ConstantTerms = l.noteConstantTerms(fmt.Sprintf("step %d", step), batch.records())
	m.FracBeatGreedy, m.FracGreedyBest, m.GreedyReward = probe[0], probe[1], probe[2]
	m.LR = l.learningRate(step)
	timing.total = time.Since(start)
	timing.fill(&m)
	return m, nil
}

func (l *Loop) fault(point string, step int) {
	if l.deps.Fault != nil {
		l.deps.Fault(point, step)
	}
}

// dataCursor is a position in the seeded data order.
type dataCursor struct{ Epoch, Cursor int }

// drawPrompts takes the next PromptsPerStep turns of the epoch's seeded
// order, moving to a freshly shuffled epoch when one runs out, and returns
// the position after them.
func (l *Loop) drawPrompts() ([]datasets.Turn, dataCursor) {
	n := l.cfg.PromptsPerStep
	pos := dataCursor{l.state.Epoch, l.state.Cursor}
	out := make([]datasets.Turn, 0, n)
	for len(out) < n {
		order := epochOrder(len(l.deps.Train), l.deps.Seed, pos.Epoch)
		for pos.Cursor < len(order) && len(out) < n {
			out = append(out, l.deps.Train[order[pos.Cursor]])
			pos.Cursor++
		}
		if pos.Cursor == len(order) {
			pos.Epoch++
			pos.Cursor = 0
		}
	}
	return out, pos
}

// render turns dialogue turns into trainer prompts (text, chat and
// structured forms, so any endpoint can use the one it understands), with
// each turn's memories when data.prompt.memories is on: sampling, updates,
// SFT and evaluation all render through here or the same renderer.
func (l *Loop) render(ctx context.Context, turns []datasets.Turn) ([]trainer.Prompt, error) {
	prompts := make([]trainer.Prompt, len(turns))
	for i, turn := range turns {
		p, err := l.deps.Renderer.RenderContext(ctx, turn)
		if err != nil {
			return nil, fmt.Errorf("render prompt %s: %w", turn.ID(), err)
		}
		prompts[i] = trainer.PromptFromRendered(turn.ID(), p)
	}
	return prompts, nil
}

// sampleAndRollOut samples G rewrites for the selected prompts and rolls
// them out. Round r of a step uses its own sampling seed.
func (l *Loop) sampleAndRollOut(ctx context.Context, step, round int, turns []datasets.Turn,
	prompts []trainer.Prompt, which []int, timing *stageTimes) (*stepBatch, error) {
	sel := make([]trainer.Prompt, len(which))
	for i, j := range which {
		sel[i] = prompts[j]
	}
	sampleStart := time.Now()
	resp, err := l.deps.Policy.Sample(ctx, trainer.SampleRequest{
		Prompts:               sel,
		N:                     l.cfg.GroupSize,
		Temperature:           l.cfg.Temperature,
		TopP:                  l.cfg.TopP,
		MaxTokens:             l.cfg.MaxTokens,
		Seed:                  deriveSeed(l.deps.Seed, int64(step), int64(round)),
		ExpectedPolicyVersion: l.expected(),
	})
	if err != nil {
		return nil, fmt.Errorf("sample: %w", err)
	}
	if want := len(sel) * l.cfg.GroupSize; len(resp.Samples) != want {
		return nil, fmt.Errorf("sample: trainer returned %d samples, want %d", len(resp.Samples), want)
	}
	if err := l.checkSampled(resp); err != nil {
		return nil, err
	}
	timing.sample += time.Since(sampleStart)

	b := &stepBatch{step: step}
	groups := make([]rollout.Group, len(which))
	for i, j := range which {
		g := group{index: j, turn: turns[j], prompt: prompts[j]}
		samples := make([]rollout.Sample, l.cfg.GroupSize)
		for k := range samples {
			s := resp.Samples[i*l.cfg.GroupSize+k]
			g.samples = append(g.samples, s)
			samples[k] = rollout.Sample{Index: k, Rewrite: s.Text, PolicyVersion: s.PolicyVersion}
		}
		groups[i] = rollout.Group{PromptID: prompts[j].ID, Turn: turns[j], Samples: samples}
		b.groups = append(b.groups, g)
	}
	records, stats, err := l.deps.Runner.Run(ctx, step, groups)
	if err != nil {
		return nil, fmt.Errorf("rollouts: %w", err)
	}
	// The runner numbers groups 0..n-1 in its input; keep the step's index.
	for i := range b.groups {
		b.groups[i].records = records[i*l.cfg.GroupSize : (i+1)*l.cfg.GroupSize]
		for k := range b.groups[i].records {
			b.groups[i].records[k].GroupIndex = b.groups[i].index
		}
		b.groups[i].guards = applyGuards(l.registry(), l.cfg.Guards, l.guardTurn(b.groups[i].turn), b.groups[i].records)
	}
	b.stats = addStats(b.stats, stats)
	timing.addRollouts(stats)
	return b, nil
}

// update sends the included samples with their advantages to the trainer.
func (l *Loop) update(ctx context.Context, step int, b *stepBatch) (updateReport, error) {
	var samples []trainer.GRPOSample
	for _, g := range b.groups {
		for k, r := range g.records {
			if !r.Included {
				continue
			}
			s := g.samples[k]
			samples = append(samples, trainer.GRPOSample{
				Prompt: g.prompt, TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs, Advantage: r.Advantage,
			})
		}
	}
	if len(samples) == 0 {
		// Nothing to learn from (all groups dropped): the policy is unchanged.
		l.log.Warn("no samples to update on", "step", step)
		return updateReport{resp: trainer.GRPOResponse{PolicyVersion: l.state.PolicyVersion}}, nil
	}
	loss := l.loss
	loss.LearningRate = l.learningRate(step)
	reset := l.resetDue()
	resp, err := l.deps.Policy.GRPOStep(ctx, trainer.GRPORequest{
		StepID:                l.stepID(fmt.Sprintf("grpo-%06d", step)),
		Samples:               samples,
		ExpectedPolicyVersion: l.expected(),
		Loss:                  trainer.LossConfigOf(loss),
		ResetOptimizer:        reset,
	})
	if err != nil {
		return updateReport{}, fmt.Errorf("policy update: %w", err)
	}
	if resp.PolicyVersion != l.state.PolicyVersion+1 {
		return updateReport{}, policyChanged("policy update", resp.PolicyVersion, l.state.PolicyVersion+1)
	}
	if reset {
		l.state.OptimizerReset = true
		l.log.Info("optimizer reset after SFT", "step", step)
	}
	return updateReport{resp: resp, sent: true, kl: l.loss.KLCoef > 0, entropy: l.caps.Entropy, dual: l.loss.ClipRatioC > 0,
		klMeasured: l.loss.KLCoef == 0 && l.caps.KLMeasured, reset: reset}, nil
}

// checkSampled compares the versions a sample call reports with the run's.
func (l *Loop) checkSampled(resp trainer.SampleResponse) error {
	want := l.state.PolicyVersion
	if resp.PolicyVersion != want {
		return policyChanged("sample", resp.PolicyVersion, want)
	}
	for k, s := range resp.Samples {
		if s.PolicyVersion != want {
			return policyChanged(fmt.Sprintf("sample (samples[%d])", k), s.PolicyVersion, want)
		}
	}
	return nil
}

// checkSFTData refuses an SFT phase with nothing to imitate. Without this
// the epochs ran on no examples and logged a loss of 0 that was never
// computed, and the run went on as if SFT had happened.
func checkSFTData(cfg Config, turns []datasets.Turn) error {
	if cfg.SFT.Epochs == 0 {
		return nil
	}
	for _, t := range turns {
		if t.Rewrite != nil && strings.TrimSpace(*t.Rewrite) != "" {
			return nil
		}
	}
	return fmt.Errorf("grpo.sft.epochs %d: none of the %d SFT turns (data.sft, else the training split of data.train) has a human rewrite to imitate; give rewrites or set grpo.sft.epochs: 0", cfg.SFT.Epochs, len(turns))
}

// sftPhase runs the optional supervised epochs on (prompt, human rewrite).
func (l *Loop) sftPhase(ctx context.Context) error {
	if l.cfg.SFT.Epochs == 0 || len(l.deps.SFT) == 0 {
		return nil
	}
	l.log.Info("sft phase", "epochs", l.cfg.SFT.Epochs, "turns", len(l.deps.SFT))
	var examples []trainer.SFTExample
	for _, turn := range l.deps.SFT {
		if turn.Rewrite == nil || strings.TrimSpace(*turn.Rewrite) == "" {
			continue
		}
		p, err := l.deps.Renderer.RenderContext(ctx, turn)
		if err != nil {
			return fmt.Errorf("render SFT prompt %s: %w", turn.ID(), err)
		}
		examples = append(examples, trainer.SFTExample{Prompt: trainer.PromptFromRendered(turn.ID(), p), Completion: *turn.Rewrite})
	}
	bs := l.cfg.SFT.BatchSize
	for epoch := 0; epoch < l.cfg.SFT.Epochs; epoch++ {
		order := epochOrder(len(examples), l.deps.Seed^0x5f7, epoch)
		var lossSum float64
		var batches int
		for lo := 0; lo < len(order); lo += bs {
			hi := min(lo+bs, len(order))
			batch := make([]trainer.SFTExample, 0, hi-lo)
			for _, i := range order[lo:hi] {
				batch = append(batch, examples[i])
			}
			resp, err := l.deps.Policy.SFTStep(ctx, trainer.SFTRequest{
				StepID:                l.stepID(fmt.Sprintf("sft-%03d-%05d", epoch, lo/bs)),
				Examples:              batch,
				LearningRate:          l.cfg.SFT.LearningRate,
				MaxGradNorm:           l.loss.MaxGradNorm,
				WeightDecay:           l.cfg.Optimizer.WeightDecay,
				ExpectedPolicyVersion: l.expected(),
			})
			if err != nil {
				return fmt.Errorf("SFT epoch %d: %w", epoch+1, err)
			}
			if resp.PolicyVersion != l.state.PolicyVersion+1 {
				return fmt.Errorf("SFT epoch %d: %w", epoch+1, policyChanged("sft_step", resp.PolicyVersion, l.state.PolicyVersion+1))
			}
			lossSum += resp.Loss
			batches++
			l.state.PolicyVersion = resp.PolicyVersion
		}
		mean := lossSum / math.Max(1, float64(batches))
		l.log.Info("sft epoch", "epoch", epoch+1, "of", l.cfg.SFT.Epochs, "examples", len(examples), "loss", mean)
		if err := l.writeLine(&SFTMetrics{Kind: "sft", Step: 0, Epoch: epoch + 1, Examples: len(examples), Loss: mean,
			LR: l.cfg.SFT.LearningRate}); err != nil {
			return err
		}
	}
	return nil
}

// learningRate is the scheduled learning rate of GRPO step.
func (l *Loop) learningRate(step int) float64 {
	// lrScale: lowered by each collapse rollback (collapse.go).
	return l.cfg.Optimizer.LearningRate(l.cfg.LearningRate, step, l.cfg.Steps) * l.lrScale()
}

// checkWeightDecay refuses weight decay with an endpoint that would ignore
// it (one without capabilities.weight_decay): the run would silently train
// without it.
func (l *Loop) checkWeightDecay(info trainer.Info) error {
	if l.cfg.Optimizer.WeightDecay == 0 {
		return nil
	}
	if !info.Capabilities.WeightDecay {
		return fmt.Errorf("grpo.optimizer.weight_decay %v: the trainer endpoint (%s) does not support weight_decay (info.capabilities.weight_decay is false)",
			l.cfg.Optimizer.WeightDecay, info.Implementation)
	}
	return nil
}

// sftRuns reports whether this run has an SFT phase.
func (l *Loop) sftRuns() bool { return l.cfg.SFT.Epochs > 0 && len(l.deps.SFT) > 0 }

// resetDue reports whether the next grpo_step resets the trainer's optimizer:
// the first GRPO update of a run that did SFT (grpo.optimizer.reset).
func (l *Loop) resetDue() bool {
	return l.cfg.Optimizer.Reset && l.sftRuns() && !l.state.OptimizerReset
}

// checkOptimizerReset refuses grpo.optimizer.reset with an endpoint that
// would ignore reset_optimizer, when SFT runs: GRPO would silently start
// from SFT's optimizer state.
func (l *Loop) checkOptimizerReset(info trainer.Info) error {
	if !l.cfg.Optimizer.Reset || !l.sftRuns() || info.Capabilities.OptimizerReset {
		return nil
	}
	return fmt.Errorf("grpo.optimizer.reset is true and the run does SFT, but the trainer endpoint (%s) does not support reset_optimizer "+
		"(info.capabilities.optimizer_reset is false): update the endpoint, or set grpo.optimizer.reset: false to start GRPO from SFT's optimizer state",
		info.Implementation)
}

// stepID names a mutating trainer call. It includes the run's id and how
// many times the run was resumed: a retry within one process repeats the id
// (so the trainer applies it once), while a step replayed after a resume —
// whose earlier update was rolled back by loading the checkpoint — is new.
func (l *Loop) stepID(what string) string {
	return fmt.Sprintf("%s/r%d/%s", l.state.RunID, l.state.Generation, what)
}

func allIndices(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// stamped is a metrics line (its Stamp is promoted from the embedded field).
type stamped interface{ setStamp(Stamp) }

func (s *Stamp) setStamp(v Stamp) { *s = v }

// elapsedAt is the training time at now, over all sessions of the run.
func (l *Loop) elapsedAt(now time.Time) float64 {
	return l.elapsedBase + now.Sub(l.sessionStart).Seconds()
}

// writeLine stamps a metrics line, appends it to metrics.jsonl and mirrors
// its numbers to the tracker.
func (l *Loop) writeLine(line stamped) error {
	now := l.deps.Now()
	line.setStamp(Stamp{Time: now.UTC().Truncate(time.Millisecond), ElapsedSeconds: math.Round(l.elapsedAt(now)*1e3) / 1e3})
	if err := l.metrics.Write(line); err != nil {
		return err
	}
	if l.deps.Tracker == nil {
		return nil
	}
	vals, err := Flatten(line)
	if err != nil {
		return err
	}
	if err := l.deps.Tracker.Scalars(lineStep(line), now, vals); err != nil {
		return fmt.Errorf("tracker: %w", err)
	}
	return nil
}

func lineStep(line stamped) int {
	switch m := line.(type) {
	case *StepMetrics:
		return m.Step
	case *EvalMetrics:
		return m.Step
	case *SFTMetrics:
		// SFT epochs precede GRPO step 1; TensorBoard's x axis for them is the epoch.
		return m.Epoch
	case *CollapseMetrics:
		return m.Step
	}
	return 0
}
