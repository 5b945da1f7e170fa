package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ollama/ollama/parser"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/rundir"
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

func TestExportOllamaCommand(t *testing.T) {
	tmp := t.TempDir()
	adapter := filepath.Join(tmp, "a")
	writePEFTAdapter(t, adapter, "meta-llama/Llama-3.2-1B-Instruct")
	root := newRootCmd()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"export", "ollama", "--base", "llama3.2:1b", "--adapter", adapter, "--out", filepath.Join(tmp, "o"),
		"--name", "rw1", "--param", "temperature=0", "--format", "adapter"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "ollama create rw1 -f "+filepath.Join(tmp, "o", "Modelfile")) ||
		!strings.Contains(stdout.String(), "--rewriter ollama:rw1") {
		t.Errorf("stdout:\n%s", stdout.String())
	}
	// The trainer's greedy decoding: Ollama's default repeat_penalty (1.1) and sampling are switched off.
	if got := parseModelfile(t, filepath.Join(tmp, "o", "Modelfile")); got["temperature"] != "0" || got["model"] != "llama3.2:1b" ||
		got["repeat_penalty"] != "1" || got["top_k"] != "1" {
		t.Errorf("Modelfile commands %v", got)
	}
	root = newRootCmd()
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"export", "ollama", "--adapter", adapter, "--out", tmp})
	if err := root.Execute(); err == nil || !strings.Contains(err.Error(), "base") {
		t.Errorf("missing --base: err = %v", err)
	}
}

// --run --checkpoint best|latest picks the trainer checkpoint the run's
// harness state names, inside the LoRA server's checkpoint directory.
func TestExportOllamaRunCheckpoint(t *testing.T) {
	tmp := t.TempDir()
	run, err := rundir.Open(tmp, "run", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	ckdir := filepath.Join(tmp, "lora_checkpoints")
	for _, n := range []string{"step-000125", "step-000150"} {
		writePEFTAdapter(t, filepath.Join(ckdir, n, "adapter"), "meta-llama/Llama-3.2-1B-Instruct")
	}
	// A state as the loop writes it (resume checks these fields).
	best := grpo.State{RunID: "0123456789ab", Step: 125, PolicyVersion: 125, TrainerCheckpoint: "step-000125",
		SFTDone: true, SavedAt: time.Now().UTC()}
	best.Best = &grpo.BestCheckpoint{Metric: "eval.policy.recall_10", Mode: "max", Value: 0.587, Step: 125, TrainerCheckpoint: "step-000125"}
	latest := best
	latest.Step, latest.PolicyVersion, latest.TrainerCheckpoint = 150, 150, "step-000150"
	if err := run.SaveBest(best); err != nil {
		t.Fatal(err)
	}
	if _, err := run.SaveState(150, latest, 1); err != nil {
		t.Fatal(err)
	}
	// No --checkpoint: the run's final policy, the best one it kept (no
	// status.json says otherwise); the output names the checkpoint.
	for _, c := range []struct{ which, want, label string }{
		{"best", "step-000125", "checkpoint best: step 125, eval.policy.recall_10 0.5870\n"},
		{"latest", "step-000150", "checkpoint latest: step 150\n"},
		{"", "step-000125", "checkpoint best: step 125, eval.policy.recall_10 0.5870\n"},
	} {
		out := filepath.Join(tmp, "o-"+c.which)
		root := newRootCmd()
		var stdout, stderr bytes.Buffer
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		args := []string{"export", "ollama", "--format", "adapter", "--base", "llama3.2:1b", "--run", run.Path, "--checkpoint-dir", ckdir, "--out", out}
		if c.which != "" {
			args = append(args, "--checkpoint", c.which)
		}
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%q: %v\n%s", c.which, err, stderr.String())
		}
		w, _ := os.ReadFile(filepath.Join(out, "adapter", "adapter_model.safetensors"))
		if got := parseModelfile(t, filepath.Join(out, "Modelfile"))["adapter"]; got != filepath.Join(out, "adapter") ||
			string(w) != "weights of "+filepath.Join(ckdir, c.want, "adapter") {
			t.Errorf("--checkpoint %q: ADAPTER %q, want %s's adapter", c.which, got, c.want)
		}
		if !strings.HasPrefix(stdout.String(), c.label) {
			t.Errorf("--checkpoint %q: output %q does not start with %q", c.which, stdout.String(), c.label)
		}
	}
	// A run whose policy is no language model is refused by name, before
	// --checkpoint-dir is asked for; an hf run is not.
	snapshotRun := func(name, trainerYAML string) string {
		dir := filepath.Join(tmp, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(trainerYAML), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	embeddedRun := snapshotRun("embedded", "trainer:\n  endpoint: embedded\n")
	taggerRun := snapshotRun("tagger", "trainer:\n  endpoint: launch\n  launch:\n    args: [--backend, tagger, --threads, \"1\"]\n")
	hfRun := snapshotRun("hf", "trainer:\n  endpoint: launch\n  launch:\n    args: [--backend=hf]\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--run", embeddedRun}, "trained the embedded linear policy (trainer.endpoint: embedded), which is not a language model"},
		{[]string{"--run", taggerRun}, "trained the MiniLM tagger"},
		{[]string{"--run", hfRun}, "--checkpoint-dir: is required"},
		{[]string{"--run", run.Path, "--checkpoint", "best"}, "--checkpoint-dir"},
		{[]string{"--run", run.Path, "--checkpoint", "first", "--checkpoint-dir", ckdir}, `"first"`},
		{[]string{"--run", run.Path, "--adapter", ckdir, "--checkpoint-dir", ckdir}, "give one"},
		{[]string{"--run", filepath.Join(tmp, "nope"), "--checkpoint", "best", "--checkpoint-dir", ckdir}, "no best checkpoint"},
		{nil, "--adapter: is required"},
	} {
		root := newRootCmd()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append([]string{"export", "ollama", "--base", "x", "--out", tmp}, c.args...))
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one mentioning %s", c.args, err, c.want)
		}
	}
}

