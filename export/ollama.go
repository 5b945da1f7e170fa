// Package export turns a trained rewriter into what another server runs:
// for Ollama, a Modelfile (FROM the base, ADAPTER the LoRA) with the PEFT
// adapter copied in the form Ollama v0.6.5 reads, refusing what Ollama
// cannot convert or would convert into another model.
package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/ollama/ollama/fs/ggml"
	"github.com/ollama/ollama/parser"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// OllamaNote is what every Modelfile and `himes export ollama`'s help say about which
// adapters Ollama can serve; each point was checked against Ollama v0.6.5
// (scripts/lora_trainer/tests/test_ollama_serving.py serves one).
const OllamaNote = `Ollama v0.6.5 converts PEFT (safetensors) LoRA adapters itself for bases of
the llama and gemma2 architectures, and applies them in its llama.cpp runner.
FROM must be the base the adapter was trained on: the trainer's model
directory (Ollama converts its safetensors to F16) or a GGUF of the same
weights. On a llama base Ollama mis-converts adapters of q_proj and k_proj
(it permutes the rotary rows of lora_A instead of lora_B), so train adapters
for Ollama on v_proj,o_proj,gate_proj,up_proj,down_proj.`

// Ollama is one request to export a LoRA adapter for Ollama (`himes export
// ollama`); errors name the fields by their flags (--base, --adapter, --out,
// --param).
type Ollama struct {
	Base    string   // FROM: an Ollama model name or a path
	Adapter string   // a PEFT adapter dir, a lora_trainer checkpoint dir, or a GGUF LoRA file
	Out     string   // output directory for the Modelfile
	Params  []string // key=value → PARAMETER key value
	Force   bool     // write even when the architecture is known to be unsupported
	// Checkpoint labels the run checkpoint --run picked ("best: step 275,
	// eval.policy.recall_10 0.4390"); "" with --adapter.
	Checkpoint string
}

// OllamaResult says what was written.
type OllamaResult struct {
	Modelfile    string // path of the written Modelfile
	Adapter      string // absolute adapter path used for ADAPTER (OUT/adapter for a PEFT adapter)
	Format       string // "peft" or "gguf"
	AdapterBase  string // base_model_name_or_path of a PEFT adapter ("" for GGUF)
	Architecture string // detected architecture of the adapter's base model ("" if unknown)
}

// peftAdapterConfig is the part of PEFT's adapter_config.json we check.
type peftAdapterConfig struct {
	PeftType      string         `json:"peft_type"`
	BaseModel     string         `json:"base_model_name_or_path"`
	Backend       string         `json:"backend"` // set by lora_trainer's tiny backend only
	Rank          int            `json:"r"`
	Alpha         float64        `json:"lora_alpha"`
	UseRSLoRA     bool           `json:"use_rslora"`
	UseDoRA       bool           `json:"use_dora"`
	RankPattern   map[string]any `json:"rank_pattern"`
	AlphaPattern  map[string]any `json:"alpha_pattern"`
	TargetModules any            `json:"target_modules"`
	raw           map[string]any // the whole file, rewritten for Ollama
	targets       []string       // TargetModules as a list
}

// ollamaLoRAModules are the projections whose LoRA factors Ollama's llama and
// gemma2 adapter converters map to llama.cpp tensor names.
var ollamaLoRAModules = map[string]bool{"q_proj": true, "k_proj": true, "v_proj": true, "o_proj": true,
	"gate_proj": true, "up_proj": true, "down_proj": true}

