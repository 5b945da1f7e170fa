// Package trainer is the contract between the harness and whatever holds the
// policy: the JSON-over-HTTP trainer endpoint protocol (PROTOCOL.md), its
// types and errors, its Go client, an http.Handler and server that serve the
// protocol for any Policy, and the "trainer" config section. The embedded
// pure-Go policy is trainer/embedded; the conformance check is
// trainer/conformance.
package trainer

import (
	"context"
	"fmt"
	"time"

	"github.com/himes-rl/himes/rlcore"
)

// ProtocolVersion is the protocol version this package speaks.
const ProtocolVersion = 1

// Loss types of grpo_step (PROTOCOL.md, "POST /v1/grpo_step"); rlcore
// defines them.
const (
	LossGRPO   = rlcore.LossGRPO
	LossBNPO   = rlcore.LossBNPO
	LossDAPO   = rlcore.LossDAPO
	LossDrGRPO = rlcore.LossDrGRPO
)

// LossTypes returns every loss type the protocol defines.
func LossTypes() []string { return rlcore.LossTypes() }

// KL estimators of grpo_step's loss.kl_estimator: rlcore's built-ins.
const (
	// KLK3 is the k3 estimator exp(π_ref − π) − (π_ref − π) − 1 (the default).
	KLK3 = rlcore.KLK3
	// KLLowVar is verl's low_var_kl: k3 of the log-ratio clamped to
	// [−20, 20], then clamped to [−10, 10] (no gradient where clamped).
	KLLowVar = rlcore.KLLowVar
)

// KLEstimators returns every KL estimator the protocol defines (the
// registered ones of rlcore.DefaultRegistry, sorted).
func KLEstimators() []string { return rlcore.DefaultRegistry().KLEstimators() }

// Message is one chat message.
type Message struct {
	Role    string `json:"role"` // system, user or assistant
	Content string `json:"content"`
}

// Dialogue is the structured context of a rewrite prompt; the embedded policy
// needs it, LLM endpoints may ignore it.
type Dialogue struct {
	History  []Message `json:"history"`
	Question string    `json:"question"`
	// Memories are the user's activated long-term memories, best first,
	// when the harness hands them to the rewriter (data.prompt.memories);
	// absent otherwise.
	Memories []DialogueMemory `json:"memories,omitempty"`
}

// DialogueMemory is one activated memory of a Dialogue.
type DialogueMemory struct {
	ID    string  `json:"id"`
	Text  string  `json:"text"`
	Score float64 `json:"score"`
}

// Prompt is one prompt: rendered text, chat messages, and/or structured context.
type Prompt struct {
	ID       string    `json:"id,omitempty"`
	Text     string    `json:"text,omitempty"`
	Messages []Message `json:"messages,omitempty"`
	Dialogue *Dialogue `json:"dialogue,omitempty"`
}