// --format merged (the default) hands the merge to the trainer environment's
// Python (here a stand-in script that records its arguments and writes the
// file) and writes a Modelfile FROM the GGUF with greedy parameters.
func TestExportOllamaMergedRunsTheExporter(t *testing.T) {
	tmp := t.TempDir()
	adapter := filepath.Join(tmp, "a")
	writePEFTAdapter(t, adapter, "base")
	base := filepath.Join(tmp, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(tmp, "python")
	args := filepath.Join(tmp, "args")
	script := "#!/bin/sh\necho \"$@\" > " + args + "\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n" +
		"echo gguf > \"$out\"\necho '{\"architecture\": \"llama\", \"dtype\": \"f16\"}'\n"
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(tmp, "o")
	root := newRootCmd()
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs([]string{"export", "ollama", "--base", base, "--adapter", adapter, "--out", out, "--dtype", "f16",
		"--python", py, "--param", "num_thread=1"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	gguf := filepath.Join(out, "model.gguf")
	got, _ := os.ReadFile(args)
	want := "-m lora_trainer.export_gguf write --base " + base + " --adapter " + adapter + " --out " + gguf + " --dtype f16\n"
	if string(got) != want {
		t.Errorf("exporter arguments\n got %q\nwant %q", got, want)
	}
	mf := parseModelfile(t, filepath.Join(out, "Modelfile"))
	for k, v := range map[string]string{"model": gguf, "temperature": "0", "top_k": "1", "repeat_penalty": "1", "num_thread": "1"} {
		if mf[k] != v {
			t.Errorf("Modelfile %s = %q, want %q (all: %v)", k, mf[k], v, mf)
		}
	}
	if _, ok := mf["adapter"]; ok {
		t.Errorf("a merged export has no ADAPTER: %v", mf)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--base", "llama3.2:1b"}, "--format merged needs the trainer's model directory"},
		{[]string{"--base", base, "--dtype", "q4"}, `--dtype "q4"`},
		{[]string{"--base", base, "--format", "lora"}, `--format "lora"`},
		{[]string{"--base", base, "--verify-data", "x.jsonl"}, "--ollama-host: is required"},
	} {
		root := newRootCmd()
		root.SetOut(&bytes.Buffer{})
		root.SetErr(&bytes.Buffer{})
		root.SetArgs(append([]string{"export", "ollama", "--adapter", adapter, "--out", filepath.Join(tmp, "bad"), "--python", py}, c.args...))
		if err := root.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want one mentioning %s", c.args, err, c.want)
		}
	}
}
