// Package tinygguf writes a tiny random-weight llama-architecture GGUF model
// (about 600 KB) that a real Ollama server loads in a fraction of a second.
// Models cannot be pulled in tests or CI, so the integration tests create
// this one with `ollama create`. Its output is gibberish: it exercises the
// plumbing (chat, embed, options, scheduling), not answer quality.
package tinygguf

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/ollama/ollama/fs/ggml"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// Options shape the model; zero fields take the defaults.
type Options struct {
	Seed   uint64
	Embd   int // embedding width (default 64)
	Layers int // transformer blocks (default 2)
	Heads  int // attention heads (default 4)
	FF     int // feed-forward width (default 128)
	Ctx    int // trained context length (default 4096)
}

func (o *Options) defaults() {
	if o.Embd == 0 {
		o.Embd = 64
	}
	if o.Layers == 0 {
		o.Layers = 2
	}
	if o.Heads == 0 {
		o.Heads = 4
	}
	if o.FF == 0 {
		o.FF = 128
	}
	if o.Ctx == 0 {
		o.Ctx = 4096
	}
}

// SentencePiece token types as llama.cpp reads them.
const (
	typeNormal  = 1
	typeUnknown = 2
	typeControl = 3
	typeByte    = 6
)

// vocab is a SentencePiece ("llama") vocabulary: <unk>, <s>, </s>, the 256
// byte-fallback tokens (so any text tokenizes), then a few word pieces.
func vocab() (tokens []string, scores []float32, types []int32) {
	add := func(t string, s float32, ty int32) {
		tokens, scores, types = append(tokens, t), append(scores, s), append(types, ty)
	}
	add("<unk>", 0, typeUnknown)
	add("<s>", 0, typeControl)
	add("</s>", 0, typeControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, typeByte)
	}
	add("▁", -1, typeNormal)
	for c := 'a'; c <= 'z'; c++ {
		add(string(c), -2, typeNormal)
		add("▁"+string(c), -3, typeNormal)
	}
	for i, w := range []string{"the", "of", "and", "to", "in", "is", "was", "what", "when", "who", "answer", "question", "passage"} {
		add("▁"+w, -4-float32(i)/100, typeNormal)
	}
	return tokens, scores, types
}

// f32 is a tensor of random float32 weights drawn from N(0, std²).
type f32 []float32

func (t f32) WriteTo(w io.Writer) (int64, error) {
	if err := binary.Write(w, binary.LittleEndian, []float32(t)); err != nil {
		return 0, err
	}
	return int64(4 * len(t)), nil
}

// Write writes the model to path (atomically: temp file, then rename).
func Write(path string, o Options) error {
	o.defaults()
	if o.Embd%o.Heads != 0 {
		return fmt.Errorf("tinygguf: embd %d not divisible by heads %d", o.Embd, o.Heads)
	}
	tokens, scores, types := vocab()
	nv := len(tokens)
	kv := ggml.KV{
		"general.architecture":                   "llama",
		"general.name":                           "himes-tiny",
		"general.file_type":                      uint32(0), // all F32
		"llama.context_length":                   uint32(o.Ctx),
		"llama.embedding_length":                 uint32(o.Embd),
		"llama.block_count":                      uint32(o.Layers),
		"llama.feed_forward_length":              uint32(o.FF),
		"llama.attention.head_count":             uint32(o.Heads),
		"llama.attention.head_count_kv":          uint32(o.Heads),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"llama.rope.dimension_count":             uint32(o.Embd / o.Heads),
		"llama.vocab_size":                       uint32(nv),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.tokens":                  tokens,
		"tokenizer.ggml.scores":                  scores,
		"tokenizer.ggml.token_type":              types,
		"tokenizer.ggml.unknown_token_id":        uint32(0),
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(2),
		"tokenizer.ggml.add_bos_token":           true,
		"tokenizer.ggml.add_eos_token":           false,
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x7f4a7c15))
	// Shapes are in row-major order (rows, cols); the writer reverses them
	// into GGUF's ne order.
	tensor := func(name string, std float64, shape ...uint64) *ggml.Tensor {
		n := uint64(1)
		for _, s := range shape {
			n *= s
		}
		data := make(f32, n)
		for i := range data {
			if std == 0 {
				data[i] = 1 // norm weights
			} else {
				data[i] = float32(rng.NormFloat64() * std)
			}
		}
		return &ggml.Tensor{Name: name, Kind: 0, Shape: shape, WriterTo: data}
	}
	e, ff, v := uint64(o.Embd), uint64(o.FF), uint64(nv)
	ts := []*ggml.Tensor{
		tensor("token_embd.weight", 0.5, v, e),
		tensor("output_norm.weight", 0, e),
		tensor("output.weight", 0.5, v, e),
	}
	for l := range o.Layers {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			tensor(p+"attn_norm.weight", 0, e),
			tensor(p+"attn_q.weight", 0.1, e, e),
			tensor(p+"attn_k.weight", 0.1, e, e),
			tensor(p+"attn_v.weight", 0.1, e, e),
			tensor(p+"attn_output.weight", 0.1, e, e),
			tensor(p+"ffn_norm.weight", 0, e),
			tensor(p+"ffn_gate.weight", 0.1, ff, e),
			tensor(p+"ffn_up.weight", 0.1, ff, e),
			tensor(p+"ffn_down.weight", 0.1, e, ff),
		)
	}
	list := make([]ggml.Tensor, len(ts))
	for i, t := range ts {
		list[i] = *t
	}

	// GGUF's writer seeks back to fill in offsets: atomicfile hands it the
	// temporary file itself.
	err := atomicfile.Write(path, 0o644, func(w io.Writer) error { return ggml.WriteGGUF(w.(io.WriteSeeker), kv, list) })
	if err != nil {
		return fmt.Errorf("tinygguf: %w", err)
	}
	return nil
}
