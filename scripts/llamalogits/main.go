//go:build llamalogits

// Command llamalogits runs a GGUF model in the llama.cpp that Ollama v0.6.5
// serves it with (the github.com/ollama/ollama/llama cgo package of the
// module version in go.mod) and prints, for each prompt, the next-token
// logits after the prompt and the greedy continuation: what Ollama's HTTP API
// does not return. The settings are those of Ollama's llama.cpp runner: an F16
// KV cache (the only unquantized type Ollama 0.6.5 accepts), no flash
// attention, batches of 512.
//
// Behind a build tag, so that the normal build and `go vet ./...` stay
// cgo-free: it compiles llama.cpp (cached after the first build):
//
//	CGO_ENABLED=1 CGO_CFLAGS="-O3 -march=x86-64-v3" CGO_CXXFLAGS="-O3 -march=x86-64-v3" \
//	  go build -tags llamalogits -o llamalogits ./scripts/llamalogits
//	./llamalogits -model FILE.gguf < prompts.jsonl > out.jsonl
//
// Input: JSONL of {"prompt_ids": [...], "max_tokens": N} (the trainer's token
// ids of the rendered prompt, from python -m lora_trainer.export_gguf greedy
// --full-logits). Output: one line per prompt, {"tokens": [...], "first_logits": [...]}.
package main

/*
#include <stdint.h>
struct llama_context;
extern float * llama_get_logits_ith(struct llama_context * ctx, int32_t i);
*/
import "C"

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"unsafe"

	"github.com/ollama/ollama/llama"
)

type request struct {
	PromptIDs []int `json:"prompt_ids"`
	MaxTokens int   `json:"max_tokens"`
	// PromptText, when set, is tokenized by llama.cpp (special tokens parsed,
	// no BOS added: the rendered chat template carries its own), as Ollama's
	// runner tokenizes the prompt it rendered; the ids are printed and used.
	PromptText string `json:"prompt_text"`
}

type result struct {
	PromptIDs   []int     `json:"prompt_ids,omitempty"` // llama.cpp's tokens of prompt_text
	Tokens      []int     `json:"tokens"`
	FirstLogits []float32 `json:"first_logits"`
}

func main() {
	model := flag.String("model", "", "the GGUF file")
	threads := flag.Int("threads", 1, "threads")
	numCtx := flag.Int("ctx", 2048, "context length (Ollama's default num_ctx)")
	flag.Parse()
	if err := run(*model, *threads, *numCtx); err != nil {
		fmt.Fprintln(os.Stderr, "llamalogits:", err)
		os.Exit(1)
	}
}

func run(path string, threads, numCtx int) error {
	if path == "" {
		return fmt.Errorf("-model: is required")
	}
	llama.BackendInit()
	m, err := llama.LoadModelFromFile(path, llama.ModelParams{NumGpuLayers: 0, UseMmap: true})
	if err != nil {
		return fmt.Errorf("load %s: %w", path, err)
	}
	defer llama.FreeModel(m)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	ctx, err := llama.NewContextWithModel(m, llama.NewContextParams(numCtx, 512, 1, threads, false, "f16"))
	if err != nil {
		return fmt.Errorf("context: %w", err)
	}
	enc := json.NewEncoder(os.Stdout)
	for n := 1; in.Scan(); n++ {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			return fmt.Errorf("stdin line %d: %w", n, err)
		}
		if req.PromptText != "" {
			ids, err := m.Tokenize(req.PromptText, false, true)
			if err != nil {
				return fmt.Errorf("stdin line %d: prompt_text: %w", n, err)
			}
			req.PromptIDs = ids
		}
		if len(req.PromptIDs) == 0 {
			return fmt.Errorf("stdin line %d: prompt_ids: empty", n)
		}
		res, err := decode(ctx, m, req)
		if err != nil {
			return fmt.Errorf("stdin line %d: %w", n, err)
		}
		if req.PromptText != "" {
			res.PromptIDs = req.PromptIDs
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return in.Err()
}

// decode runs one prompt from an empty KV cache and clears it after.
func decode(ctx *llama.Context, m *llama.Model, req request) (result, error) {
	var res result
	ctx.KvCacheClear()
	defer ctx.KvCacheClear()
	// The llama_context pointer is the first field of llama.Context (v0.6.5), which has no logits accessor.
	cctx := (*struct{ c unsafe.Pointer })(unsafe.Pointer(ctx)).c
	nv := m.NumVocab()
	batch, err := llama.NewBatch(512, 1, 0)
	if err != nil {
		return res, err
	}
	defer batch.Free()
	pos := 0
	feed := func(ids []int) error {
		for start := 0; start < len(ids); start += 512 {
			batch.Clear()
			end := min(start+512, len(ids))
			for i := start; i < end; i++ {
				batch.Add(ids[i], nil, pos, i == len(ids)-1, 0)
				pos++
			}
			if err := ctx.Decode(batch); err != nil {
				return fmt.Errorf("decode at position %d: %w", pos, err)
			}
		}
		return nil
	}
	if err := feed(req.PromptIDs); err != nil {
		return res, err
	}
	for step := 0; ; step++ {
		p := C.llama_get_logits_ith((*C.struct_llama_context)(cctx), C.int32_t(-1))
		logits := unsafe.Slice((*float32)(unsafe.Pointer(p)), nv)
		if step == 0 {
			res.FirstLogits = append([]float32(nil), logits...)
		}
		if step >= req.MaxTokens {
			break
		}
		best := 0
		for i, v := range logits {
			if v > logits[best] {
				best = i
			}
		}
		if m.TokenIsEog(best) {
			break
		}
		res.Tokens = append(res.Tokens, best)
		if err := feed([]int{best}); err != nil {
			return res, err
		}
	}
	return res, nil
}
