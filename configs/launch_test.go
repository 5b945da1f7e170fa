package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// trainer.launch: checked only with trainer.endpoint "launch", each error
// naming its key and line.
func TestTrainerLaunchKeys(t *testing.T) {
	const launch = valid + `trainer:
  endpoint: launch
  launch:
    args: [--backend, tagger]
`
	cfg, err := Load(writeConfig(t, launch), nil)
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Trainer.Launch; strings.Join(l.Args, " ") != "--backend tagger" || l.ReadyTimeoutSeconds != 600 || l.StopTimeoutSeconds != 30 {
		t.Errorf("trainer.launch = %+v, want the args and the default timeouts", l)
	}
	// A URL endpoint ignores the section (a trainer started by hand).
	if _, err := Load(writeConfig(t, launch), []string{"trainer.endpoint=http://127.0.0.1:8400", "trainer.launch.args=[]"}); err != nil {
		t.Errorf("URL endpoint with an empty launch section: %v", err)
	}
	cases := []struct {
		name string
		body string
		sets []string
		want []string
	}{
		{"no args", launch, []string{"trainer.launch.args=[]"}, []string{"trainer.launch.args", "is required"}},
		{"owned flag", strings.Replace(launch, "tagger]", "tagger, --port, \"8400\"]", 1), nil,
			[]string{"run.yaml:12", "trainer.launch.args", "item 2: --port is set by himes"}},
		{"owned flag with =", launch, []string{"trainer.launch.args=[--checkpoint-dir=x]"},
			[]string{"trainer.launch.args", "--checkpoint-dir is set by himes"}},
		{"env not KEY=VALUE", launch + "    env: [HF_HUB_OFFLINE]\n", nil,
			[]string{"run.yaml:13", "trainer.launch.env", `"HF_HUB_OFFLINE" is not KEY=VALUE`}},
		{"ready timeout", launch + "    ready_timeout_seconds: 0\n", nil,
			[]string{"run.yaml:13", "trainer.launch.ready_timeout_seconds", "> 0"}},
		{"stop timeout", launch, []string{"trainer.launch.stop_timeout_seconds=-1"},
			[]string{"trainer.launch.stop_timeout_seconds", "must be in [0, 3600]"}},
		{"misspelled key", launch + "    arg: [x]\n", nil,
			[]string{"run.yaml:13", "trainer.launch.arg: unknown key; did you mean trainer.launch.args?"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { loadFails(t, c.body, c.sets, c.want...) })
	}
}

// retrieval.ollama_url "launch": a server for the ollama embedder; the
// retrieval.ollama_launch section checked then (and only then), each error
// naming its key and line; model_dir resolved against the config's folder.
func TestOllamaLaunchKeys(t *testing.T) {
	const launch = valid + `retrieval:
  embedder: ollama
  ollama_url: launch
  embed_model: all-minilm-l6-v2
`
	cfg, err := Load(writeConfig(t, launch), nil)
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Retrieval.OllamaLaunch
	if l.Models != "" || l.ModelDir != "" || l.ReadyTimeoutSeconds != 120 || l.StopTimeoutSeconds != 10 ||
		strings.Join(l.Env, " ") != "OLLAMA_NUM_PARALLEL=1" {
		t.Errorf("retrieval.ollama_launch = %+v, want the defaults", l)
	}
	// launch is for the ollama embedder; with another the URL is unused and
	// no server starts (configs/dense.yaml's measurement loops swap in lsa
	// and hash by --set).
	for _, set := range []string{"retrieval.embedder=lsa", "retrieval.embedder=hash"} {
		if _, err := Load(writeConfig(t, launch), []string{set}); err != nil {
			t.Errorf("launch with %s: %v", set, err)
		}
	}
	// A URL ignores the section (a server started by hand).
	if _, err := Load(writeConfig(t, launch), []string{"retrieval.ollama_url=http://127.0.0.1:11434", "retrieval.ollama_launch.ready_timeout_seconds=0"}); err != nil {
		t.Errorf("URL with a bad launch section: %v", err)
	}
	// model_dir is an input: relative to the config file, and it must exist.
	p := writeConfig(t, launch+"  ollama_launch:\n    model_dir: minilm\n")
	if err := os.Mkdir(filepath.Join(filepath.Dir(p), "minilm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if cfg, err := Load(p, nil); err != nil {
		t.Error(err)
	} else if want := filepath.Join(filepath.Dir(p), "minilm"); cfg.Retrieval.OllamaLaunch.ModelDir != want {
		t.Errorf("model_dir = %q, want %q", cfg.Retrieval.OllamaLaunch.ModelDir, want)
	}
	cases := []struct {
		name string
		body string
		sets []string
		want []string
	}{
		{"env not KEY=VALUE", launch + "  ollama_launch:\n    env: [OLLAMA_DEBUG]\n", nil,
			[]string{"run.yaml:14", "retrieval.ollama_launch.env", `"OLLAMA_DEBUG" is not KEY=VALUE`}},
		{"env sets the host", launch, []string{"retrieval.ollama_launch.env=[OLLAMA_HOST=0.0.0.0:1]"},
			[]string{"retrieval.ollama_launch.env", "OLLAMA_HOST is set by himes"}},
		{"ready timeout", launch + "  ollama_launch:\n    ready_timeout_seconds: 0\n", nil,
			[]string{"run.yaml:14", "retrieval.ollama_launch.ready_timeout_seconds", "> 0"}},
		{"stop timeout", launch, []string{"retrieval.ollama_launch.stop_timeout_seconds=-1"},
			[]string{"retrieval.ollama_launch.stop_timeout_seconds", "must be in [0, 3600]"}},
		{"missing model_dir", launch + "  ollama_launch:\n    model_dir: nowhere\n", nil,
			[]string{"run.yaml:14", "retrieval.ollama_launch.model_dir", "nowhere"}},
		{"misspelled key", launch + "  ollama_launch:\n    model: x\n", nil,
			[]string{"run.yaml:14", "retrieval.ollama_launch.model: unknown key; did you mean retrieval.ollama_launch.models?"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { loadFails(t, c.body, c.sets, c.want...) })
	}
}
