package trainer

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/fielderr"
)

// decodeLoss reads a request's loss object as an endpoint does.
func decodeLoss(t *testing.T, raw string) LossConfig {
	t.Helper()
	var req GRPORequest
	if err := json.Unmarshal([]byte(`{"step_id": "s", "loss": `+raw+`}`), &req); err != nil {
		t.Fatal(err)
	}
	return req.Loss
}

// TestLossDefaults: an absent and a null field take PROTOCOL.md's default;
// the table here is the documented one, written out by hand.
func TestLossDefaults(t *testing.T) {
	want := ResolvedLoss{Type: "grpo", ClipLow: 0.2, ClipHigh: 0.2, KLCoef: 0, KLEstimator: "k3", ClipRatioC: 0, Mu: 1,
		MaxGradNorm: 1, LearningRate: 0.1, WeightDecay: 0, MaxLength: 0, Temperature: 1}
	for _, raw := range []string{
		`{"learning_rate": 0.1}`,
		`{"learning_rate": 0.1, "type": null, "clip_low": null, "clip_high": null, "kl_coef": null, "kl_estimator": null,
		  "clip_ratio_c": null, "mu": null, "max_grad_norm": null, "weight_decay": null, "max_length": null, "temperature": null}`,
	} {
		got, err := decodeLoss(t, raw).Resolve()
		if err != nil || got != want {
			t.Errorf("%s resolved to %+v, %v; want %+v", raw, got, err, want)
		}
	}
	// clip_high's default follows clip_low.
	if got, err := decodeLoss(t, `{"learning_rate": 0.1, "clip_low": 0.1}`).Resolve(); err != nil || got.ClipHigh != 0.1 {
		t.Errorf("clip_high with clip_low 0.1: %v, %v; want 0.1", got.ClipHigh, err)
	}
}

// TestLossZeroIsLiteral: a given 0 is a value, never "the default".
func TestLossZeroIsLiteral(t *testing.T) {
	got, err := decodeLoss(t, `{"learning_rate": 0.1, "clip_low": 0, "clip_high": 0, "kl_coef": 0, "clip_ratio_c": 0,
		"max_grad_norm": 0, "weight_decay": 0, "max_length": 0}`).Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if got.ClipLow != 0 || got.ClipHigh != 0 {
		t.Errorf("clip_low 0, clip_high 0 resolved to %v, %v", got.ClipLow, got.ClipHigh)
	}
	// clip_high 0 stays 0 also when clip_low is set (it is not "= clip_low").
	if got, _ := decodeLoss(t, `{"learning_rate": 0.1, "clip_low": 0.3, "clip_high": 0}`).Resolve(); got.ClipHigh != 0 {
		t.Errorf("clip_high 0 with clip_low 0.3 resolved to %v", got.ClipHigh)
	}
	// Where 0 is outside the range, a given 0 is refused, not defaulted.
	for field, raw := range map[string]string{
		"mu":            `{"learning_rate": 0.1, "mu": 0}`,
		"temperature":   `{"learning_rate": 0.1, "temperature": 0}`,
		"learning_rate": `{"learning_rate": 0}`,
	} {
		if _, err := decodeLoss(t, raw).Resolve(); ErrorCode(err) != CodeInvalidArgument || !strings.HasPrefix(err.Error(), "loss."+field+": ") {
			t.Errorf("%s: got %v, want invalid_argument naming loss.%s", raw, err, field)
		}
	}
}

// TestLossWireBytes: the Go client's loss object carries every field with
// its value, zeros included (the byte string is the contract, written out).
func TestLossWireBytes(t *testing.T) {
	l, err := LossConfig{LearningRate: new(0.001), ClipLow: new(0.0), Temperature: new(0.7), MaxLength: new(64)}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(LossConfigOf(l))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"grpo","clip_low":0,"clip_high":0,"kl_coef":0,"kl_estimator":"k3","clip_ratio_c":0,"mu":1,` +
		`"max_grad_norm":1,"learning_rate":0.001,"weight_decay":0,"max_length":64,"temperature":0.7}`
	if string(raw) != want {
		t.Errorf("wire loss\n got %s\nwant %s", raw, want)
	}
	// What is sent resolves to itself.
	if back, err := decodeLoss(t, string(raw)).Resolve(); err != nil || back != l {
		t.Errorf("round trip: %+v, %v; want %+v", back, err, l)
	}
}

// TestLossErrorsNameTheField: every invalid value is refused with the
// protocol's code and a message naming loss.FIELD, and the error carries the
// field for a config error's path.
func TestLossErrorsNameTheField(t *testing.T) {
	lr := new(1.0)
	for _, c := range []struct {
		lc    LossConfig
		field string
	}{
		{LossConfig{}, "learning_rate"},
		{LossConfig{LearningRate: new(math.NaN())}, "learning_rate"},
		{LossConfig{LearningRate: lr, ClipLow: new(1.0)}, "clip_low"},
		{LossConfig{LearningRate: lr, ClipLow: new(-0.1)}, "clip_low"},
		{LossConfig{LearningRate: lr, ClipHigh: new(-1.0)}, "clip_high"},
		{LossConfig{LearningRate: lr, KLCoef: new(-1.0)}, "kl_coef"},
		{LossConfig{LearningRate: lr, KLEstimator: new("k2")}, "kl_estimator"},
		{LossConfig{LearningRate: lr, KLEstimator: new("")}, "kl_estimator"},
		{LossConfig{LearningRate: lr, ClipRatioC: new(1.0)}, "clip_ratio_c"},
		{LossConfig{LearningRate: lr, ClipRatioC: new(math.Inf(1))}, "clip_ratio_c"},
		{LossConfig{LearningRate: lr, Mu: new(-2)}, "mu"},
		{LossConfig{LearningRate: lr, MaxGradNorm: new(-1.0)}, "max_grad_norm"},
		{LossConfig{LearningRate: lr, WeightDecay: new(-0.1)}, "weight_decay"},
		{LossConfig{LearningRate: lr, MaxLength: new(-1)}, "max_length"},
		{LossConfig{LearningRate: lr, Temperature: new(-1.0)}, "temperature"},
	} {
		_, err := c.lc.Resolve()
		var fe *fielderr.Error
		if ErrorCode(err) != CodeInvalidArgument || !strings.HasPrefix(err.Error(), "loss."+c.field+": ") ||
			!errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: got %v, want invalid_argument naming loss.%s", c.field, err, c.field)
		}
	}
	_, err := LossConfig{LearningRate: lr, Type: new("x")}.Resolve()
	var fe *fielderr.Error
	if ErrorCode(err) != CodeUnknownLossType || !strings.HasPrefix(err.Error(), "unknown loss type 'x' (") ||
		!errors.As(err, &fe) || fe.Field != "type" {
		t.Errorf("unknown type: got %v", err)
	}
	if _, err := (LossConfig{LearningRate: lr, Type: new("")}).Resolve(); ErrorCode(err) != CodeUnknownLossType {
		t.Errorf("empty type: got %v, want unknown_loss_type", err)
	}
}