// WriteOllama validates the adapter and writes the Modelfile, and for a PEFT
// adapter a copy of it in the form Ollama reads (OUT/adapter).
func WriteOllama(o Ollama) (OllamaResult, error) {
	var res OllamaResult
	if strings.TrimSpace(o.Base) == "" {
		return res, errors.New("--base: is required (the model the adapter was trained on)")
	}
	if strings.ContainsAny(o.Base, "\n\r") {
		return res, fmt.Errorf("--base %q: must be one line", o.Base)
	}
	if o.Out == "" {
		return res, errors.New("--out: is required")
	}
	params, err := parseModelfileParams(o.Params)
	if err != nil {
		return res, err
	}
	base := o.Base
	// A local base (model directory or GGUF file) is written as an absolute
	// path: Ollama resolves relative ones against the Modelfile's directory.
	if _, err := os.Stat(base); err == nil {
		if base, err = filepath.Abs(base); err != nil {
			return res, fmt.Errorf("--base %q: %w", o.Base, err)
		}
	}
	if err := checkBaseChatTemplate(base, o.Force); err != nil {
		return res, err
	}
	adapter, err := filepath.Abs(o.Adapter)
	if err != nil {
		return res, fmt.Errorf("--adapter %q: %w", o.Adapter, err)
	}
	st, err := os.Stat(adapter)
	if err != nil {
		return res, fmt.Errorf("--adapter: %w", err)
	}
	var peft *peftAdapterConfig
	if !st.IsDir() {
		if !strings.EqualFold(filepath.Ext(adapter), ".gguf") {
			return res, fmt.Errorf("--adapter %s: a file must be a GGUF LoRA (.gguf); otherwise pass the PEFT adapter directory", adapter)
		}
		res.Format = "gguf"
	} else {
		// A lora_trainer checkpoint keeps the PEFT adapter in adapter/.
		if _, err := os.Stat(filepath.Join(adapter, "adapter", "adapter_config.json")); err == nil {
			adapter = filepath.Join(adapter, "adapter")
		}
		cfg, err := readPEFTConfig(adapter)
		if err != nil {
			return res, err
		}
		peft = &cfg
		res.Format, res.AdapterBase = "peft", cfg.BaseModel
		res.Architecture = baseArchitecture(base)
		if res.Architecture == "" {
			res.Architecture = detectArchitecture(cfg.BaseModel)
		}
		if err := checkOllamaAdapter(adapter, cfg, res.Architecture, o.Force); err != nil {
			return res, err
		}
	}
	res.Adapter = adapter
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return res, fmt.Errorf("--out: %w", err)
	}
	if peft != nil {
		if res.Adapter, err = writeOllamaAdapter(adapter, *peft, o.Out); err != nil {
			return res, err
		}
	}

	mf := parser.Modelfile{Commands: append([]parser.Command{
		{Name: "model", Args: base},
		{Name: "adapter", Args: res.Adapter},
	}, params...)}
	header := []string{"Written by `himes export ollama`: the rewriter trained with LoRA on top of its base model."}
	if res.AdapterBase != "" {
		header = append(header, fmt.Sprintf("The adapter (%s) was trained on %s; FROM must hold the same weights.", adapter, res.AdapterBase))
	}
	res.Modelfile = filepath.Join(o.Out, "Modelfile")
	return res, writeModelfile(res.Modelfile, append(header, strings.Split(OllamaNote, "\n")...), mf)
}

// writeModelfile writes mf to path atomically, after the comment lines.
func writeModelfile(path string, comments []string, mf parser.Modelfile) error {
	var b strings.Builder
	for _, line := range comments {
		fmt.Fprintf(&b, "# %s\n", line)
	}
	b.WriteString(mf.String())
	if err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, b.String())
		return err
	}); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// checkOllamaAdapter refuses what Ollama v0.6.5 cannot convert, or converts
// into a model that computes something else than the trainer did.
func checkOllamaAdapter(dir string, cfg peftAdapterConfig, arch string, force bool) error {
	path := filepath.Join(dir, "adapter_config.json")
	switch {
	case cfg.UseDoRA:
		return fmt.Errorf("%s: use_dora: Ollama serves plain LoRA only", path)
	case len(cfg.RankPattern) > 0 || len(cfg.AlphaPattern) > 0:
		return fmt.Errorf("%s: rank_pattern/alpha_pattern: Ollama applies one rank and alpha to every module", path)
	case cfg.Rank <= 0:
		return fmt.Errorf("%s: r = %d, want a positive LoRA rank", path, cfg.Rank)
	case cfg.Alpha <= 0:
		return fmt.Errorf("%s: lora_alpha = %g, want > 0", path, cfg.Alpha)
	}
	for _, m := range cfg.targets {
		if !ollamaLoRAModules[m] {
			return fmt.Errorf("%s: target module %q: Ollama converts LoRA factors of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj and down_proj only", path, m)
		}
	}
	switch arch {
	case "llama":
		for _, m := range cfg.targets {
			if m != "q_proj" && m != "k_proj" {
				continue
			}
			if !force {
				return fmt.Errorf("%s: targets %s: Ollama v0.6.5 permutes the rotary rows of lora_A instead of lora_B for q_proj and k_proj "+
					"on a llama base, so the served model would not compute what was trained (its greedy rewrites differ from the first token); "+
					"train with --lora-target-modules v_proj,o_proj,gate_proj,up_proj,down_proj, or pass --force", path, m)
			}
			slog.Warn("q_proj/k_proj adapters are mis-converted by Ollama v0.6.5 on llama bases (--force)", "module", m)
		}
	case "gemma2":
	case "":
		slog.Warn("cannot tell the base's architecture; Ollama converts PEFT adapters only for llama and gemma2 bases",
			"base_model_name_or_path", cfg.BaseModel)
	default:
		if !force {
			return fmt.Errorf("--adapter %s: trained on %s (architecture %s); Ollama v0.6.5 converts PEFT adapters for llama and gemma2 bases only (or pass --force)",
				dir, cfg.BaseModel, arch)
		}
		slog.Warn("writing a Modelfile Ollama will likely refuse (--force)", "architecture", arch)
	}
	return nil
}