// SampleRequest asks for N samples of each prompt.
type SampleRequest struct {
	Prompts     []Prompt `json:"prompts"`
	N           int      `json:"n"`
	Temperature float64  `json:"temperature"`
	TopP        float64  `json:"top_p,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Stop        []string `json:"stop,omitempty"`
	Seed        int64    `json:"seed"`
	// ExpectedPolicyVersion, when set, is a precondition: the endpoint
	// refuses the call with version_mismatch unless its policy is at this
	// version (PROTOCOL.md, "Policy version").
	ExpectedPolicyVersion *int64 `json:"expected_policy_version,omitempty"`
}

// Sample is one sampled completion with its tokens and their logprobs.
type Sample struct {
	PromptIndex   int       `json:"prompt_index"`
	SampleIndex   int       `json:"sample_index"`
	Text          string    `json:"text"`
	TokenIDs      []int     `json:"token_ids"`
	Logprobs      []float64 `json:"logprobs"`
	FinishReason  string    `json:"finish_reason"`
	PolicyVersion int64     `json:"policy_version"`
}

// SampleResponse holds len(Prompts)×N samples in (prompt, sample) order.
type SampleResponse struct {
	Samples       []Sample `json:"samples"`
	PolicyVersion int64    `json:"policy_version"`
}

// LogprobsItem is a completion (as token ids) to score under the current policy.
type LogprobsItem struct {
	Prompt   Prompt `json:"prompt"`
	TokenIDs []int  `json:"token_ids"`
}

// LogprobsRequest scores completions; Temperature 0 means 1.
type LogprobsRequest struct {
	Items       []LogprobsItem `json:"items"`
	Temperature float64        `json:"temperature,omitempty"`
}

// LogprobsResponse has one logprob list per item.
type LogprobsResponse struct {
	Logprobs      [][]float64 `json:"logprobs"`
	PolicyVersion int64       `json:"policy_version"`
}

// SFTExample is a (prompt, completion) pair; for rewriting, the completion is
// the human rewrite.
type SFTExample struct {
	Prompt     Prompt `json:"prompt"`
	Completion string `json:"completion"`
}

// SFTRequest is one supervised update.
type SFTRequest struct {
	StepID       string       `json:"step_id"`
	Examples     []SFTExample `json:"examples"`
	LearningRate float64      `json:"learning_rate"`
	Epochs       int          `json:"epochs,omitempty"`        // 0 → 1
	MaxGradNorm  float64      `json:"max_grad_norm,omitempty"` // 0 → no clipping
	// ExpectedPolicyVersion: see SampleRequest.
	ExpectedPolicyVersion *int64 `json:"expected_policy_version,omitempty"`
	// WeightDecay is AdamW's decoupled λ (0 → the endpoint's default, 0 for
	// the embedded policy); honoured only with capabilities.weight_decay.
	WeightDecay float64 `json:"weight_decay,omitempty"`
}

// SFTResponse reports the loss of the forward pass that drove the update.
type SFTResponse struct {
	Loss          float64 `json:"loss"`
	Tokens        int     `json:"tokens"`
	GradNorm      float64 `json:"grad_norm"`
	PolicyVersion int64   `json:"policy_version"`
	Replayed      bool    `json:"replayed"`
}

// GRPOSample is one sampled completion with its advantage.
type GRPOSample struct {
	Prompt      Prompt    `json:"prompt"`
	TokenIDs    []int     `json:"token_ids"`
	OldLogprobs []float64 `json:"old_logprobs"`
	Advantage   float64   `json:"advantage"`
}

// GRPORequest is one policy-gradient update.
type GRPORequest struct {
	StepID  string       `json:"step_id"`
	Samples []GRPOSample `json:"samples"`
	Loss    LossConfig   `json:"loss"`
	// ExpectedPolicyVersion: see SampleRequest.
	ExpectedPolicyVersion *int64 `json:"expected_policy_version,omitempty"`
	// ResetOptimizer makes the endpoint discard its optimizer state (Adam's
	// m, v and step count) before this update, as if freshly built: the
	// harness sets it on the first GRPO step after SFT (grpo.optimizer.reset)
	// so that SFT's moments do not shrink RL's steps. A replay of the same
	// step_id does not reset again. Only for an endpoint with
	// capabilities.optimizer_reset.
	ResetOptimizer bool `json:"reset_optimizer,omitempty"`
}

// GRPOResponse holds the step's metrics, means over the μ iterations.
type GRPOResponse struct {
	Loss         float64 `json:"loss"`
	KL           float64 `json:"kl"`
	ClipFracLow  float64 `json:"clip_frac_low"`
	ClipFracHigh float64 `json:"clip_frac_high"`
	// ClipFracDual is the fraction of tokens whose loss the dual clip capped
	// (A_i < 0 and r > c in effect; verl's pg_clipfrac_lower); 0 without it.
	ClipFracDual  float64 `json:"clip_frac_dual"`
	GradNorm      float64 `json:"grad_norm"`
	Entropy       float64 `json:"entropy"`
	Tokens        int     `json:"tokens"`
	PolicyVersion int64   `json:"policy_version"`
	Replayed      bool    `json:"replayed"`
	// WeightNorm (L2, the bias left out) and Bias describe the updated
	// weights of a policy small enough to have them (the embedded one);
	// absent otherwise.
	WeightNorm *float64 `json:"weight_norm,omitempty"`
	Bias       *float64 `json:"bias,omitempty"`
}

// SaveRequest saves the policy and optimizer state under Name.
type SaveRequest struct {
	StepID string `json:"step_id"`
	Name   string `json:"name"`
	// RunID is stored in the checkpoint's metadata, so that a load can
	// verify whose checkpoint it restores.
	RunID string `json:"run_id,omitempty"`
	// ExpectedPolicyVersion: see SampleRequest.
	ExpectedPolicyVersion *int64 `json:"expected_policy_version,omitempty"`
}

// SaveResponse confirms a save.
type SaveResponse struct {
	Name          string `json:"name"`
	PolicyVersion int64  `json:"policy_version"`
	SizeBytes     int64  `json:"size_bytes"`
	Replayed      bool   `json:"replayed"`
}

// LoadRequest restores the checkpoint Name.
type LoadRequest struct {
	StepID string `json:"step_id"`
	Name   string `json:"name"`
	// ExpectedRunID, when set, makes the endpoint refuse (run_mismatch) a
	// checkpoint saved with another run_id, leaving the policy unchanged.
	ExpectedRunID string `json:"expected_run_id,omitempty"`
}

// LoadResponse reports the restored policy version and the run_id the
// checkpoint was saved with ("" if none).
type LoadResponse struct {
	Name          string `json:"name"`
	PolicyVersion int64  `json:"policy_version"`
	RunID         string `json:"run_id,omitempty"`
	Replayed      bool   `json:"replayed"`
}

// DeleteRequest removes the checkpoint Name (POST /v1/delete).
type DeleteRequest struct {
	StepID string `json:"step_id"`
	Name   string `json:"name"`
}

// DeleteResponse reports whether a checkpoint was removed. Deleted is false
// when no checkpoint of that name existed: deletion is idempotent, not an
// error. PolicyVersion is the (unchanged) current version.
type DeleteResponse struct {
	Name          string `json:"name"`
	Deleted       bool   `json:"deleted"`
	PolicyVersion int64  `json:"policy_version"`
	Replayed      bool   `json:"replayed"`
}

// CheckpointInfo describes one saved checkpoint.
type CheckpointInfo struct {
	Name          string    `json:"name"`
	PolicyVersion int64     `json:"policy_version"`
	CreatedAt     time.Time `json:"created_at"`
	SizeBytes     int64     `json:"size_bytes"`
	RunID         string    `json:"run_id,omitempty"`
}

// Capabilities are the optional features of an endpoint.
type Capabilities struct {
	TopP     bool `json:"top_p"`
	Stop     bool `json:"stop"`
	Entropy  bool `json:"entropy"`
	Logprobs bool `json:"logprobs"`
	Auth     bool `json:"auth"`
	// Delete: the endpoint serves POST /v1/delete. Endpoints that predate it
	// omit the field (false) and answer 404 there.
	Delete bool `json:"delete"`
	// DualClip: the endpoint applies loss.clip_ratio_c. Endpoints that
	// predate it omit the field, and the Go client refuses to send them one.
	DualClip bool `json:"dual_clip"`
	// WeightDecay: the endpoint applies the requests' weight_decay (AdamW,
	// decoupled). Endpoints that predate it omit the field (false).
	WeightDecay bool `json:"weight_decay"`
	// KLMeasured: the grpo_step answer's kl is the KL to the reference
	// whatever loss.kl_coef is (a diagnostic when the coefficient is 0, not
	// a term of the loss). Absent = false: kl means something only when
	// kl_coef > 0.
	KLMeasured bool `json:"kl_measured"`
	// OptimizerReset: the endpoint honours grpo_step's reset_optimizer.
	// Endpoints that predate it omit the field (false), and the Go client
	// refuses to send them one.
	OptimizerReset bool `json:"optimizer_reset"`
}

// Limits are request-size limits of an endpoint, refused beyond with
// invalid_argument; 0 means no limit.
type Limits struct {
	MaxPrompts int `json:"max_prompts"`
	MaxN       int `json:"max_n"`
	MaxTokens  int `json:"max_tokens"`
	MaxBatch   int `json:"max_batch"`
}

// Info describes an endpoint.
type Info struct {
	ProtocolVersion int            `json:"protocol_version"`
	Implementation  string         `json:"implementation"`
	BaseModel       string         `json:"base_model"`
	Adapter         map[string]any `json:"adapter"`
	PolicyVersion   int64          `json:"policy_version"`
	Reference       string         `json:"reference"`
	LossTypes       []string       `json:"loss_types"`
	// KLEstimators lists the loss.kl_estimator values the endpoint applies;
	// an endpoint that predates the field applies only "k3".
	KLEstimators []string     `json:"kl_estimators,omitempty"`
	Capabilities Capabilities `json:"capabilities"`
	Limits       Limits       `json:"limits"`
	TokenKind    string       `json:"token_kind"`
}

// Policy is a trainer endpoint: the embedded policy, or a Client of a remote one.
type Policy interface {
	Info(ctx context.Context) (Info, error)
	Sample(ctx context.Context, req SampleRequest) (SampleResponse, error)
	SFTStep(ctx context.Context, req SFTRequest) (SFTResponse, error)
	GRPOStep(ctx context.Context, req GRPORequest) (GRPOResponse, error)
	Save(ctx context.Context, req SaveRequest) (SaveResponse, error)
	Load(ctx context.Context, req LoadRequest) (LoadResponse, error)
	Checkpoints(ctx context.Context) ([]CheckpointInfo, error)
}

// Scorer scores given completions under the current policy (POST
// /v1/logprobs). The embedded policy (trainer/embedded) and Client implement
// it; it is separate from Policy so that fakes of Policy need not.
type Scorer interface {
	Logprobs(ctx context.Context, req LogprobsRequest) (LogprobsResponse, error)
}

// Deleter removes a saved checkpoint (POST /v1/delete). The embedded policy
// and Client implement it; it is separate from Policy so that fakes of
// Policy need not.
// A Client implements it whatever the remote endpoint supports, so callers
// check Info().Capabilities.Delete first (AsDeleter does both).
type Deleter interface {
	Delete(ctx context.Context, req DeleteRequest) (DeleteResponse, error)
}

// AsDeleter returns p as a Deleter when p implements Deleter and its Info
// advertises capabilities.delete; ok is false otherwise (an endpoint that
// predates /v1/delete). err is only a failed Info call.
func AsDeleter(ctx context.Context, p Policy) (d Deleter, ok bool, err error) {
	d, ok = p.(Deleter)
	if !ok {
		return nil, false, nil
	}
	info, err := p.Info(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("trainer info (delete capability): %w", err)
	}
	if !info.Capabilities.Delete {
		return nil, false, nil
	}
	return d, true, nil
}

// Version returns a pointer to v, for the ExpectedPolicyVersion fields.
func Version(v int64) *int64 { return &v }
