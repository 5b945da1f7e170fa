// Package conformance tests a trainer endpoint against trainer/PROTOCOL.md:
// one PASS/FAIL line per property (`himes trainer check`). It speaks only
// the protocol (trainer.Policy), so it checks the embedded policy in process,
// a Client of a remote endpoint, or any other implementation alike.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/trainer"
)

// Options tune the conformance check. Zero values take the defaults.
type Options struct {
	// LearningRate of the check's updates (default 1e-3: large enough to move
	// a LoRA adapter measurably in one Adam step, small enough not to break it).
	LearningRate float64
	// Seed of the check's sample calls (default 1).
	Seed int64
	// N samples per prompt (default 4).
	N int
	// MaxTokens per sample (default 48).
	MaxTokens int
	// LossType of the check's grpo steps (default grpo, or the first type the endpoint lists).
	LossType string
}

// Check runs every conformance property of the protocol against p and writes
// one PASS/FAIL line per property to w (SKIP for an optional feature the
// endpoint does not advertise, which is not a failure). ok is false if any
// property failed; err is only for failures to write the report or a
// cancelled ctx.
//
// The check updates the policy. It saves a checkpoint first and loads it
// again at the end, so the endpoint is left as it was found. Its checkpoints
// (named himes-check-RUN-*) are deleted at the end when the endpoint supports
// delete (p implements Deleter and info.capabilities.delete); otherwise the
// endpoint's checkpoint directory keeps them.
func Check(ctx context.Context, p trainer.Policy, w io.Writer) (bool, error) {
	return CheckWith(ctx, p, w, Options{})
}

