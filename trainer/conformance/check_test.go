package conformance

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/trainer"
	"github.com/himes-rl/himes/trainer/embedded"
)

// newTestEmbedded is a fresh embedded policy with checkpoints in a temporary
// directory: the reference implementation the check must pass.
func newTestEmbedded(t *testing.T) *embedded.Policy {
	t.Helper()
	return newEmbeddedAt(t, t.TempDir())
}

// newEmbeddedAt is a fresh embedded policy with checkpoints in dir.
func newEmbeddedAt(t *testing.T, dir string) *embedded.Policy {
	t.Helper()
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.CheckpointDir = dir
	e, err := embedded.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func quietClient(url, token string) *trainer.Client {
	return trainer.NewClient(url, token, trainer.WithBackoff(time.Millisecond, 5*time.Millisecond),
		trainer.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
}

// untouched says whether e is still a fresh policy: version 0, every
// weight 0 (the default initialization).
func untouched(t *testing.T, e *embedded.Policy) bool {
	return version(t, e) == 0 && !slices.ContainsFunc(e.Weights(), func(w float64) bool { return w != 0 })
}

// version is p's policy_version as its info reports it.
func version(t *testing.T, p trainer.Policy) int64 {
	t.Helper()
	info, err := p.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.PolicyVersion
}

// dirNames lists the file names in dir, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// onlyPolicy hides every method of the wrapped endpoint but Policy's and
// Scorer's, like an implementation written before /v1/delete.
type onlyPolicy struct {
	trainer.Policy
	trainer.Scorer
}

func TestCheckPassesInProcessAndOverHTTP(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := newEmbeddedAt(t, dir)
	var out bytes.Buffer
	ok, err := Check(ctx, e, &out)
	if err != nil || !ok {
		t.Fatalf("in-process check failed (%v):\n%s", err, out.String())
	}

	e2 := newTestEmbedded(t)
	srv := httptest.NewServer(trainer.NewHandler(e2, "sesame"))
	defer srv.Close()
	out.Reset()
	ok, err = Check(ctx, quietClient(srv.URL, "sesame"), &out)
	if err != nil || !ok {
		t.Fatalf("HTTP check failed (%v):\n%s", err, out.String())
	}
	for _, prop := range []string{"info", "sample_shape", "sample_deterministic", "grpo_positive_raises_logprob",
		"grpo_negative_lowers_logprob", "clip_low_zero", "sft_lowers_loss", "step_id_replay", "save_load_restores", "checkpoints_list", "delete",
		"version_precondition", "checkpoint_run_id", "limits"} {
		if !strings.Contains(out.String(), "PASS  "+prop+":") {
			t.Errorf("no PASS line for %s:\n%s", prop, out.String())
		}
	}
	// The check leaves the policy as it found it.
	if !untouched(t, e2) {
		t.Errorf("check left the policy at version %d, weights %v", version(t, e2), e2.Weights())
	}
}

// brokenPolicy wraps the embedded policy and breaks one property: grpo_step
// applies nothing while claiming success.
type brokenPolicy struct{ *embedded.Policy }

func (b brokenPolicy) GRPOStep(ctx context.Context, req trainer.GRPORequest) (trainer.GRPOResponse, error) {
	info, err := b.Info(ctx)
	return trainer.GRPOResponse{PolicyVersion: info.PolicyVersion + 1}, err
}

func TestCheckDetectsBrokenEndpoint(t *testing.T) {
	var out bytes.Buffer
	ok, err := Check(context.Background(), brokenPolicy{newTestEmbedded(t)}, &out)
	if err != nil || ok {
		t.Fatalf("check passed a policy whose grpo_step does nothing (%v):\n%s", err, out.String())
	}
	for _, prop := range []string{"grpo_positive_raises_logprob", "grpo_negative_lowers_logprob", "step_id_replay"} {
		if !strings.Contains(out.String(), "FAIL  "+prop+":") {
			t.Errorf("no FAIL line for %s:\n%s", prop, out.String())
		}
	}
	if !strings.Contains(out.String(), "PASS  sft_lowers_loss:") {
		t.Errorf("sft should still pass:\n%s", out.String())
	}
}

// badSampler breaks sample_shape: positive logprobs.
type badSampler struct{ *embedded.Policy }

func (b badSampler) Sample(ctx context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	r, err := b.Policy.Sample(ctx, req)
	for i := range r.Samples {
		for t := range r.Samples[i].Logprobs {
			r.Samples[i].Logprobs[t] = 0.5
		}
	}
	return r, err
}

// forgetfulLoader breaks save_load_restores: load reports success but
// restores nothing.
type forgetfulLoader struct{ *embedded.Policy }

func (f forgetfulLoader) Load(ctx context.Context, req trainer.LoadRequest) (trainer.LoadResponse, error) {
	info, err := f.Info(ctx)
	return trainer.LoadResponse{Name: req.Name, PolicyVersion: info.PolicyVersion}, err
}

func TestCheckDetectsOtherViolations(t *testing.T) {
	var out bytes.Buffer
	ok, _ := Check(context.Background(), badSampler{newTestEmbedded(t)}, &out)
	if ok || !strings.Contains(out.String(), "FAIL  sample_shape: samples[0].logprobs[0] = 0.5, want ≤ 0") {
		t.Errorf("positive logprobs passed:\n%s", out.String())
	}
	out.Reset()
	ok, _ = Check(context.Background(), forgetfulLoader{newTestEmbedded(t)}, &out)
	if ok || !strings.Contains(out.String(), "FAIL  save_load_restores:") {
		t.Errorf("a no-op load passed:\n%s", out.String())
	}
}

// deafEndpoint advertises everything but drops weight_decay, or applies a
// fixed learning rate, as a server that predates (or ignores) the fields would.
type deafEndpoint struct {
	*embedded.Policy
	fixedLR float64
}

func (d deafEndpoint) GRPOStep(ctx context.Context, req trainer.GRPORequest) (trainer.GRPOResponse, error) {
	req.Loss.WeightDecay = new(0.0)
	if d.fixedLR > 0 {
		req.Loss.LearningRate = new(d.fixedLR)
	}
	return d.Policy.GRPOStep(ctx, req)
}

func TestCheckCatchesIgnoredOptimizerFields(t *testing.T) {
	for _, c := range []struct {
		ep   deafEndpoint
		want string
	}{
		{deafEndpoint{Policy: newTestEmbedded(t)}, "FAIL  weight_decay:"},
		{deafEndpoint{Policy: newTestEmbedded(t), fixedLR: 1e-3}, "FAIL  learning_rate_scales_update:"},
	} {
		var out strings.Builder
		ok, err := Check(context.Background(), c.ep, &out)
		if err != nil || ok || !strings.Contains(out.String(), c.want) {
			t.Errorf("want %q (ok %v, err %v):\n%s", c.want, ok, err, out.String())
		}
	}
}

// lyingDeleter claims deletes without removing anything.
type lyingDeleter struct{ *embedded.Policy }

func (l lyingDeleter) Delete(ctx context.Context, req trainer.DeleteRequest) (trainer.DeleteResponse, error) {
	info, err := l.Info(ctx)
	return trainer.DeleteResponse{Name: req.Name, Deleted: true, PolicyVersion: info.PolicyVersion}, err
}

// strictDeleter treats a missing checkpoint as an error, which the protocol forbids.
type strictDeleter struct{ *embedded.Policy }

func (s strictDeleter) Delete(ctx context.Context, req trainer.DeleteRequest) (trainer.DeleteResponse, error) {
	r, err := s.Policy.Delete(ctx, req)
	if err == nil && !r.Deleted && !r.Replayed {
		return trainer.DeleteResponse{}, trainer.NewError(trainer.CodeNotFound, "checkpoint %q not found", req.Name)
	}
	return r, err
}

// versionBumper answers a delete with a moved policy_version.
type versionBumper struct{ *embedded.Policy }

func (v versionBumper) Delete(ctx context.Context, req trainer.DeleteRequest) (trainer.DeleteResponse, error) {
	r, err := v.Policy.Delete(ctx, req)
	r.PolicyVersion++
	return r, err
}

func TestCheckDeleteProperty(t *testing.T) {
	ctx := context.Background()

	// Supported: PASS, and the check removes every checkpoint it made.
	dir := t.TempDir()
	e := newEmbeddedAt(t, dir)
	var out bytes.Buffer
	ok, err := Check(ctx, e, &out)
	if err != nil || !ok || !strings.Contains(out.String(), "PASS  delete:") || !strings.Contains(out.String(), "17/17 properties passed\n") {
		t.Fatalf("check with delete (%v, %v):\n%s", ok, err, out.String())
	}
	if got := dirNames(t, dir); len(got) != 0 {
		t.Errorf("the check left checkpoints behind: %v\n%s", got, out.String())
	}
	if !untouched(t, e) {
		t.Errorf("the check left the policy at version %d, weights %v", version(t, e), e.Weights())
	}

	// An old endpoint over HTTP: SKIP, not a failure; its checkpoints stay.
	oldDir := t.TempDir()
	old := newEmbeddedAt(t, oldDir)
	srv := httptest.NewServer(trainer.NewHandler(onlyPolicy{old, old}, ""))
	defer srv.Close()
	out.Reset()
	ok, err = Check(ctx, quietClient(srv.URL, ""), &out)
	if err != nil || !ok {
		t.Fatalf("check of an endpoint without delete failed (%v):\n%s", err, out.String())
	}
	for _, want := range []string{"SKIP  delete: endpoint does not support delete", "16/16 properties passed (1 skipped)\n", "NOTE  restored the starting policy"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "FAIL") || strings.Contains(out.String(), "deleted the check's") {
		t.Errorf("unexpected output:\n%s", out.String())
	}
	if got := len(dirNames(t, oldDir)); got != 4 { // -start, -saved, -runid and -wd
		t.Errorf("%d checkpoints kept by an endpoint without delete, want 4", got)
	}
	if v := version(t, old); v != 0 {
		t.Errorf("check left the old endpoint at version %d", v)
	}

	// In-process policy that advertises delete but does not implement it.
	np := newTestEmbedded(t)
	out.Reset()
	if ok, _ := Check(ctx, onlyPolicy{np, np}, &out); !ok || !strings.Contains(out.String(), "SKIP  delete: endpoint does not support delete") {
		t.Errorf("advertised but not implemented:\n%s", out.String())
	}

	// Broken deletes fail the property with the reason.
	for _, tc := range []struct {
		p    trainer.Policy
		want string
	}{
		{lyingDeleter{newTestEmbedded(t)}, "still listed after delete"},
		{strictDeleter{newTestEmbedded(t)}, "delete of a missing checkpoint must not be an error"},
		{versionBumper{newTestEmbedded(t)}, "want name"},
	} {
		out.Reset()
		ok, err := Check(ctx, tc.p, &out)
		if err != nil || ok || !strings.Contains(out.String(), "FAIL  delete: ") || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%T: ok %v err %v, want FAIL delete with %q:\n%s", tc.p, ok, err, tc.want, out.String())
		}
		if !strings.Contains(out.String(), "NOTE  restored the starting policy") {
			t.Errorf("%T: starting policy not restored:\n%s", tc.p, out.String())
		}
	}
}

// Endpoints that ignore the new fields, or set no limits, fail the check.
type versionIgnorer struct{ *embedded.Policy }

func (v versionIgnorer) Sample(ctx context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	req.ExpectedPolicyVersion = nil
	return v.Policy.Sample(ctx, req)
}

func (v versionIgnorer) GRPOStep(ctx context.Context, req trainer.GRPORequest) (trainer.GRPOResponse, error) {
	req.ExpectedPolicyVersion = nil
	return v.Policy.GRPOStep(ctx, req)
}

type runIDIgnorer struct{ *embedded.Policy }

func (r runIDIgnorer) Load(ctx context.Context, req trainer.LoadRequest) (trainer.LoadResponse, error) {
	req.ExpectedRunID = ""
	return r.Policy.Load(ctx, req)
}

type unlimited struct{ *embedded.Policy }

func (u unlimited) Info(ctx context.Context) (trainer.Info, error) {
	info, err := u.Policy.Info(ctx)
	info.Limits.MaxN = 0
	return info, err
}

type limitIgnorer struct{ *embedded.Policy }

func (l limitIgnorer) SFTStep(ctx context.Context, req trainer.SFTRequest) (trainer.SFTResponse, error) {
	if len(req.Examples) > trainer.DefaultEmbeddedConfig().MaxBatch {
		req.Examples = req.Examples[:1] // "handles" the batch
	}
	return l.Policy.SFTStep(ctx, req)
}

func TestCheckDetectsIntegrityViolations(t *testing.T) {
	for _, tc := range []struct {
		p    trainer.Policy
		want string
	}{
		{versionIgnorer{newTestEmbedded(t)}, "FAIL  version_precondition: sample with expected_policy_version"},
		{runIDIgnorer{newTestEmbedded(t)}, "FAIL  checkpoint_run_id: load of run"},
		{unlimited{newTestEmbedded(t)}, "FAIL  limits: info.limits.max_n is 0 (no limit)"},
		{limitIgnorer{newTestEmbedded(t)}, "FAIL  limits: sft_step with 8193 examples beyond info.limits"},
	} {
		var out bytes.Buffer
		ok, err := Check(context.Background(), tc.p, &out)
		if err != nil || ok || !strings.Contains(out.String(), tc.want) {
			t.Errorf("%T: ok %v err %v, want %q:\n%s", tc.p, ok, err, tc.want, out.String())
		}
	}
}

// zeroAsDefault reads a present clip_low 0 as the default 0.2, as the
// protocol's servers did before "0 is a value".
type zeroAsDefault struct{ *embedded.Policy }

func (z zeroAsDefault) GRPOStep(ctx context.Context, req trainer.GRPORequest) (trainer.GRPOResponse, error) {
	if req.Loss.ClipLow != nil && *req.Loss.ClipLow == 0 {
		req.Loss.ClipLow = nil
	}
	return z.Policy.GRPOStep(ctx, req)
}

func TestCheckDetectsClipLowZeroAsDefault(t *testing.T) {
	var out bytes.Buffer
	ok, err := Check(context.Background(), zeroAsDefault{newTestEmbedded(t)}, &out)
	if err != nil || ok || !strings.Contains(out.String(), "FAIL  clip_low_zero: ratios ≥ 0.9 with advantage −1 gave clip_frac_low 0 with clip_low 0.2 (want 0) and 0 with clip_low 0") {
		t.Errorf("ok %v err %v, want clip_low_zero to fail:\n%s", ok, err, out.String())
	}
}

// resetIgnorer advertises optimizer_reset but drops the request's flag, as
// an endpoint that claims the capability and keeps SFT's optimizer state.
type resetIgnorer struct{ *embedded.Policy }

func (r resetIgnorer) GRPOStep(ctx context.Context, req trainer.GRPORequest) (trainer.GRPOResponse, error) {
	req.ResetOptimizer = false
	return r.Policy.GRPOStep(ctx, req)
}

func TestCheckOptimizerReset(t *testing.T) {
	ctx := context.Background()
	var out bytes.Buffer
	ok, err := Check(ctx, resetIgnorer{newEmbeddedAt(t, t.TempDir())}, &out)
	if err != nil || ok || !strings.Contains(out.String(), "FAIL  optimizer_reset:") {
		t.Fatalf("an endpoint that ignores reset_optimizer (%v, %v), want FAIL optimizer_reset:\n%s", ok, err, out.String())
	}
	if strings.Count(out.String(), "FAIL") != 1 {
		t.Errorf("only optimizer_reset should fail:\n%s", out.String())
	}
}
