package configs

import (
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
			[]string{"trainer.launch.stop_timeout_seconds", "> 0"}},
		{"misspelled key", launch + "    arg: [x]\n", nil,
			[]string{"run.yaml:13", "trainer.launch.arg: unknown key; did you mean trainer.launch.args?"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { loadFails(t, c.body, c.sets, c.want...) })
	}
}
