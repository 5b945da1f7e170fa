package export

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ollama/ollama/parser"

	"github.com/himes-rl/himes/internal/tinygguf"
)

// writePEFTAdapter makes a minimal PEFT adapter directory (what
// PeftModel.save_pretrained writes) for a base model.
func writePEFTAdapter(t *testing.T, dir, base string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `{"peft_type": "LORA", "base_model_name_or_path": "` + base + `", "r": 16, "lora_alpha": 32.0,
 "target_modules": ["v_proj", "o_proj"], "task_type": "CAUSAL_LM"}`
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The weights name their directory, so a test can tell which adapter was copied.
	if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), []byte("weights of "+dir), 0o644); err != nil {
		t.Fatal(err)
	}
}

// parseModelfile reads a Modelfile back with Ollama's own parser.
func parseModelfile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mf, err := parser.ParseFile(f)
	if err != nil {
		t.Fatalf("Ollama's parser rejects %s: %v", path, err)
	}
	got := map[string]string{}
	for _, c := range mf.Commands {
		got[c.Name] = c.Args
	}
	return got
}

// writeAdapterConfig replaces dir/adapter_config.json.
func writeAdapterConfig(t *testing.T, dir, cfg string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readJSON decodes a JSON object file.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

func TestExportOllamaPEFTAdapter(t *testing.T) {
	tmp := t.TempDir()
	adapter := filepath.Join(tmp, "my adapter") // a space in the path must survive
	writePEFTAdapter(t, adapter, "meta-llama/Llama-3.2-1B-Instruct")
	out := filepath.Join(tmp, "out", "nested")
	res, err := WriteOllama(Ollama{Base: "llama3.2:1b-instruct-fp16", Adapter: adapter, Out: out,
		Params: []string{"temperature=0", "num_ctx=4096"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Modelfile != filepath.Join(out, "Modelfile") || res.Format != "peft" || res.Architecture != "llama" {
		t.Errorf("result %+v", res)
	}
	got := parseModelfile(t, res.Modelfile)
	want := map[string]string{"model": "llama3.2:1b-instruct-fp16", "adapter": filepath.Join(out, "adapter"), "temperature": "0", "num_ctx": "4096"}
	if len(got) != len(want) {
		t.Errorf("commands %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	raw, _ := os.ReadFile(res.Modelfile)
	text := string(raw)
	for _, s := range []string{"FROM llama3.2:1b-instruct-fp16\n", "ADAPTER " + filepath.Join(out, "adapter") + "\n",
		"was trained on meta-llama/Llama-3.2-1B-Instruct", "llama.cpp runner", "q_proj and k_proj"} {
		if !strings.Contains(text, s) {
			t.Errorf("Modelfile lacks %q:\n%s", s, text)
		}
	}
}

func TestExportOllamaTrainerCheckpointUsesItsAdapterDir(t *testing.T) {
	tmp := t.TempDir()
	ck := filepath.Join(tmp, "step-100")
	writePEFTAdapter(t, filepath.Join(ck, "adapter"), "google/gemma-2-2b-it")
	res, err := WriteOllama(Ollama{Base: "gemma2:2b", Adapter: ck, Out: tmp})
	if err != nil {
		t.Fatal(err)
	}
	if got := parseModelfile(t, res.Modelfile)["adapter"]; got != filepath.Join(tmp, "adapter") {
		t.Errorf("ADAPTER %q, want the copy in OUT/adapter", got)
	}
	if w, _ := os.ReadFile(filepath.Join(tmp, "adapter", "adapter_model.safetensors")); string(w) != "weights of "+filepath.Join(ck, "adapter") {
		t.Errorf("copied weights %q, want the checkpoint's adapter/", w)
	}
	if res.Architecture != "gemma2" {
		t.Errorf("architecture %q", res.Architecture)
	}
}

func TestExportOllamaRefusesArchitecturesOllamaCannotConvert(t *testing.T) {
	tmp := t.TempDir()
	adapter := filepath.Join(tmp, "a")
	writePEFTAdapter(t, adapter, "Qwen/Qwen2.5-1.5B-Instruct")
	_, err := WriteOllama(Ollama{Base: "qwen2.5:1.5b-instruct-fp16", Adapter: adapter, Out: filepath.Join(tmp, "o")})
	if err == nil || !strings.Contains(err.Error(), "llama and gemma2") || !strings.Contains(err.Error(), "qwen2") {
		t.Fatalf("err = %v, want a refusal naming qwen2 and what Ollama converts", err)
	}
	if _, statErr := os.Stat(filepath.Join(tmp, "o")); !os.IsNotExist(statErr) {
		t.Errorf("--out was written despite the error")
	}
	// --force writes it anyway.
	if _, err := WriteOllama(Ollama{Base: "qwen2.5:1.5b-instruct-fp16", Adapter: adapter, Out: filepath.Join(tmp, "o"), Force: true}); err != nil {
		t.Fatal(err)
	}
	// A GGUF LoRA is passed through as it is.
	gguf := filepath.Join(tmp, "rewriter-lora.gguf")
	if err := os.WriteFile(gguf, []byte("GGUF"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := WriteOllama(Ollama{Base: "qwen2.5:1.5b-instruct-fp16", Adapter: gguf, Out: filepath.Join(tmp, "g")})
	if err != nil {
		t.Fatal(err)
	}
	if res.Format != "gguf" || parseModelfile(t, res.Modelfile)["adapter"] != gguf {
		t.Errorf("result %+v", res)
	}
}

// Ollama v0.6.5 decodes lora_alpha as an unsigned integer and scales by
// alpha/r: the copy it reads has an integer alpha, or the exact float in
// lora_parameters.alpha; rsLoRA's alpha/sqrt(r) becomes alpha·sqrt(r)/r.
func TestExportOllamaAdapterAlphaAsOllamaReadsIt(t *testing.T) {
	tmp := t.TempDir()
	base := filepath.Join(tmp, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "config.json"), []byte(`{"architectures": ["LlamaForCausalLM"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "tokenizer_config.json"), []byte(`{"chat_template": "{{ messages }}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, extra string
		alpha       float64
		wantInt     bool
		want        float64
	}{
		{"integral float", `"lora_alpha": 16.0`, 16, true, 16},
		{"fraction", `"lora_alpha": 12.5`, 12.5, false, 12.5},
		{"rslora", `"lora_alpha": 16, "use_rslora": true`, 16, true, 16 * 2}, // r = 4: 16/sqrt(4) = 32/4
		{"rslora fraction", `"lora_alpha": 3, "use_rslora": true, "r": 2`, 3, false, 3 * math.Sqrt2},
	}
	for _, c := range cases {
		adapter := filepath.Join(tmp, "a-"+strings.ReplaceAll(c.name, " ", "-"))
		writePEFTAdapter(t, adapter, base)
		writeAdapterConfig(t, adapter, `{"peft_type": "LORA", "base_model_name_or_path": "`+base+`", "r": 4, `+c.extra+`,
 "target_modules": ["v_proj", "down_proj"], "lora_dropout": 0.0}`)
		out := filepath.Join(tmp, "o-"+strings.ReplaceAll(c.name, " ", "-"))
		res, err := WriteOllama(Ollama{Base: base, Adapter: adapter, Out: out})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if res.Architecture != "llama" || res.Adapter != filepath.Join(out, "adapter") {
			t.Errorf("%s: result %+v", c.name, res)
		}
		got := readJSON(t, filepath.Join(out, "adapter", "adapter_config.json"))
		if got["use_rslora"] != false || got["lora_dropout"] != 0.0 || (got["r"] != 4.0 && got["r"] != 2.0) {
			t.Errorf("%s: copy %v: other fields must be kept, use_rslora cleared", c.name, got)
		}
		raw, _ := os.ReadFile(filepath.Join(out, "adapter", "adapter_config.json"))
		if c.wantInt {
			if got["lora_alpha"] != c.want || !strings.Contains(string(raw), fmt.Sprintf(`"lora_alpha": %d,`, int(c.want))) {
				t.Errorf("%s: lora_alpha not an integer in\n%s", c.name, raw)
			}
			continue
		}
		lp, ok := got["lora_parameters"].(map[string]any)
		a, _ := lp["alpha"].(float64)
		if _, has := got["lora_alpha"]; has || !ok || math.Abs(a-c.want) > 1e-12 {
			t.Errorf("%s: want lora_parameters.alpha = %g and no lora_alpha, got\n%s", c.name, c.want, raw)
		}
	}
}

func TestExportOllamaRefusesWhatOllamaMisconverts(t *testing.T) {
	tmp := t.TempDir()
	adapter := filepath.Join(tmp, "a")
	writePEFTAdapter(t, adapter, "meta-llama/Llama-3.2-1B-Instruct")
	for _, c := range []struct{ cfg, want string }{
		{`"target_modules": ["q_proj", "v_proj"]`, "q_proj"},
		{`"target_modules": ["v_proj", "k_proj"]`, "k_proj"},
		{`"target_modules": ["v_proj", "lm_head"]`, `"lm_head"`},
		{`"target_modules": ".*proj"`, "list of module names"},
		{`"target_modules": ["v_proj"], "use_dora": true`, "use_dora"},
		{`"target_modules": ["v_proj"], "rank_pattern": {"v_proj": 8}`, "rank_pattern"},
	} {
		writeAdapterConfig(t, adapter, `{"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.2-1B-Instruct", "r": 4, "lora_alpha": 8, `+c.cfg+`}`)
		out := filepath.Join(tmp, "o")
		_, err := WriteOllama(Ollama{Base: "llama3.2:1b", Adapter: adapter, Out: out})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "adapter_config.json") {
			t.Errorf("%s: err = %v, want a refusal naming the file and %s", c.cfg, err, c.want)
		}
		if _, statErr := os.Stat(out); !os.IsNotExist(statErr) {
			t.Errorf("%s: --out written despite the error", c.cfg)
		}
	}
}

func TestExportOllamaRejectsBadInput(t *testing.T) {
	tmp := t.TempDir()
	good := filepath.Join(tmp, "good")
	writePEFTAdapter(t, good, "meta-llama/Llama-3.2-1B")
	tiny := filepath.Join(tmp, "tiny")
	if err := os.MkdirAll(tiny, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tiny, "adapter_config.json"), []byte(`{"backend": "tiny", "lora": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	noWeights := filepath.Join(tmp, "noweights")
	writePEFTAdapter(t, noWeights, "meta-llama/Llama-3.2-1B")
	if err := os.Remove(filepath.Join(noWeights, "adapter_model.safetensors")); err != nil {
		t.Fatal(err)
	}
	notGGUF := filepath.Join(tmp, "adapter.bin")
	if err := os.WriteFile(notGGUF, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "out")
	cases := []struct {
		name string
		o    Ollama
		want string
	}{
		{"no base", Ollama{Adapter: good, Out: out}, "--base: is required"},
		{"missing adapter", Ollama{Base: "b", Adapter: filepath.Join(tmp, "nope"), Out: out}, "--adapter"},
		{"not an adapter dir", Ollama{Base: "b", Adapter: tmp, Out: out}, "not a PEFT adapter directory"},
		{"tiny backend", Ollama{Base: "b", Adapter: tiny, Out: out}, "tiny test backend"},
		{"no safetensors", Ollama{Base: "b", Adapter: noWeights, Out: out}, "no adapter_model.safetensors"},
		{"file not gguf", Ollama{Base: "b", Adapter: notGGUF, Out: out}, "must be a GGUF LoRA"},
		{"param without value", Ollama{Base: "b", Adapter: good, Out: out, Params: []string{"temperature"}}, "want key=value"},
		{"param imitating a command", Ollama{Base: "b", Adapter: good, Out: out, Params: []string{"adapter=/x"}}, "not a parameter name"},
	}
	for _, c := range cases {
		_, err := WriteOllama(c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

func TestDetectArchitectureReadsLocalConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my-finetune")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "mistral"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for base, want := range map[string]string{
		dir:                          "mistral",
		"Qwen/Qwen2.5-1.5B-Instruct": "qwen2",
		"meta-llama/Llama-3.1-8B":    "llama",
		"google/gemma-2-9b-it":       "gemma2",
		"some/unknown-model":         "",
	} {
		if got := detectArchitecture(base); got != want {
			t.Errorf("detectArchitecture(%q) = %q, want %q", base, got, want)
		}
	}
}

// The base's architecture comes from --base when it is local: a model
// directory's config.json or a GGUF file's header; so a q_proj adapter on a
// llama GGUF is refused even when the adapter names no recognizable base.
func TestExportOllamaReadsTheBaseArchitecture(t *testing.T) {
	tmp := t.TempDir()
	gguf := filepath.Join(tmp, "base.gguf")
	if err := tinygguf.Write(gguf, tinygguf.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	qwen := filepath.Join(tmp, "qwen")
	if err := os.MkdirAll(qwen, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(qwen, "config.json"), []byte(`{"architectures": ["Qwen2ForCausalLM"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for base, want := range map[string]string{gguf: "llama", qwen: "qwen2", filepath.Join(tmp, "absent"): "", "llama3.2:1b": ""} {
		if got := baseArchitecture(base); got != want {
			t.Errorf("baseArchitecture(%s) = %q, want %q", base, got, want)
		}
	}
	adapter := filepath.Join(tmp, "a")
	writePEFTAdapter(t, adapter, "/elsewhere/my-finetune")
	writeAdapterConfig(t, adapter, `{"peft_type": "LORA", "base_model_name_or_path": "/elsewhere/my-finetune", "r": 4, "lora_alpha": 8,
 "target_modules": ["q_proj", "v_proj"]}`)
	if _, err := WriteOllama(Ollama{Base: gguf, Adapter: adapter, Out: filepath.Join(tmp, "o")}); err == nil || !strings.Contains(err.Error(), "q_proj") {
		t.Errorf("q_proj adapter on a llama GGUF: err = %v", err)
	}
	// Relative local bases are written absolute: Ollama resolves them against the Modelfile's directory.
	writeAdapterConfig(t, adapter, `{"peft_type": "LORA", "base_model_name_or_path": "/elsewhere/my-finetune", "r": 4, "lora_alpha": 8,
 "target_modules": ["v_proj"]}`)
	t.Chdir(tmp)
	res, err := WriteOllama(Ollama{Base: "base.gguf", Adapter: adapter, Out: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if got := parseModelfile(t, res.Modelfile)["model"]; got != gguf || res.Architecture != "llama" {
		t.Errorf("FROM %q (architecture %q), want %s", got, res.Architecture, gguf)
	}
}

func TestExportOllamaRefusesABaseWithoutChatTemplate(t *testing.T) {
	tmp := t.TempDir()
	adapter := filepath.Join(tmp, "a")
	writePEFTAdapter(t, adapter, "base")
	base := filepath.Join(tmp, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "config.json"), []byte(`{"architectures": ["LlamaForCausalLM"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tokCfg := filepath.Join(base, "tokenizer_config.json")
	for i, cfg := range []string{`{"bos_token": "<s>"}`, `{"chat_template": null}`, `{"chat_template": ""}`} {
		if err := os.WriteFile(tokCfg, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(tmp, fmt.Sprintf("o%d", i))
		_, err := WriteOllama(Ollama{Base: base, Adapter: adapter, Out: out})
		if err == nil || !strings.Contains(err.Error(), tokCfg) || !strings.Contains(err.Error(), "chat_template") {
			t.Errorf("%s: err = %v, want one naming %s and chat_template", cfg, err, tokCfg)
		}
		if _, statErr := os.Stat(out); !os.IsNotExist(statErr) {
			t.Errorf("%s: refused export left %s behind", cfg, out)
		}
		if _, err := WriteOllama(Ollama{Base: base, Adapter: adapter, Out: out, Force: true}); err != nil {
			t.Errorf("%s with --force: %v", cfg, err)
		}
	}
	// chat_template.jinja alone is not enough (Ollama v0.6.5 does not read it): the error says what to do.
	if err := os.WriteFile(filepath.Join(base, "chat_template.jinja"), []byte("{{ messages }}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteOllama(Ollama{Base: base, Adapter: adapter, Out: filepath.Join(tmp, "jinja")}); err == nil ||
		!strings.Contains(err.Error(), "copy chat_template.jinja") {
		t.Errorf("base with chat_template.jinja only: err = %v, want the hint to copy it", err)
	}
	// A template in tokenizer_config.json is what Ollama reads.
	if err := os.WriteFile(tokCfg, []byte(`{"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteOllama(Ollama{Base: base, Adapter: adapter, Out: filepath.Join(tmp, "ok")}); err != nil {
		t.Errorf("base with a chat_template: %v", err)
	}
}