// writeOllamaAdapter writes OUT/adapter: the PEFT adapter's weights and its
// config in the form Ollama v0.6.5 reads, and returns that directory. Ollama
// decodes lora_alpha as an unsigned integer (PEFT writes 16.0 for a float)
// and scales by alpha/r; a fractional or rsLoRA-scaled alpha (alpha/sqrt(r))
// goes into lora_parameters.alpha, which Ollama reads as a float instead.
func writeOllamaAdapter(dir string, cfg peftAdapterConfig, out string) (string, error) {
	alpha := cfg.Alpha
	if cfg.UseRSLoRA {
		alpha *= math.Sqrt(float64(cfg.Rank))
	}
	raw := maps.Clone(cfg.raw)
	if alpha == math.Trunc(alpha) && alpha <= math.MaxUint32 {
		raw["lora_alpha"] = int64(alpha)
	} else {
		delete(raw, "lora_alpha")
		raw["lora_parameters"] = map[string]any{"alpha": alpha, "rank": cfg.Rank}
	}
	raw["use_rslora"] = false
	js, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(dir, "adapter_config.json"), err)
	}
	final := filepath.Join(out, "adapter")
	abs, err := filepath.Abs(final)
	if err != nil {
		return "", err
	}
	// Built beside the final directory and renamed over it: a failure leaves
	// no half-written adapter behind.
	tmp, err := os.MkdirTemp(out, ".adapter-")
	if err != nil {
		return "", fmt.Errorf("--out: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "adapter_config.json"), append(js, '\n'), 0o644); err != nil {
		return "", err
	}
	if err := copyFile(filepath.Join(dir, "adapter_model.safetensors"), filepath.Join(tmp, "adapter_model.safetensors")); err != nil {
		return "", err
	}
	if err := os.RemoveAll(final); err != nil {
		return "", fmt.Errorf("--out: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("--out: %w", err)
	}
	return abs, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// readPEFTConfig reads and checks dir/adapter_config.json.
func readPEFTConfig(dir string) (peftAdapterConfig, error) {
	var cfg peftAdapterConfig
	path := filepath.Join(dir, "adapter_config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("--adapter %s: not a PEFT adapter directory: %w", dir, err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	if err := json.Unmarshal(raw, &cfg.raw); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	if cfg.Backend == "tiny" {
		return cfg, fmt.Errorf("%s: an adapter of lora_trainer's tiny test backend; only --backend hf adapters can be served by Ollama", path)
	}
	if !strings.EqualFold(cfg.PeftType, "LORA") {
		return cfg, fmt.Errorf("%s: peft_type %q, want LORA", path, cfg.PeftType)
	}
	switch tm := cfg.TargetModules.(type) {
	case []any:
		for _, m := range tm {
			s, ok := m.(string)
			if !ok {
				return cfg, fmt.Errorf("%s: target_modules: %v is not a module name", path, m)
			}
			cfg.targets = append(cfg.targets, s)
		}
	default:
		return cfg, fmt.Errorf("%s: target_modules %v: want a list of module names (Ollama cannot resolve a pattern)", path, cfg.TargetModules)
	}
	if _, err := os.Stat(filepath.Join(dir, "adapter_model.safetensors")); err != nil {
		return cfg, fmt.Errorf("--adapter %s: no adapter_model.safetensors (Ollama reads safetensors adapters only): %w", dir, err)
	}
	return cfg, nil
}

// baseArchitecture is the architecture Ollama sees in a local base: a model
// directory's config.json (architectures[0], mapped as Ollama's converter
// maps it) or a GGUF file's general.architecture. "" when base is not local
// or not recognized.
func baseArchitecture(base string) string {
	st, err := os.Stat(base)
	if err != nil {
		return ""
	}
	if st.IsDir() {
		raw, err := os.ReadFile(filepath.Join(base, "config.json"))
		if err != nil {
			return ""
		}
		var c struct {
			Architectures []string `json:"architectures"`
		}
		if json.Unmarshal(raw, &c) != nil || len(c.Architectures) == 0 {
			return ""
		}
		switch c.Architectures[0] {
		case "LlamaForCausalLM":
			return "llama"
		case "Gemma2ForCausalLM":
			return "gemma2"
		case "Qwen2ForCausalLM":
			return "qwen2"
		}
		return strings.ToLower(strings.TrimSuffix(c.Architectures[0], "ForCausalLM"))
	}
	f, err := os.Open(base)
	if err != nil {
		return ""
	}
	defer f.Close()
	g, _, err := ggml.Decode(f, 0)
	if err != nil {
		return ""
	}
	return g.KV().Architecture()
}

// checkBaseChatTemplate refuses a local model directory whose
// tokenizer_config.json has no chat template: Ollama v0.6.5's create reads the
// template from there only (not from chat_template.jinja, where newer
// transformers save it) and otherwise serves raw prompts with its default
// template, while lora_trainer's hf backend trained on chat-rendered prompts,
// so the served rewriter would not see what the policy saw. A GGUF file or an
// Ollama model name carries its own template and is not checked.
func checkBaseChatTemplate(base string, force bool) error {
	st, err := os.Stat(base)
	if err != nil || !st.IsDir() {
		return nil
	}
	path := filepath.Join(base, "tokenizer_config.json")
	hint := "use the chat model's directory"
	if _, err := os.Stat(filepath.Join(base, "chat_template.jinja")); err == nil {
		hint = "copy chat_template.jinja's text into tokenizer_config.json as \"chat_template\" (Ollama v0.6.5 reads it only there)"
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		if force {
			return nil
		}
		return fmt.Errorf("--base %s: no tokenizer_config.json, so no chat template for Ollama to serve the rewriter with; %s, or pass --force: %w", base, hint, err)
	}
	var c struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if t := strings.TrimSpace(string(c.ChatTemplate)); t != "" && t != "null" && t != `""` && t != "[]" {
		return nil
	}
	if force {
		slog.Warn("the base has no chat template Ollama reads: it will serve raw prompts, unlike the trainer (--force)", "path", path)
		return nil
	}
	return fmt.Errorf("%s: no chat_template: Ollama would serve raw prompts while the trainer rendered them with a chat template; %s, or pass --force", path, hint)
}

// detectArchitecture names the architecture of a base model: config.json's
// model_type when base is a local model directory, else a guess from the
// hub name. "" when unknown.
func detectArchitecture(base string) string {
	if raw, err := os.ReadFile(filepath.Join(base, "config.json")); err == nil {
		var c struct {
			ModelType string `json:"model_type"`
		}
		if json.Unmarshal(raw, &c) == nil && c.ModelType != "" {
			return c.ModelType
		}
	}
	n := strings.ToLower(filepath.Base(base))
	switch {
	case strings.Contains(n, "qwen3"):
		return "qwen3"
	case strings.Contains(n, "qwen"):
		return "qwen2"
	case strings.Contains(n, "gemma-2") || strings.Contains(n, "gemma2"):
		return "gemma2"
	case strings.Contains(n, "gemma"):
		return "gemma"
	case strings.Contains(n, "mistral"):
		return "mistral"
	case strings.Contains(n, "llama"):
		return "llama"
	}
	return ""
}

// modelfileCommands are Modelfile instructions that --param must not imitate.
var modelfileCommands = map[string]bool{"from": true, "model": true, "adapter": true, "license": true,
	"template": true, "system": true, "message": true, "parameter": true}

func parseModelfileParams(kvs []string) ([]parser.Command, error) {
	var out []parser.Command
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch {
		case !ok || k == "" || v == "":
			return nil, fmt.Errorf("--param %q: want key=value, e.g. temperature=0", kv)
		case modelfileCommands[strings.ToLower(k)] || strings.ContainsAny(k, " \t"):
			return nil, fmt.Errorf("--param %q: %q is not a parameter name", kv, k)
		case strings.ContainsAny(v, "\n\r"):
			return nil, fmt.Errorf("--param %q: value must be one line", kv)
		}
		out = append(out, parser.Command{Name: k, Args: v})
	}
	return out, nil
}
