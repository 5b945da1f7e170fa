package embedded

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/trainer"
)

// checkpointFormat identifies embedded-policy checkpoint files. Format /2
// adds the run id and a checksum; /1 files (no checksum) still load.
const (
	checkpointFormat   = "himes-embedded-policy/2"
	checkpointFormatV1 = "himes-embedded-policy/1"
)

// checkpointFile is the on-disk form of policyState. encoding/json writes
// float64s in their shortest round-trip form, so a load restores them bit
// for bit.
type checkpointFile struct {
	Format        string    `json:"format"`
	RunID         string    `json:"run_id,omitempty"`
	Features      []string  `json:"features"`
	CreatedAt     time.Time `json:"created_at"`
	PolicyVersion int64     `json:"policy_version"`
	Weights       []float64 `json:"weights"`
	AdamM         []float64 `json:"adam_m"`
	AdamV         []float64 `json:"adam_v"`
	AdamT         int64     `json:"adam_t"`
	Reference     []float64 `json:"reference"` // null before the first grpo_step
	// SampleOffset is the sampling offset δ (absent when 0, so files saved
	// before it existed keep their checksum and load with δ = 0).
	SampleOffset float64 `json:"sample_offset,omitempty"`
	// Checksum is "sha256:HEX" of the compact JSON encoding of every other
	// field (re-encoding the decoded values reproduces it exactly), so an
	// edited weight or version is caught even in a well-formed file.
	Checksum string `json:"checksum,omitempty"`
}