// CheckWith is Check with options.
func CheckWith(ctx context.Context, p trainer.Policy, w io.Writer, opts Options) (bool, error) {
	if opts.LearningRate == 0 {
		opts.LearningRate = 1e-3
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.N == 0 {
		opts.N = 4
	}
	if opts.MaxTokens == 0 {
		opts.MaxTokens = 48
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	c := &checker{p: p, w: w, opts: opts, ok: true, run: "himes-check-" + hex.EncodeToString(b[:])}
	c.sc, _ = p.(trainer.Scorer)
	return c.runAll(ctx)
}

type checker struct {
	p        trainer.Policy
	sc       trainer.Scorer
	del      trainer.Deleter // nil unless the endpoint advertises delete
	w        io.Writer
	opts     Options
	run      string
	ok       bool
	werr     error
	passed   int
	total    int
	skipped  int
	nextStep int
	startCk  bool     // a starting checkpoint exists
	created  []string // checkpoints this run saved, for the cleanup
}

func (c *checker) stepID(what string) string {
	c.nextStep++
	return fmt.Sprintf("%s-%d-%s", c.run, c.nextStep, what)
}

// skip reports an optional property the endpoint does not support; it counts
// neither as passed nor as failed.
func (c *checker) skip(name, reason string) {
	c.skipped++
	if _, werr := fmt.Fprintf(c.w, "SKIP  %s: %s\n", name, reason); werr != nil && c.werr == nil {
		c.werr = werr
	}
}

// save saves the current policy under name and remembers it for the cleanup.
func (c *checker) save(ctx context.Context, what, name string) (trainer.SaveResponse, error) {
	return c.saveReq(ctx, trainer.SaveRequest{StepID: c.stepID(what), Name: name})
}

func (c *checker) saveReq(ctx context.Context, req trainer.SaveRequest) (trainer.SaveResponse, error) {
	r, err := c.p.Save(ctx, req)
	if !slices.Contains(c.created, req.Name) {
		// Also after an error: a save refused late may have written something.
		c.created = append(c.created, req.Name)
	}
	return r, err
}

func (c *checker) report(name string, err error, detail string) {
	c.total++
	line := fmt.Sprintf("PASS  %s: %s\n", name, detail)
	if err != nil {
		c.ok = false
		line = fmt.Sprintf("FAIL  %s: %v\n", name, err)
	} else {
		c.passed++
	}
	if _, werr := io.WriteString(c.w, line); werr != nil && c.werr == nil {
		c.werr = werr
	}
}

// checkPrompts are two short dialogues in every form a prompt can take.
func checkPrompts() []trainer.Prompt {
	dialogues := []trainer.Dialogue{
		{History: []trainer.Message{
			{Role: "user", Content: "Tell me about the Bronze Age collapse in the Mediterranean."},
			{Role: "assistant", Content: "Around 1177 BC many Late Bronze Age societies, such as the Hittites and Mycenaean Greece, declined."},
		}, Question: "What caused it?"},
		{History: []trainer.Message{
			{Role: "user", Content: "How is espresso brewed?"},
			{Role: "assistant", Content: "Espresso forces hot water through finely ground coffee at high pressure."},
			{Role: "user", Content: "And cold brew?"},
			{Role: "assistant", Content: "Cold brew steeps coarse grounds in cold water for twelve hours."},
		}, Question: "Which one has more caffeine?"},
	}
	const instr = "Rewrite the user's last question so that it can be understood without the conversation. Answer with the rewrite only."
	out := make([]trainer.Prompt, len(dialogues))
	for i, d := range dialogues {
		var sb strings.Builder
		msgs := []trainer.Message{{Role: "system", Content: instr}}
		sb.WriteString(instr + "\n\n")
		for _, m := range d.History {
			fmt.Fprintf(&sb, "%s: %s\n", m.Role, m.Content)
			msgs = append(msgs, m)
		}
		fmt.Fprintf(&sb, "user: %s\nRewrite:", d.Question)
		msgs = append(msgs, trainer.Message{Role: "user", Content: d.Question})
		dd := d
		out[i] = trainer.Prompt{ID: fmt.Sprintf("check-%d", i), Text: sb.String(), Messages: msgs, Dialogue: &dd}
	}
	return out
}

// checkCompletions are human-style rewrites of checkPrompts, the SFT targets.
func checkCompletions() []string {
	return []string{
		"What caused the Late Bronze Age collapse in the Mediterranean?",
		"Which has more caffeine, espresso or cold brew coffee?",
	}
}

func (c *checker) runAll(ctx context.Context) (bool, error) {
	names := []string{"info", "sample_shape", "sample_deterministic", "grpo_positive_raises_logprob",
		"grpo_negative_lowers_logprob", "clip_low_zero", "sft_lowers_loss", "step_id_replay", "save_load_restores", "checkpoints_list",
		"learning_rate_scales_update", "optimizer_reset", "weight_decay", "delete", "version_precondition", "checkpoint_run_id", "limits"}
	info, err := c.p.Info(ctx)
	if err == nil {
		err = checkInfo(info)
	}
	if err != nil {
		c.report("info", err, "")
		for _, n := range names[1:] {
			c.report(n, fmt.Errorf("skipped: info failed"), "")
		}
		return c.finish(ctx)
	}
	if c.opts.LossType == "" {
		c.opts.LossType = info.LossTypes[0]
		if slices.Contains(info.LossTypes, trainer.LossGRPO) {
			c.opts.LossType = trainer.LossGRPO
		}
	}
	c.report("info", nil, fmt.Sprintf("%s serving %s, policy_version %d, loss types %v, tokens: %s",
		info.Implementation, info.BaseModel, info.PolicyVersion, info.LossTypes, info.TokenKind))
	if d, ok := c.p.(trainer.Deleter); ok && info.Capabilities.Delete {
		c.del = d
	}

	// Keep the starting policy so every update property starts from it and
	// the endpoint is left as found.
	if _, err := c.save(ctx, "save-start", c.run+"-start"); err == nil {
		c.startCk = true
	} else {
		fmt.Fprintf(c.w, "NOTE  could not save the starting policy (%v); update properties run one after another\n", err)
	}

	sample := c.checkSamples(ctx)
	c.checkDirection(ctx, "grpo_positive_raises_logprob", sample, +1)
	c.checkDirection(ctx, "grpo_negative_lowers_logprob", sample, -1)
	c.checkClipLowZero(ctx, sample)
	c.checkSFT(ctx)
	c.checkReplay(ctx, sample)
	c.checkSaveLoad(ctx, sample)
	c.checkLearningRate(ctx, sample)
	c.checkOptimizerReset(ctx, sample, info.Capabilities.OptimizerReset)
	c.checkWeightDecay(ctx, sample, info.Capabilities.WeightDecay)
	c.checkDelete(ctx, info.Capabilities.Delete)
	c.checkVersionPrecondition(ctx, sample)
	c.checkRunID(ctx, sample)
	c.checkLimits(ctx)
	return c.finish(ctx)
}

func (c *checker) finish(ctx context.Context) (bool, error) {
	if c.startCk {
		if _, err := c.p.Load(ctx, trainer.LoadRequest{StepID: c.stepID("restore"), Name: c.run + "-start"}); err != nil {
			fmt.Fprintf(c.w, "NOTE  could not restore the starting policy: %v\n", err)
		} else {
			fmt.Fprintf(c.w, "NOTE  restored the starting policy (checkpoint %s-start)\n", c.run)
			c.cleanup(ctx)
		}
	} else {
		c.cleanup(ctx)
	}
	skipped := ""
	if c.skipped > 0 {
		skipped = fmt.Sprintf(" (%d skipped)", c.skipped)
	}
	fmt.Fprintf(c.w, "%d/%d properties passed%s\n", c.passed, c.total, skipped)
	if c.werr != nil {
		return false, fmt.Errorf("write check report: %w", c.werr)
	}
	return c.ok, ctx.Err()
}

// cleanup deletes the checkpoints the check saved, when the endpoint can.
// It runs only after the starting policy was restored (or none was saved), so
// a failed restore leaves the starting checkpoint for a manual load.
func (c *checker) cleanup(ctx context.Context) {
	if c.del == nil || len(c.created) == 0 {
		return
	}
	var gone []string
	for _, name := range c.created {
		r, err := c.del.Delete(ctx, trainer.DeleteRequest{StepID: c.stepID("cleanup"), Name: name})
		if err != nil {
			fmt.Fprintf(c.w, "NOTE  could not delete the check's checkpoint %s: %v\n", name, err)
			continue
		}
		if r.Deleted { // the delete property already removed its own
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		fmt.Fprintf(c.w, "NOTE  deleted the check's checkpoints %s\n", strings.Join(gone, ", "))
	}
}

func checkInfo(info trainer.Info) error {
	if info.ProtocolVersion != trainer.ProtocolVersion {
		return fmt.Errorf("protocol_version %d, want %d", info.ProtocolVersion, trainer.ProtocolVersion)
	}
	if len(info.LossTypes) == 0 {
		return fmt.Errorf("loss_types is empty")
	}
	for _, t := range info.LossTypes {
		if !slices.Contains(trainer.LossTypes(), t) {
			return fmt.Errorf("loss_types lists unknown type %q", t)
		}
	}
	if info.PolicyVersion < 0 {
		return fmt.Errorf("policy_version %d < 0", info.PolicyVersion)
	}
	if info.TokenKind != "tokenizer" && info.TokenKind != "decisions" {
		return fmt.Errorf("token_kind %q, want tokenizer or decisions", info.TokenKind)
	}
	return nil
}

// restore loads the starting checkpoint before an update property.
func (c *checker) restore(ctx context.Context) error {
	if !c.startCk {
		return nil
	}
	if _, err := c.p.Load(ctx, trainer.LoadRequest{StepID: c.stepID("load-start"), Name: c.run + "-start"}); err != nil {
		return fmt.Errorf("load the starting checkpoint: %w", err)
	}
	return nil
}

// checkSamples runs sample_shape and sample_deterministic and returns a
// sample with tokens for the update properties.
func (c *checker) checkSamples(ctx context.Context) *trainer.GRPOSample {
	prompts := checkPrompts()
	req := trainer.SampleRequest{Prompts: prompts, N: c.opts.N, Temperature: 1, MaxTokens: c.opts.MaxTokens, Seed: c.opts.Seed}
	a, err := c.p.Sample(ctx, req)
	if err == nil {
		err = checkSampleShape(a, len(prompts), c.opts.N)
	}
	if err != nil {
		c.report("sample_shape", err, "")
		c.report("sample_deterministic", fmt.Errorf("skipped: sample failed"), "")
		return nil
	}
	c.report("sample_shape", nil, fmt.Sprintf("%d prompts × %d samples, token ids and logprobs aligned, all logprobs ≤ 0, e.g. %q",
		len(prompts), c.opts.N, a.Samples[0].Text))
	b, err := c.p.Sample(ctx, req)
	if err == nil {
		err = sameSamples(a, b)
	}
	c.report("sample_deterministic", err, fmt.Sprintf("seed %d gives identical samples twice", c.opts.Seed))

	best := -1
	for k, s := range a.Samples {
		if len(s.TokenIDs) > 0 && (best < 0 || len(s.TokenIDs) > len(a.Samples[best].TokenIDs)) {
			best = k
		}
	}
	if best < 0 {
		return nil // every sample is empty; the update properties say so
	}
	s := a.Samples[best]
	return &trainer.GRPOSample{Prompt: prompts[s.PromptIndex], TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs}
}

func checkSampleShape(r trainer.SampleResponse, prompts, n int) error {
	if len(r.Samples) != prompts*n {
		return fmt.Errorf("%d samples, want %d prompts × %d", len(r.Samples), prompts, n)
	}
	for k, s := range r.Samples {
		if s.PromptIndex != k/n || s.SampleIndex != k%n {
			return fmt.Errorf("samples[%d] is (prompt %d, sample %d), want (%d, %d)", k, s.PromptIndex, s.SampleIndex, k/n, k%n)
		}
		if len(s.Logprobs) != len(s.TokenIDs) {
			return fmt.Errorf("samples[%d]: %d logprobs for %d token ids", k, len(s.Logprobs), len(s.TokenIDs))
		}
		for t, lp := range s.Logprobs {
			if math.IsNaN(lp) || lp > 0 {
				return fmt.Errorf("samples[%d].logprobs[%d] = %v, want ≤ 0", k, t, lp)
			}
		}
		if s.FinishReason != "stop" && s.FinishReason != "length" {
			return fmt.Errorf("samples[%d].finish_reason %q, want stop or length", k, s.FinishReason)
		}
		if s.PolicyVersion != r.PolicyVersion {
			return fmt.Errorf("samples[%d].policy_version %d, response says %d", k, s.PolicyVersion, r.PolicyVersion)
		}
	}
	return nil
}

// logprobTol absorbs nondeterministic GPU kernels; the embedded policy is exact.
const logprobTol = 1e-4

func sameSamples(a, b trainer.SampleResponse) error {
	for k := range a.Samples {
		x, y := a.Samples[k], b.Samples[k]
		if x.Text != y.Text || !slices.Equal(x.TokenIDs, y.TokenIDs) {
			return fmt.Errorf("samples[%d] differ for the same seed: %q vs %q", k, x.Text, y.Text)
		}
		for t := range x.Logprobs {
			if math.Abs(x.Logprobs[t]-y.Logprobs[t]) > logprobTol {
				return fmt.Errorf("samples[%d].logprobs[%d] differ for the same seed: %v vs %v", k, t, x.Logprobs[t], y.Logprobs[t])
			}
		}
	}
	return nil
}

// score returns the logprobs of s's tokens under the current policy.
func (c *checker) score(ctx context.Context, s *trainer.GRPOSample) ([]float64, error) {
	if c.sc == nil {
		return nil, fmt.Errorf("the endpoint client does not implement Logprobs (/v1/logprobs)")
	}
	r, err := c.sc.Logprobs(ctx, trainer.LogprobsRequest{Items: []trainer.LogprobsItem{{Prompt: s.Prompt, TokenIDs: s.TokenIDs}}, Temperature: 1})
	if err != nil {
		return nil, err
	}
	if len(r.Logprobs) != 1 || len(r.Logprobs[0]) != len(s.TokenIDs) {
		return nil, fmt.Errorf("logprobs returned %d lists, want 1 of %d values", len(r.Logprobs), len(s.TokenIDs))
	}
	return r.Logprobs[0], nil
}

func sum(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s
}

func (c *checker) grpo(ctx context.Context, stepID string, s *trainer.GRPOSample, adv float64) (trainer.GRPOResponse, error) {
	return c.grpoWith(ctx, stepID, s, adv, c.opts.LearningRate, 0)
}

func (c *checker) grpoWith(ctx context.Context, stepID string, s *trainer.GRPOSample, adv, lr, wd float64) (trainer.GRPOResponse, error) {
	gs := *s
	gs.Advantage = adv
	return c.p.GRPOStep(ctx, trainer.GRPORequest{StepID: stepID, Samples: []trainer.GRPOSample{gs},
		Loss: c.loss(lr, wd)})
}

// loss is the check's loss: its type, learning rate and weight decay, at
// temperature 1 (its samples' temperature); every other field is left unset,
// so it takes the protocol's default.
func (c *checker) loss(lr, wd float64) trainer.LossConfig {
	return trainer.LossConfig{Type: new(c.opts.LossType), LearningRate: new(lr), WeightDecay: new(wd), Temperature: new(1.0)}
}

// checkClipLowZero runs clip_low_zero: a present clip_low 0 is taken
// literally (PROTOCOL.md, "LossConfig"), not as the default 0.2: ε_low = 0
// clips every ratio below 1, the tightest lower clip. From the
// starting policy, the sample gets old logprobs that make every ratio
// r = exp(π − π_old) 0.9 (or exp(π) for a token with π > log 0.9, old
// logprobs being ≤ 0) and advantage −1. No token is then below
// 1 − 0.2 = 0.8, so clip_frac_low is 0 with clip_low 0.2, while with
// clip_low 0 every token with r < 1 is below 1 − 0: clip_frac_low > 0.
func (c *checker) checkClipLowZero(ctx context.Context, s *trainer.GRPOSample) {
	const name = "clip_low_zero"
	if s == nil {
		c.report(name, fmt.Errorf("skipped: no sample with tokens"), "")
		return
	}
	clipFracLow := func(clipLow float64) (float64, error) {
		if err := c.restore(ctx); err != nil {
			return 0, err
		}
		lp, err := c.score(ctx, s)
		if err != nil {
			return 0, err
		}
		if !slices.ContainsFunc(lp, func(x float64) bool { return x < -0.01 }) {
			return 0, errNoRatio
		}
		gs := *s
		gs.Advantage = -1
		gs.OldLogprobs = make([]float64, len(lp))
		for t, x := range lp {
			gs.OldLogprobs[t] = min(x-math.Log(0.9), 0)
		}
		loss := c.loss(c.opts.LearningRate, 0)
		loss.ClipLow = new(clipLow)
		r, err := c.p.GRPOStep(ctx, trainer.GRPORequest{StepID: c.stepID("clip-low"), Samples: []trainer.GRPOSample{gs}, Loss: loss})
		return r.ClipFracLow, err
	}
	// The loss table's clip_low, what an omitted clip_low takes: ratios of
	// 0.9 are inside its range [0.8, …).
	defaultClipLow := rlcore.DefaultLoss().ClipLow
	err := func() error {
		def, err := clipFracLow(defaultClipLow)
		if err != nil {
			return err
		}
		zero, err := clipFracLow(0)
		if err != nil {
			return err
		}
		if def != 0 || !(zero > 0) {
			return fmt.Errorf("ratios ≥ 0.9 with advantage −1 gave clip_frac_low %.6g with clip_low 0.2 (want 0) and %.6g with clip_low 0 (want > 0): "+
				"a present clip_low 0 must clip every ratio below 1 (ε_low = 0, the tightest clip), not fall back to the default %v", def, zero, defaultClipLow)
		}
		c.report(name, nil, fmt.Sprintf("ratios ≥ 0.9, advantage −1: clip_frac_low %.6g with clip_low 0.2, %.6g with clip_low 0", def, zero))
		return nil
	}()
	if errors.Is(err, errNoRatio) {
		c.skip(name, "every token's logprob is ≥ −0.01, so no ratio below 1 can be set up")
		return
	}
	if err != nil {
		c.report(name, err, "")
	}
}

// errNoRatio: clip_low_zero cannot set up a ratio below 1.
var errNoRatio = errors.New("no token with a logprob below −0.01")

func (c *checker) checkDirection(ctx context.Context, name string, s *trainer.GRPOSample, adv float64) {
	if s == nil {
		c.report(name, fmt.Errorf("skipped: no sample with tokens"), "")
		return
	}
	err := func() error {
		if err := c.restore(ctx); err != nil {
			return err
		}
		before, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		if _, err := c.grpo(ctx, c.stepID("dir"), s, adv); err != nil {
			return err
		}
		after, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		b, a := sum(before), sum(after)
		if adv > 0 && !(a > b) || adv < 0 && !(a < b) {
			return fmt.Errorf("advantage %+g moved the sample's logprob from %.6g to %.6g", adv, b, a)
		}
		c.report(name, nil, fmt.Sprintf("advantage %+g: sequence logprob %.6g → %.6g", adv, b, a))
		return nil
	}()
	if err != nil {
		c.report(name, err, "")
	}
}

func (c *checker) checkSFT(ctx context.Context) {
	err := func() error {
		if err := c.restore(ctx); err != nil {
			return err
		}
		prompts, completions := checkPrompts(), checkCompletions()
		var exs []trainer.SFTExample
		for i, p := range prompts {
			exs = append(exs, trainer.SFTExample{Prompt: p, Completion: completions[i]})
		}
		r1, err := c.p.SFTStep(ctx, trainer.SFTRequest{StepID: c.stepID("sft"), Examples: exs, LearningRate: c.opts.LearningRate})
		if err != nil {
			return err
		}
		r2, err := c.p.SFTStep(ctx, trainer.SFTRequest{StepID: c.stepID("sft"), Examples: exs, LearningRate: c.opts.LearningRate})
		if err != nil {
			return err
		}
		if !(r2.Loss < r1.Loss) {
			return fmt.Errorf("loss %.6g then %.6g on the same batch: did not drop", r1.Loss, r2.Loss)
		}
		if r2.PolicyVersion != r1.PolicyVersion+1 {
			return fmt.Errorf("policy_version %d then %d, want +1 per sft_step", r1.PolicyVersion, r2.PolicyVersion)
		}
		c.report("sft_lowers_loss", nil, fmt.Sprintf("loss %.6g → %.6g over %d tokens", r1.Loss, r2.Loss, r1.Tokens))
		return nil
	}()
	if err != nil {
		c.report("sft_lowers_loss", err, "")
	}
}

func (c *checker) checkReplay(ctx context.Context, s *trainer.GRPOSample) {
	const name = "step_id_replay"
	if s == nil {
		c.report(name, fmt.Errorf("skipped: no sample with tokens"), "")
		return
	}
	err := func() error {
		if err := c.restore(ctx); err != nil {
			return err
		}
		info, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		id := c.stepID("replay")
		r1, err := c.grpo(ctx, id, s, 1)
		if err != nil {
			return err
		}
		if r1.Replayed || r1.PolicyVersion != info.PolicyVersion+1 {
			return fmt.Errorf("first call: replayed %v, policy_version %d, want false and %d", r1.Replayed, r1.PolicyVersion, info.PolicyVersion+1)
		}
		lp1, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		r2, err := c.grpo(ctx, id, s, 1)
		if err != nil {
			return err
		}
		if !r2.Replayed || r2.PolicyVersion != r1.PolicyVersion || r2.Loss != r1.Loss {
			return fmt.Errorf("repeat: replayed %v, policy_version %d, loss %v; want true, %d, %v", r2.Replayed, r2.PolicyVersion, r2.Loss, r1.PolicyVersion, r1.Loss)
		}
		info2, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		if info2.PolicyVersion != r1.PolicyVersion {
			return fmt.Errorf("policy_version moved to %d after the repeat, want %d", info2.PolicyVersion, r1.PolicyVersion)
		}
		lp2, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		if !slices.Equal(lp1, lp2) {
			return fmt.Errorf("the repeat changed the policy: logprobs %v → %v", lp1, lp2)
		}
		_, err = c.p.SFTStep(ctx, trainer.SFTRequest{StepID: id, Examples: []trainer.SFTExample{{Prompt: s.Prompt, Completion: "x"}}, LearningRate: c.opts.LearningRate})
		if trainer.ErrorCode(err) != trainer.CodeConflict {
			return fmt.Errorf("reusing a grpo_step step_id for sft_step: got %v, want a conflict error", err)
		}
		c.report(name, nil, fmt.Sprintf("repeat replayed, policy_version stayed %d, policy unchanged; reuse for another call is a conflict", r1.PolicyVersion))
		return nil
	}()
	if err != nil {
		c.report(name, err, "")
	}
}

func (c *checker) checkSaveLoad(ctx context.Context, s *trainer.GRPOSample) {
	if s == nil {
		c.report("save_load_restores", fmt.Errorf("skipped: no sample with tokens"), "")
		c.report("checkpoints_list", fmt.Errorf("skipped: no sample with tokens"), "")
		return
	}
	name := c.run + "-saved"
	var saved trainer.SaveResponse
	err := func() error {
		if err := c.restore(ctx); err != nil {
			return err
		}
		// Move away from the starting point first, so the saved state has
		// optimizer momentum and is not the starting checkpoint.
		if _, err := c.grpo(ctx, c.stepID("pre-save"), s, 1); err != nil {
			return err
		}
		var err error
		if saved, err = c.save(ctx, "save", name); err != nil {
			return err
		}
		want, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		if _, err := c.grpo(ctx, c.stepID("post-save"), s, -1); err != nil {
			return err
		}
		moved, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		if slices.Equal(moved, want) {
			return fmt.Errorf("the update after save did not change the logprobs; cannot test load")
		}
		ld, err := c.p.Load(ctx, trainer.LoadRequest{StepID: c.stepID("load"), Name: name})
		if err != nil {
			return err
		}
		got, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		for t := range want {
			if math.Abs(got[t]-want[t]) > logprobTol {
				return fmt.Errorf("after load, logprobs[%d] = %v, saved %v", t, got[t], want[t])
			}
		}
		info, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		if ld.PolicyVersion != saved.PolicyVersion || info.PolicyVersion != saved.PolicyVersion {
			return fmt.Errorf("after load policy_version %d (info %d), saved %d", ld.PolicyVersion, info.PolicyVersion, saved.PolicyVersion)
		}
		c.report("save_load_restores", nil, fmt.Sprintf("save → update (logprob %.6g → %.6g) → load restored %.6g and policy_version %d",
			sum(want), sum(moved), sum(got), saved.PolicyVersion))
		return nil
	}()
	if err != nil {
		c.report("save_load_restores", err, "")
	}
	list, err := c.p.Checkpoints(ctx)
	if err == nil {
		err = fmt.Errorf("checkpoint %q missing from %d listed", name, len(list))
		for _, ck := range list {
			if ck.Name == name {
				err = nil
				if saved.Name != "" && ck.PolicyVersion != saved.PolicyVersion {
					err = fmt.Errorf("checkpoint %q listed with policy_version %d, saved %d", name, ck.PolicyVersion, saved.PolicyVersion)
				}
			}
		}
	}
	c.report("checkpoints_list", err, fmt.Sprintf("lists %s", name))
}

// checkLearningRate: a learning-rate schedule is sent as each call's
// learning_rate, so an endpoint must apply the one in the request (not a
// fixed one). From the same policy and optimizer state, Adam's step is
// proportional to the learning rate, so 4× the rate must move the sample's
// logprob clearly more (> 1.5×; exactly 4× only in the linear regime).
func (c *checker) checkLearningRate(ctx context.Context, s *trainer.GRPOSample) {
	const name = "learning_rate_scales_update"
	if s == nil {
		c.report(name, fmt.Errorf("skipped: no sample with tokens"), "")
		return
	}
	if !c.startCk {
		c.report(name, fmt.Errorf("skipped: needs the starting checkpoint to compare two updates from one policy"), "")
		return
	}
	err := func() error {
		move := func(lr float64) (float64, error) {
			if err := c.restore(ctx); err != nil {
				return 0, err
			}
			before, err := c.score(ctx, s)
			if err != nil {
				return 0, err
			}
			if _, err := c.grpoWith(ctx, c.stepID("lr"), s, 1, lr, 0); err != nil {
				return 0, err
			}
			after, err := c.score(ctx, s)
			return sum(after) - sum(before), err
		}
		d1, err := move(c.opts.LearningRate)
		if err != nil {
			return err
		}
		d4, err := move(4 * c.opts.LearningRate)
		if err != nil {
			return err
		}
		if !(d1 > 0 && d4 > 1.5*d1) {
			return fmt.Errorf("learning rate %g moved the logprob by %.6g, %g by %.6g: the request's learning_rate is not applied",
				c.opts.LearningRate, d1, 4*c.opts.LearningRate, d4)
		}
		c.report(name, nil, fmt.Sprintf("logprob moved %.6g at lr %g, %.6g at 4× (%.2f×)", d1, c.opts.LearningRate, d4, d4/d1))
		return nil
	}()
	if err != nil {
		c.report(name, err, "")
	}
}

// checkOptimizerReset runs when the endpoint advertises optimizer_reset: a
// fresh trainer and an SFT-then-reset trainer take the same first GRPO step.
// From the starting policy, a grpo_step with reset_optimizer gives the same
// logprobs as the same step taken after an sft_step at learning rate 1e-9,
// which fills the optimizer state but leaves the weights where they were.
// The step after that sft_step without the reset is reported for comparison
// (it differs wherever SFT's moments carry over).
func (c *checker) checkOptimizerReset(ctx context.Context, s *trainer.GRPOSample, advertised bool) {
	const name = "optimizer_reset"
	switch {
	case !advertised:
		c.skip(name, "endpoint does not support optimizer_reset (info.capabilities.optimizer_reset is false)")
		return
	case s == nil:
		c.report(name, fmt.Errorf("skipped: no sample with tokens"), "")
		return
	case !c.startCk:
		c.report(name, fmt.Errorf("skipped: needs the starting checkpoint, which could not be saved"), "")
		return
	}
	step := func(sft, reset bool) ([]float64, error) {
		if err := c.restore(ctx); err != nil {
			return nil, err
		}
		if sft {
			var exs []trainer.SFTExample
			for i, p := range checkPrompts() {
				exs = append(exs, trainer.SFTExample{Prompt: p, Completion: checkCompletions()[i]})
			}
			if _, err := c.p.SFTStep(ctx, trainer.SFTRequest{StepID: c.stepID("sft-reset"), Examples: exs, LearningRate: 1e-9}); err != nil {
				return nil, err
			}
		}
		gs := *s
		gs.Advantage = 1
		if _, err := c.p.GRPOStep(ctx, trainer.GRPORequest{StepID: c.stepID("reset"), Samples: []trainer.GRPOSample{gs},
			Loss: c.loss(c.opts.LearningRate, 0), ResetOptimizer: reset}); err != nil {
			return nil, err
		}
		return c.score(ctx, s)
	}
	err := func() error {
		fresh, err := step(false, true)
		if err != nil {
			return err
		}
		afterSFT, err := step(true, true)
		if err != nil {
			return err
		}
		carried, err := step(true, false)
		if err != nil {
			return err
		}
		// The sft_step at lr 1e-9 still moves a LoRA model's weights a
		// little and may draw dropout masks, so the reset step after it
		// need not be the fresh one to the bit; a carried-over state
		// changes the step far more. Pass: equal within logprobTol, or
		// at most resetShare of the way from the fresh step to the
		// carried one.
		gap, carriedGap := maxAbsDiff(fresh, afterSFT), maxAbsDiff(fresh, carried)
		if !within(fresh, afterSFT, logprobTol) && gap > resetShare*carriedGap {
			return fmt.Errorf("a reset grpo_step gave summed logprob %.6g from the starting policy and %.6g after an sft_step at lr 1e-9 "+
				"(max per-token gap %.3g, over %.0f%% of the %.3g gap without the reset): the optimizer state of the sft_step carried into the reset step",
				sum(fresh), sum(afterSFT), gap, 100*resetShare, carriedGap)
		}
		c.report(name, nil, fmt.Sprintf("summed logprob %.6g after a reset step, fresh or after SFT; %.6g after SFT without the reset",
			sum(fresh), sum(carried)))
		return nil
	}()
	if err != nil {
		c.report(name, err, "")
	}
}

// checkWeightDecay runs when the endpoint advertises weight_decay: from one
// saved state with momentum (after an update, so LoRA's B ≠ 0), a step with
// advantage 0 (no gradient) gives the same policy with weight_decay 0 twice
// in a row of restores, and a different one with weight_decay > 0.
func (c *checker) checkWeightDecay(ctx context.Context, s *trainer.GRPOSample, advertised bool) {
	const name = "weight_decay"
	switch {
	case !advertised:
		c.skip(name, "endpoint does not support weight_decay (info.capabilities.weight_decay is false)")
		return
	case s == nil:
		c.report(name, fmt.Errorf("skipped: no sample with tokens"), "")
		return
	}
	ck := c.run + "-wd"
	err := func() error {
		if err := c.restore(ctx); err != nil {
			return err
		}
		if _, err := c.grpo(ctx, c.stepID("pre-wd"), s, 1); err != nil {
			return err
		}
		if _, err := c.save(ctx, "save-wd", ck); err != nil {
			return err
		}
		after := func(wd float64) (float64, error) {
			if _, err := c.p.Load(ctx, trainer.LoadRequest{StepID: c.stepID("load-wd"), Name: ck}); err != nil {
				return 0, err
			}
			if _, err := c.grpoWith(ctx, c.stepID("wd"), s, 0, c.opts.LearningRate, wd); err != nil {
				return 0, err
			}
			lp, err := c.score(ctx, s)
			return sum(lp), err
		}
		a0, err := after(0)
		if err != nil {
			return err
		}
		b0, err := after(0)
		if err != nil {
			return err
		}
		wd := 0.2 / c.opts.LearningRate // lr·λ = 0.2: the step shrinks every weight by 20%
		a1, err := after(wd)
		if err != nil {
			return err
		}
		if math.Abs(a0-b0) > logprobTol {
			return fmt.Errorf("the same update from the same checkpoint gave logprob %.6g then %.6g", a0, b0)
		}
		if !(math.Abs(a1-a0) > 5*logprobTol) {
			return fmt.Errorf("weight_decay %g left the logprob at %.6g (%.6g without): not applied", wd, a1, a0)
		}
		c.report(name, nil, fmt.Sprintf("a zero-advantage step gives logprob %.6g with weight_decay 0, %.6g with %g", a0, a1, wd))
		return nil
	}()
	if err != nil {
		c.report(name, err, "")
	}
}

// checkDelete runs the delete property when the endpoint advertises it: a
// temporary checkpoint is saved, deleted (deleted: true, gone from the list,
// load answers not_found), the delete's step_id replays, a second delete
// answers deleted: false, a bad name is invalid_argument, and
// policy_version never moves.
func (c *checker) checkDelete(ctx context.Context, advertised bool) {
	const prop = "delete"
	switch {
	case !advertised:
		c.skip(prop, "endpoint does not support delete (info.capabilities.delete is false)")
		return
	case c.del == nil:
		c.skip(prop, "endpoint does not support delete (info.capabilities.delete is true, but this client does not implement Deleter)")
		return
	}
	name := c.run + "-delete"
	err := func() error {
		info, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		version := info.PolicyVersion
		if _, err := c.save(ctx, "save-delete", name); err != nil {
			return fmt.Errorf("save the checkpoint to delete: %w", err)
		}
		if listed, err := c.listed(ctx, name); err != nil || !listed {
			return fmt.Errorf("checkpoint %q not listed after save (err %v)", name, err)
		}
		id := c.stepID("delete")
		d1, err := c.del.Delete(ctx, trainer.DeleteRequest{StepID: id, Name: name})
		if err != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		if d1.Name != name || !d1.Deleted || d1.Replayed || d1.PolicyVersion != version {
			return fmt.Errorf("delete of a saved checkpoint: %+v, want name %q, deleted true, replayed false, policy_version %d", d1, name, version)
		}
		if listed, err := c.listed(ctx, name); err != nil || listed {
			return fmt.Errorf("checkpoint %q still listed after delete (err %v)", name, err)
		}
		if _, err := c.p.Load(ctx, trainer.LoadRequest{StepID: c.stepID("load-deleted"), Name: name}); trainer.ErrorCode(err) != trainer.CodeNotFound {
			return fmt.Errorf("load of the deleted checkpoint: got %v, want a not_found error", err)
		}
		d2, err := c.del.Delete(ctx, trainer.DeleteRequest{StepID: id, Name: name})
		if err != nil {
			return fmt.Errorf("repeat the delete's step_id: %w", err)
		}
		if !d2.Replayed || !d2.Deleted || d2.PolicyVersion != version {
			return fmt.Errorf("repeat of the delete's step_id: %+v, want replayed true, deleted true, policy_version %d", d2, version)
		}
		d3, err := c.del.Delete(ctx, trainer.DeleteRequest{StepID: c.stepID("delete-again"), Name: name})
		if err != nil {
			return fmt.Errorf("delete of a missing checkpoint must not be an error: %w", err)
		}
		if d3.Deleted || d3.Replayed || d3.PolicyVersion != version {
			return fmt.Errorf("delete of a missing checkpoint: %+v, want deleted false, replayed false, policy_version %d", d3, version)
		}
		if _, err := c.del.Delete(ctx, trainer.DeleteRequest{StepID: c.stepID("delete-bad"), Name: "../" + name}); trainer.ErrorCode(err) != trainer.CodeInvalidArgument {
			return fmt.Errorf("delete of an invalid name: got %v, want an invalid_argument error", err)
		}
		after, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		if after.PolicyVersion != version {
			return fmt.Errorf("policy_version moved from %d to %d across deletes", version, after.PolicyVersion)
		}
		c.report(prop, nil, fmt.Sprintf("saved %s, deleted it (gone from the list, load not_found), step_id replayed, second delete deleted:false, bad name invalid_argument, policy_version stayed %d", name, version))
		return nil
	}()
	if err != nil {
		c.report(prop, err, "")
	}
}

// listed says whether the endpoint lists the checkpoint name.
func (c *checker) listed(ctx context.Context, name string) (bool, error) {
	list, err := c.p.Checkpoints(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(list, func(ck trainer.CheckpointInfo) bool { return ck.Name == name }), nil
}

// checkVersionPrecondition runs version_precondition: sample, grpo_step,
// sft_step and save with a wrong expected_policy_version are refused with
// version_mismatch and change nothing; with the right one they go through,
// and a retry of an applied call (same step_id, same body) replays although
// the version has moved since.
func (c *checker) checkVersionPrecondition(ctx context.Context, s *trainer.GRPOSample) {
	const name = "version_precondition"
	if s == nil {
		c.report(name, fmt.Errorf("skipped: no sample with tokens"), "")
		return
	}
	err := func() error {
		if err := c.restore(ctx); err != nil {
			return err
		}
		info, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		v, stale := info.PolicyVersion, info.PolicyVersion+7
		mismatch := func(what string, err error) error {
			if trainer.ErrorCode(err) != trainer.CodeVersionMismatch {
				return fmt.Errorf("%s with expected_policy_version %d (the policy is at %d): got %v, want a %s error",
					what, stale, v, err, trainer.CodeVersionMismatch)
			}
			return nil
		}
		req := trainer.SampleRequest{Prompts: []trainer.Prompt{s.Prompt}, N: 1, Temperature: 0, MaxTokens: c.opts.MaxTokens, Seed: c.opts.Seed,
			ExpectedPolicyVersion: trainer.Version(v)}
		if _, err := c.p.Sample(ctx, req); err != nil {
			return fmt.Errorf("sample with the current expected_policy_version %d: %w", v, err)
		}
		req.ExpectedPolicyVersion = trainer.Version(stale)
		if err := mismatch("sample", second(c.p.Sample(ctx, req))); err != nil {
			return err
		}
		before, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		if err := mismatch("grpo_step", second(c.grpoAt(ctx, c.stepID("stale-grpo"), s, 1, trainer.Version(stale)))); err != nil {
			return err
		}
		sft := trainer.SFTRequest{StepID: c.stepID("stale-sft"), Examples: []trainer.SFTExample{{Prompt: s.Prompt, Completion: checkCompletions()[0]}},
			LearningRate: c.opts.LearningRate, ExpectedPolicyVersion: trainer.Version(stale)}
		if err := mismatch("sft_step", second(c.p.SFTStep(ctx, sft))); err != nil {
			return err
		}
		save := trainer.SaveRequest{StepID: c.stepID("stale-save"), Name: c.run + "-stale", ExpectedPolicyVersion: trainer.Version(stale)}
		if err := mismatch("save", second(c.saveReq(ctx, save))); err != nil {
			return err
		}
		after, err := c.score(ctx, s)
		if err != nil {
			return err
		}
		if info, err = c.p.Info(ctx); err != nil {
			return err
		}
		if info.PolicyVersion != v || !within(before, after, logprobTol) {
			return fmt.Errorf("refused calls changed the policy: policy_version %d → %d, logprob %.6g → %.6g", v, info.PolicyVersion, sum(before), sum(after))
		}
		id := c.stepID("expected-grpo")
		r1, err := c.grpoAt(ctx, id, s, 1, trainer.Version(v))
		if err != nil {
			return fmt.Errorf("grpo_step with the current expected_policy_version %d: %w", v, err)
		}
		if r1.PolicyVersion != v+1 {
			return fmt.Errorf("grpo_step at expected_policy_version %d answered policy_version %d, want %d", v, r1.PolicyVersion, v+1)
		}
		r2, err := c.grpoAt(ctx, id, s, 1, trainer.Version(v))
		if err != nil || !r2.Replayed || r2.PolicyVersion != v+1 {
			return fmt.Errorf("a retry of the applied grpo_step (expected_policy_version %d, now %d): %+v, %v; want a replay with policy_version %d",
				v, v+1, r2, err, v+1)
		}
		c.report(name, nil, fmt.Sprintf("expected_policy_version %d (policy at %d): sample, grpo_step, sft_step and save refused with %s, nothing changed; at %d applied, its retry replayed",
			stale, v, trainer.CodeVersionMismatch, v))
		return nil
	}()
	if err != nil {
		c.report(name, err, "")
	}
}

// checkRunID runs checkpoint_run_id: a save's run_id is listed with the
// checkpoint and reported by load; a load with another expected_run_id is
// refused with run_mismatch and leaves the policy as it was.
func (c *checker) checkRunID(ctx context.Context, s *trainer.GRPOSample) {
	const name = "checkpoint_run_id"
	if s == nil {
		c.report(name, fmt.Errorf("skipped: no sample with tokens"), "")
		return
	}
	ck, owner, other := c.run+"-runid", c.run+"-owner", c.run+"-other"
	err := func() error {
		if err := c.restore(ctx); err != nil {
			return err
		}
		saved, err := c.saveReq(ctx, trainer.SaveRequest{StepID: c.stepID("save-runid"), Name: ck, RunID: owner})
		if err != nil {
			return err
		}
		list, err := c.p.Checkpoints(ctx)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(list, func(x trainer.CheckpointInfo) bool { return x.Name == ck })
		if i < 0 || list[i].RunID != owner {
			return fmt.Errorf("checkpoint %q saved with run_id %q: listed %v, want it with run_id %q", ck, owner, list, owner)
		}
		moved, err := c.grpo(ctx, c.stepID("runid-move"), s, 1)
		if err != nil {
			return err
		}
		_, err = c.p.Load(ctx, trainer.LoadRequest{StepID: c.stepID("load-other"), Name: ck, ExpectedRunID: other})
		if trainer.ErrorCode(err) != trainer.CodeRunMismatch {
			return fmt.Errorf("load of run %q's checkpoint with expected_run_id %q: got %v, want a %s error", owner, other, err, trainer.CodeRunMismatch)
		}
		info, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		if info.PolicyVersion != moved.PolicyVersion {
			return fmt.Errorf("the refused load changed policy_version from %d to %d", moved.PolicyVersion, info.PolicyVersion)
		}
		ld, err := c.p.Load(ctx, trainer.LoadRequest{StepID: c.stepID("load-owner"), Name: ck, ExpectedRunID: owner})
		if err != nil {
			return fmt.Errorf("load with the matching expected_run_id: %w", err)
		}
		if ld.RunID != owner || ld.PolicyVersion != saved.PolicyVersion {
			return fmt.Errorf("load answered run_id %q, policy_version %d; want %q, %d", ld.RunID, ld.PolicyVersion, owner, saved.PolicyVersion)
		}
		c.report(name, nil, fmt.Sprintf("run_id %q listed and reported by load; expected_run_id %q refused with %s, policy unchanged", owner, other, trainer.CodeRunMismatch))
		return nil
	}()
	if err != nil {
		c.report(name, err, "")
	}
}

// checkLimits runs limits: every info.limits value is set (0, no limit,
// lets one request exhaust the endpoint), and a request one beyond each is
// refused with invalid_argument without changing the policy.
func (c *checker) checkLimits(ctx context.Context) {
	const name = "limits"
	err := func() error {
		info, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		l := info.Limits
		for _, f := range []struct {
			key string
			v   int
		}{{"max_prompts", l.MaxPrompts}, {"max_n", l.MaxN}, {"max_tokens", l.MaxTokens}, {"max_batch", l.MaxBatch}} {
			if f.v <= 0 {
				return fmt.Errorf("info.limits.%s is %d (no limit): one request can exhaust the endpoint's memory", f.key, f.v)
			}
		}
		refused := func(what string, err error) error {
			if trainer.ErrorCode(err) != trainer.CodeInvalidArgument {
				return fmt.Errorf("%s beyond info.limits: got %v, want an %s error", what, err, trainer.CodeInvalidArgument)
			}
			return nil
		}
		p := trainer.Prompt{Text: "How is espresso brewed?", Dialogue: &trainer.Dialogue{Question: "How is espresso brewed?"}}
		one := trainer.SampleRequest{Prompts: []trainer.Prompt{p}, N: 1, Temperature: 1, MaxTokens: 1, Seed: c.opts.Seed}
		req := one
		req.N = l.MaxN + 1
		if err := refused(fmt.Sprintf("sample with n = %d", req.N), second(c.p.Sample(ctx, req))); err != nil {
			return err
		}
		req = one
		req.MaxTokens = l.MaxTokens + 1
		if err := refused(fmt.Sprintf("sample with max_tokens = %d", req.MaxTokens), second(c.p.Sample(ctx, req))); err != nil {
			return err
		}
		// Requests of more than probeMax items are not sent: they would be
		// large, and the body limit could refuse them for another reason.
		const probeMax = 1 << 16
		probed := []string{"max_n", "max_tokens"}
		if l.MaxPrompts < probeMax {
			req = one
			req.Prompts = slices.Repeat([]trainer.Prompt{p}, l.MaxPrompts+1)
			if err := refused(fmt.Sprintf("sample with %d prompts", len(req.Prompts)), second(c.p.Sample(ctx, req))); err != nil {
				return err
			}
			probed = append(probed, "max_prompts")
		}
		if l.MaxBatch < probeMax {
			gs := trainer.GRPOSample{Prompt: p, TokenIDs: []int{}, OldLogprobs: []float64{}, Advantage: 1}
			g := trainer.GRPORequest{StepID: c.stepID("limit-grpo"), Samples: slices.Repeat([]trainer.GRPOSample{gs}, l.MaxBatch+1),
				Loss: c.loss(c.opts.LearningRate, 0)}
			if err := refused(fmt.Sprintf("grpo_step with %d samples", len(g.Samples)), second(c.p.GRPOStep(ctx, g))); err != nil {
				return err
			}
			ex := trainer.SFTExample{Prompt: p, Completion: "espresso"}
			sft := trainer.SFTRequest{StepID: c.stepID("limit-sft"), Examples: slices.Repeat([]trainer.SFTExample{ex}, l.MaxBatch+1), LearningRate: c.opts.LearningRate}
			if err := refused(fmt.Sprintf("sft_step with %d examples", len(sft.Examples)), second(c.p.SFTStep(ctx, sft))); err != nil {
				return err
			}
			probed = append(probed, "max_batch")
		}
		after, err := c.p.Info(ctx)
		if err != nil {
			return err
		}
		if after.PolicyVersion != info.PolicyVersion {
			return fmt.Errorf("refused requests moved policy_version from %d to %d", info.PolicyVersion, after.PolicyVersion)
		}
		c.report(name, nil, fmt.Sprintf("limits %+v; one beyond %s refused with %s", l, strings.Join(probed, ", "), trainer.CodeInvalidArgument))
		return nil
	}()
	if err != nil {
		c.report(name, err, "")
	}
}

func (c *checker) grpoAt(ctx context.Context, stepID string, s *trainer.GRPOSample, adv float64, expected *int64) (trainer.GRPOResponse, error) {
	gs := *s
	gs.Advantage = adv
	return c.p.GRPOStep(ctx, trainer.GRPORequest{StepID: stepID, Samples: []trainer.GRPOSample{gs}, ExpectedPolicyVersion: expected,
		Loss: c.loss(c.opts.LearningRate, 0)})
}

// second returns a call's error, for checks that expect one.
func second[T any](_ T, err error) error { return err }

// resetShare bounds optimizer_reset's gap: a reset step after SFT may
// differ from the fresh step by at most this share of what carrying SFT's
// optimizer state changes.
const resetShare = 0.05

// maxAbsDiff is the largest per-token difference of two logprob vectors
// (+Inf when their lengths differ).
func maxAbsDiff(a, b []float64) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

func within(a, b []float64, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > tol {
			return false
		}
	}
	return true
}