// checksum computes cf's Checksum field.
func (cf checkpointFile) checksum() (string, error) {
	cf.Checksum = ""
	b, err := json.Marshal(cf)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

var checkpointNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func checkName(name string) *trainer.Error {
	if !checkpointNameRe.MatchString(name) {
		return trainer.Invalidf("name: %q must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}", name)
	}
	return nil
}

func (e *Policy) checkpointPath(name string) string {
	return filepath.Join(e.cfg.CheckpointDir, name+".json")
}

// Save writes weights, Adam state, version and reference snapshot to
// CheckpointDir/NAME.json atomically.
func (e *Policy) Save(ctx context.Context, req trainer.SaveRequest) (trainer.SaveResponse, error) {
	if err := ctx.Err(); err != nil {
		return trainer.SaveResponse{}, err
	}
	if err := checkStepID(req.StepID); err != nil {
		return trainer.SaveResponse{}, err
	}
	if err := checkName(req.Name); err != nil {
		return trainer.SaveResponse{}, err
	}
	if err := checkExpectedArg(req.ExpectedPolicyVersion); err != nil {
		return trainer.SaveResponse{}, err
	}
	if len(req.RunID) > 256 {
		return trainer.SaveResponse{}, trainer.Invalidf("run_id: %d bytes, at most 256", len(req.RunID))
	}
	hash, err := requestHash(trainer.SaveRequest{Name: req.Name, RunID: req.RunID, ExpectedPolicyVersion: req.ExpectedPolicyVersion})
	if err != nil {
		return trainer.SaveResponse{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if prev, perr := e.steps.lookup(req.StepID, "save", hash); perr != nil {
		return trainer.SaveResponse{}, perr
	} else if prev != nil {
		r := prev.(trainer.SaveResponse)
		r.Replayed = true
		return r, nil
	}
	st := e.st
	if err := checkExpected(req.ExpectedPolicyVersion, st.version); err != nil {
		return trainer.SaveResponse{}, err
	}
	cf := checkpointFile{
		Format: checkpointFormat, RunID: req.RunID, Features: featureNames[:], CreatedAt: time.Now().UTC(),
		PolicyVersion: st.version, Weights: st.w, AdamM: st.m, AdamV: st.v, AdamT: st.t, Reference: st.ref,
		SampleOffset: st.offset,
	}
	if cf.Checksum, err = cf.checksum(); err != nil {
		return trainer.SaveResponse{}, fmt.Errorf("checksum checkpoint %s: %w", req.Name, err)
	}
	raw, err := json.MarshalIndent(cf, "", " ")
	if err != nil {
		return trainer.SaveResponse{}, fmt.Errorf("encode checkpoint %s: %w", req.Name, err)
	}
	path := e.checkpointPath(req.Name)
	if err := atomicfile.WriteFile(path, raw, 0o644); err != nil {
		return trainer.SaveResponse{}, trainer.NewError(trainer.CodeInternal, "save checkpoint %s: %v", req.Name, err)
	}
	res := trainer.SaveResponse{Name: req.Name, PolicyVersion: st.version, SizeBytes: int64(len(raw))}
	e.steps.store(req.StepID, "save", hash, res)
	return res, nil
}

// Load restores a checkpoint written by Save, exactly.
func (e *Policy) Load(ctx context.Context, req trainer.LoadRequest) (trainer.LoadResponse, error) {
	if err := ctx.Err(); err != nil {
		return trainer.LoadResponse{}, err
	}
	if err := checkStepID(req.StepID); err != nil {
		return trainer.LoadResponse{}, err
	}
	if err := checkName(req.Name); err != nil {
		return trainer.LoadResponse{}, err
	}
	hash, err := requestHash(trainer.LoadRequest{Name: req.Name, ExpectedRunID: req.ExpectedRunID})
	if err != nil {
		return trainer.LoadResponse{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if prev, perr := e.steps.lookup(req.StepID, "load", hash); perr != nil {
		return trainer.LoadResponse{}, perr
	} else if prev != nil {
		r := prev.(trainer.LoadResponse)
		r.Replayed = true
		return r, nil
	}
	cf, perr := readCheckpoint(e.checkpointPath(req.Name))
	if perr != nil {
		return trainer.LoadResponse{}, perr
	}
	// A checkpoint saved without a run id (format /1, or a save without
	// run_id) cannot be verified; the caller sees run_id "" in the response.
	if req.ExpectedRunID != "" && cf.RunID != "" && cf.RunID != req.ExpectedRunID {
		return trainer.LoadResponse{}, trainer.NewError(trainer.CodeRunMismatch, "checkpoint %q was saved by run %q, not %q (expected_run_id); the policy is unchanged",
			req.Name, cf.RunID, req.ExpectedRunID)
	}
	e.st = policyState{w: cf.Weights, m: cf.AdamM, v: cf.AdamV, t: cf.AdamT, version: cf.PolicyVersion, ref: cf.Reference, offset: cf.SampleOffset}
	res := trainer.LoadResponse{Name: req.Name, PolicyVersion: cf.PolicyVersion, RunID: cf.RunID}
	e.steps.store(req.StepID, "load", hash, res)
	return res, nil
}

// Delete removes the checkpoint Name from CheckpointDir. A checkpoint is one
// file, and removing it is a single unlink, so a reader sees the whole
// checkpoint or none of it; a file under the name that Load would refuse
// (damaged) is removed too. Deleted is false when there was nothing to
// remove. The policy and its version are never touched.
func (e *Policy) Delete(ctx context.Context, req trainer.DeleteRequest) (trainer.DeleteResponse, error) {
	if err := ctx.Err(); err != nil {
		return trainer.DeleteResponse{}, err
	}
	if err := checkStepID(req.StepID); err != nil {
		return trainer.DeleteResponse{}, err
	}
	if err := checkName(req.Name); err != nil {
		return trainer.DeleteResponse{}, err
	}
	hash, err := requestHash(trainer.DeleteRequest{Name: req.Name})
	if err != nil {
		return trainer.DeleteResponse{}, err
	}
	// The write lock orders the delete with saves and loads of the same name.
	e.mu.Lock()
	defer e.mu.Unlock()
	if prev, perr := e.steps.lookup(req.StepID, "delete", hash); perr != nil {
		return trainer.DeleteResponse{}, perr
	} else if prev != nil {
		r := prev.(trainer.DeleteResponse)
		r.Replayed = true
		return r, nil
	}
	path := e.checkpointPath(req.Name)
	deleted := true
	if err := os.Remove(path); errors.Is(err, fs.ErrNotExist) {
		deleted = false
	} else if err != nil {
		return trainer.DeleteResponse{}, trainer.NewError(trainer.CodeInternal, "delete checkpoint %s: %v", req.Name, err)
	}
	// Temporary files of saves that crashed before their rename; Save holds
	// the lock while its own exists, so none of these is in use. The name
	// has no glob metacharacters (checkName).
	if tmps, err := filepath.Glob(filepath.Join(e.cfg.CheckpointDir, "."+req.Name+".json.tmp-*")); err == nil {
		for _, t := range tmps {
			_ = os.Remove(t) // best effort: they are never listed or loaded
		}
	}
	if deleted {
		atomicfile.SyncDir(e.cfg.CheckpointDir)
	}
	res := trainer.DeleteResponse{Name: req.Name, Deleted: deleted, PolicyVersion: e.st.version}
	e.steps.store(req.StepID, "delete", hash, res)
	return res, nil
}

// readCheckpoint reads and validates one checkpoint file.
func readCheckpoint(path string) (checkpointFile, *trainer.Error) {
	var cf checkpointFile
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cf, trainer.NewError(trainer.CodeNotFound, "checkpoint %q not found (%s)", strings.TrimSuffix(filepath.Base(path), ".json"), path)
	}
	if err != nil {
		return cf, trainer.NewError(trainer.CodeInternal, "read checkpoint: %v", err)
	}
	if err := json.Unmarshal(raw, &cf); err != nil {
		return cf, trainer.NewError(trainer.CodeCheckpointCorrupt, "checkpoint %s: %v", path, err)
	}
	bad := func(field, format string, args ...any) *trainer.Error {
		return trainer.NewError(trainer.CodeCheckpointCorrupt, "checkpoint %s: field %s: %s", path, field, fmt.Sprintf(format, args...))
	}
	if cf.Format == checkpointFormat || cf.Checksum != "" {
		want, err := cf.checksum()
		if err != nil {
			return cf, bad("checksum", "%v", err)
		}
		if cf.Checksum != want {
			return cf, bad("checksum", "%q does not match the content (%s): the file was modified or damaged; refusing to load it",
				cf.Checksum, want)
		}
	}
	n := len(cf.Features)
	switch {
	case cf.Format != checkpointFormat && cf.Format != checkpointFormatV1:
		return cf, bad("format", "%q, want %q", cf.Format, checkpointFormat)
	case !featuresCompatible(cf.Features):
		return cf, bad("features", "%v do not match this build's %v", cf.Features, featureNames)
	case len(cf.Weights) != n:
		return cf, bad("weights", "%d values, want %d", len(cf.Weights), n)
	case len(cf.AdamM) != n:
		return cf, bad("adam_m", "%d values, want %d", len(cf.AdamM), n)
	case len(cf.AdamV) != n:
		return cf, bad("adam_v", "%d values, want %d", len(cf.AdamV), n)
	case cf.Reference != nil && len(cf.Reference) != n:
		return cf, bad("reference", "%d values, want %d or null", len(cf.Reference), n)
	case cf.AdamT < 0 || cf.PolicyVersion < 0:
		return cf, bad("adam_t/policy_version", "must be ≥ 0")
	}
	// A checkpoint from before the zero-compatible features gets them with
	// weight (and moments) 0: the same policy.
	pad := func(x []float64) []float64 {
		if x == nil {
			return nil
		}
		return append(x, make([]float64, numFeatures-n)...)
	}
	cf.Weights, cf.AdamM, cf.AdamV, cf.Reference = pad(cf.Weights), pad(cf.AdamM), pad(cf.AdamV), pad(cf.Reference)
	return cf, nil
}

// zeroCompatible are the trailing features with which a policy whose weight
// for them is 0 behaves exactly like the build before them, so a checkpoint
// of that build loads: from_memory is 0 for every candidate of a prompt
// without memories, and such prompts have the same candidates as before.
var zeroCompatible = map[string]bool{"from_memory": true}

// featuresCompatible reports whether a checkpoint with these features
// loads: this build's feature list, or a prefix of it lacking only
// zero-compatible features.
func featuresCompatible(fs []string) bool {
	if len(fs) > numFeatures || strings.Join(fs, ",") != strings.Join(featureNames[:len(fs)], ",") {
		return false
	}
	for _, f := range featureNames[len(fs):] {
		if !zeroCompatible[f] {
			return false
		}
	}
	return true
}

// Checkpoints lists the checkpoints in CheckpointDir, sorted by name.
func (e *Policy) Checkpoints(ctx context.Context) ([]trainer.CheckpointInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(e.cfg.CheckpointDir)
	if errors.Is(err, fs.ErrNotExist) {
		return []trainer.CheckpointInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	out := []trainer.CheckpointInfo{}
	for _, ent := range ents {
		name, ok := strings.CutSuffix(ent.Name(), ".json")
		if !ok || ent.IsDir() || !checkpointNameRe.MatchString(name) {
			continue
		}
		cf, perr := readCheckpoint(filepath.Join(e.cfg.CheckpointDir, ent.Name()))
		if perr != nil {
			continue // not one of ours, or damaged: list only what load would accept
		}
		fi, err := ent.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted since it was read (the list does not take the lock)
		}
		if err != nil {
			return nil, fmt.Errorf("list checkpoints: %w", err)
		}
		out = append(out, trainer.CheckpointInfo{Name: name, PolicyVersion: cf.PolicyVersion, CreatedAt: cf.CreatedAt, SizeBytes: fi.Size(), RunID: cf.RunID})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
