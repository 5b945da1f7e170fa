package configs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// writeConfig writes a config and an empty data file beside it, so the file
// checks pass unless a test wants them to fail.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.jsonl"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const valid = `run:
  name: test
data:
  train: train.jsonl
grpo:
  group_size: 4
reward:
  alpha: 0.5
`

func TestLoadValid(t *testing.T) {
	p := writeConfig(t, valid)
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GRPO.GroupSize != 4 || cfg.Reward.Alpha != 0.5 {
		t.Fatalf("file values not applied: %+v %+v", cfg.GRPO, cfg.Reward)
	}
	// Keys absent from the file keep the package defaults.
	if cfg.Reward.Beta != 1 || cfg.Retrieval.K1 != 0.9 || cfg.GRPO.Advantage.Estimator != "group" {
		t.Fatalf("defaults lost: beta=%v k1=%v est=%q", cfg.Reward.Beta, cfg.Retrieval.K1, cfg.GRPO.Advantage.Estimator)
	}
	// Relative data paths resolve against the config file's directory.
	if want, _ := filepath.Abs(filepath.Join(filepath.Dir(p), "train.jsonl")); cfg.Data.Train != want {
		t.Fatalf("data.train = %q, want %q", cfg.Data.Train, want)
	}
}

// A relative input path in the file is relative to the config's folder;
// one typed in a --set override is relative to the working directory, as
// --data and --out are. Before, both were taken from the config's folder,
// so "--set data.kb=kb.jsonl" beside the user looked for configs/kb.jsonl.
func TestOverridePathsAreRelativeToTheWorkingDirectory(t *testing.T) {
	p := writeConfig(t, valid) // data.train: train.jsonl, beside the config
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kb.jsonl", "eval.jsonl"} {
		if err := os.WriteFile(filepath.Join(work, "sub", f), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(work)
	cfg, err := Load(p, []string{"data.kb=sub/kb.jsonl", "data={train: sub/eval.jsonl, eval: sub/eval.jsonl}", "retrieval.index=idx"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, got, want string }{
		{"data.kb", cfg.Data.KB, filepath.Join(work, "sub", "kb.jsonl")},
		{"data.train (its section set)", cfg.Data.Train, filepath.Join(work, "sub", "eval.jsonl")},
		{"data.eval", cfg.Data.Eval, filepath.Join(work, "sub", "eval.jsonl")},
		{"retrieval.index", cfg.Retrieval.Index, filepath.Join(work, "idx")},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.key, c.got, c.want)
		}
	}
	// Without overrides, the file's path stays beside the config.
	cfg, err = Load(p, []string{"data.kb=sub/kb.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(p), "train.jsonl"); cfg.Data.Train != want {
		t.Errorf("data.train from the file = %q, want %q", cfg.Data.Train, want)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name, body string
		sets       []string
		want       []string // substrings of the error
	}{
		{"misspelled key", strings.Replace(valid, "group_size", "grop_size", 1), nil,
			[]string{"run.yaml:6: grpo.grop_size: unknown key; did you mean grpo.group_size?"}},
		{"wrong type", strings.Replace(valid, "group_size: 4", "group_size: four", 1), nil,
			[]string{`run.yaml:6: grpo.group_size: want an integer, got "four"`}},
		{"out of range", strings.Replace(valid, "group_size: 4", "group_size: 1", 1), nil,
			[]string{"run.yaml:6", "grpo.group_size", "≥ 2"}},
		{"negative weight", strings.Replace(valid, "alpha: 0.5", "alpha: -1", 1), nil,
			[]string{"run.yaml:8", "reward.alpha"}},
		{"missing file", strings.Replace(valid, "train.jsonl", "nope.jsonl", 1), nil,
			[]string{"run.yaml:4", "data.train", "nope.jsonl"}},
		{"bad override key", valid, []string{"grpo.groupsize=8"},
			[]string{"--set grpo.groupsize=8: grpo.groupsize: unknown key; did you mean grpo.group_size?"}},
		{"bad override value", valid, []string{"grpo.group_size=x"},
			[]string{"--set grpo.group_size=x"}},
		{"override out of range", valid, []string{"grpo.advantage.epsilon=-1"},
			[]string{"grpo.advantage.epsilon", "must be in [0, 1]"}},
		{"override without =", valid, []string{"grpo.group_size"},
			[]string{"want key=value"}},
		{"dual clip c ≤ 1", valid, []string{"grpo.loss.clip_ratio_c=1"},
			[]string{"grpo.loss.clip_ratio_c", "> 1"}},
		{"unknown KL estimator", valid, []string{"grpo.loss.kl_estimator=k2"},
			[]string{"grpo.loss.kl_estimator", `unknown "k2" (known: k3, low_var_kl)`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { loadFails(t, c.body, c.sets, c.want...) })
	}
}

// TestLossKeys: a grpo.loss key given in the file is taken literally
// (clip_low: 0 is 0, and valid), an absent or null key is the documented
// default, and a value out of range names grpo.loss.KEY and its line.
func TestLossKeys(t *testing.T) {
	for _, c := range []struct {
		loss              string
		clipLow, clipHigh float64
		maxGradNorm       float64
	}{
		{"    mu: 1\n", 0.2, 0.2, 1},
		{"    clip_low: 0\n", 0, 0, 1}, // clip_high follows clip_low (rlcore.DefaultLoss)
		{"    clip_low: 0\n    clip_high: 0\n    max_grad_norm: 0\n", 0, 0, 0},
		{"    clip_low: null\n    clip_high: ~\n    max_grad_norm:\n", 0.2, 0.2, 1},
	} {
		cfg, err := Load(writeConfig(t, strings.Replace(valid, "  group_size: 4\n", "  group_size: 4\n  loss:\n"+c.loss, 1)), nil)
		if err != nil {
			t.Fatalf("%q: %v", c.loss, err)
		}
		l, err := cfg.GRPO.ResolvedLoss()
		if err != nil || l.ClipLow != c.clipLow || l.ClipHigh != c.clipHigh || l.MaxGradNorm != c.maxGradNorm {
			t.Errorf("%q: resolved %+v (%v), want clip_low %v, clip_high %v, max_grad_norm %v",
				c.loss, l, err, c.clipLow, c.clipHigh, c.maxGradNorm)
		}
	}
	for _, c := range []struct{ loss, want string }{
		{"    clip_low: 1\n", "run.yaml:8: invalid config: grpo.loss.clip_low: must be in [0, 1)"},
		{"    mu: 0\n", "run.yaml:8: invalid config: grpo.loss.mu: must be ≥ 1"},
		{"    mu: 101\n", "run.yaml:8: invalid config: grpo.loss.mu: must be in [1, 100]"},
		{"    type: ppo\n", "run.yaml:8: invalid config: grpo.loss.type: must be one of grpo, bnpo, dapo, dr_grpo"},
		{"    learning_rate: 0.1\n", "run.yaml:8: grpo.loss.learning_rate: unknown key; did you mean grpo.learning_rate"},
	} {
		_, err := Load(writeConfig(t, strings.Replace(valid, "  group_size: 4\n", "  group_size: 4\n  loss:\n"+c.loss, 1)), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.loss, err, c.want)
		}
	}
}

func TestOverrideNestedKey(t *testing.T) {
	cfg, err := Load(writeConfig(t, valid), []string{
		"grpo.group_size=8", "reward.alpha=0.25", "grpo.advantage.estimator=rloo", "retrieval.memory.enabled=true",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GRPO.GroupSize != 8 || cfg.Reward.Alpha != 0.25 || cfg.GRPO.Advantage.Estimator != "rloo" || !cfg.Retrieval.Memory.Enabled {
		t.Fatalf("overrides not applied: %+v", cfg.GRPO)
	}
	// Siblings of an overridden key are untouched.
	if cfg.GRPO.Advantage.Std != "population" || cfg.Reward.Beta != 1 {
		t.Fatalf("override clobbered siblings: %+v %+v", cfg.GRPO.Advantage, cfg.Reward)
	}
}

func TestOverrideErrorHasNoStaleLine(t *testing.T) {
	// An out-of-range value from --set must not point at the file line of the
	// value it replaced.
	_, err := Load(writeConfig(t, valid), []string{"grpo.group_size=1"})
	if err == nil || strings.Contains(err.Error(), ":6:") {
		t.Fatalf("got %v", err)
	}
}

// shippedConfigs lists the configs git tracks in dir: a file a user drops
// into configs/ is theirs, not shipped, and must not fail the tests (item 9
// of issue 33). Without git (or outside a clone) it lists every *.yaml and
// note says why.
func shippedConfigs(dir string) (files []string, note string, err error) {
	git, lerr := exec.LookPath("git")
	if lerr == nil {
		c := exec.Command(git, "ls-files", "-z", "--", "*.yaml")
		c.Dir = dir
		out, gerr := c.Output()
		if gerr == nil {
			for _, f := range strings.Split(string(out), "\x00") {
				if f != "" && !strings.Contains(f, "/") {
					files = append(files, filepath.Join(dir, f))
				}
			}
			return files, "", nil
		}
		lerr = fmt.Errorf("git ls-files in %s: %w", dir, gerr)
	}
	files, err = filepath.Glob(filepath.Join(dir, "*.yaml"))
	return files, fmt.Sprintf("cannot list the tracked configs (%v): loading every *.yaml in %s, untracked ones too", lerr, dir), err
}

// Only tracked configs count as shipped: an untracked one beside them is
// left out, whatever it holds.
func TestShippedConfigsAreTheTrackedOnes(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skipf("git is not installed (%v): cannot build the repository this test lists", err)
	}
	dir := t.TempDir()
	run := func(args ...string) {
		c := exec.Command(git, args...)
		c.Dir = dir
		c.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	run("init", "-q")
	for name, body := range map[string]string{"shipped.yaml": "a: 1\n", "mine.yaml": "not: [valid\n", "sub/deep.yaml": "b: 2\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("add", "shipped.yaml", "sub/deep.yaml")
	files, note, err := shippedConfigs(dir)
	if err != nil || note != "" {
		t.Fatalf("shippedConfigs: %v (%s)", err, note)
	}
	if want := []string{filepath.Join(dir, "shipped.yaml")}; !slices.Equal(files, want) {
		t.Fatalf("shipped configs %v, want %v (tracked, not in a subdirectory)", files, want)
	}
}

func TestShippedConfigsLoad(t *testing.T) {
	files, note, err := shippedConfigs(".")
	if err != nil {
		t.Fatal(err)
	}
	if note != "" {
		t.Log(note)
	}
	if len(files) == 0 {
		t.Fatal("no shipped configs found in configs/")
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// Configs on the shared data point at it beside the checkout:
			// skip with the reason on a plain clone, fail under CI=true.
			if strings.Contains(string(raw), "../shared/") {
				sharedtest.SharedDir(t)
			}
			if _, err := Load(f, nil); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		})
	}
}

// TestReferenceDocumentsEveryKey keeps configs/README.md (generated by
// scripts/configdoc) in step with the config structs.
func TestReferenceDocumentsEveryKey(t *testing.T) {
	doc, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Default().YAML()
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(out, &root); err != nil {
		t.Fatal(err)
	}
	for _, key := range leafKeys(root.Content[0], "") {
		if !strings.Contains(string(doc), "`"+key+"`") {
			t.Errorf("configs/README.md does not document %q: run go run ./scripts/configdoc > configs/README.md", key)
		}
	}
}

// leafKeys lists the dotted paths of the keys whose values are not sections.
func leafKeys(n *yaml.Node, prefix string) []string {
	var keys []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if v := n.Content[i+1]; v.Kind == yaml.MappingNode {
			keys = append(keys, leafKeys(v, key)...)
		} else {
			keys = append(keys, key)
		}
	}
	return keys
}

// floatKeys lists every float key: the scalar keys of the marshalled defaults
// that take 0.5 but refuse "abc" (independently of the validator's walk).
func floatKeys(t *testing.T) []string {
	t.Helper()
	out, err := Default().YAML()
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(out, &root); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode:
			walk(n.Content[0], prefix)
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				key := n.Content[i].Value
				if prefix != "" {
					key = prefix + "." + key
				}
				if n.Content[i+1].Kind == yaml.ScalarNode {
					c := Default()
					if c.Override(key+"=0.5") == nil && c.Override(key+"=abc") != nil && c.Override(key+"=.inf") == nil {
						keys = append(keys, key)
					}
				}
				walk(n.Content[i+1], key)
			}
		}
	}
	walk(&root, "")
	return keys
}

// Every float key refuses NaN and ±Inf (NaN < 0 is false, so a range check
// alone lets it through), naming the key and the override that set it.
func TestNonFiniteFloatsRejected(t *testing.T) {
	keys := floatKeys(t)
	t.Logf("%d float keys", len(keys))
	if len(keys) < 20 {
		t.Fatalf("found only %d float keys: %v", len(keys), keys)
	}
	p := writeConfig(t, valid)
	for _, key := range keys {
		for _, v := range []string{".nan", ".inf", "-.inf"} {
			set := key + "=" + v
			_, err := Load(p, []string{set})
			if err == nil {
				t.Errorf("--set %s: accepted", set)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, "--set "+set+":") || !strings.Contains(msg, key+":") {
				t.Errorf("--set %s: error %q does not name the override and the key", set, msg)
			}
		}
	}
}

// A non-finite value in the file is reported with the file's line.
func TestNonFiniteInFileNamesLine(t *testing.T) {
	cases := []struct{ body, want string }{
		{valid + "retrieval:\n  k1: .nan\n", "run.yaml:10: invalid config: retrieval.k1: must be a finite number"},
		{strings.Replace(valid, "  train: train.jsonl\n", "  train: train.jsonl\n  eval_fraction: .nan\n", 1),
			"run.yaml:5: invalid config: data.eval_fraction: must be a finite number"},
		{strings.Replace(valid, "  group_size: 4\n", "  group_size: 4\n  learning_rate: .inf\n", 1),
			"run.yaml:7: invalid config: grpo.learning_rate: must be a finite number, got +Inf"},
		{strings.Replace(valid, "  group_size: 4\n", "  group_size: 4\n  guards:\n    penalty: -.inf\n", 1),
			"run.yaml:8: invalid config: grpo.guards.penalty"},
		{strings.Replace(valid, "  group_size: 4\n", "  group_size: 4\n  temperature: .nan\n", 1),
			"run.yaml:7: invalid config: grpo.temperature"},
		// Item 6 of issue 33: finite but absurd learning rates trained (1e100)
		// or overflowed mid-run (1e200); both are refused at load.
		{strings.Replace(valid, "  group_size: 4\n", "  group_size: 4\n  learning_rate: 1e100\n", 1),
			"run.yaml:7: invalid config: grpo.learning_rate: must be in (0, 1], got 1e+100"},
		{strings.Replace(valid, "  group_size: 4\n", "  group_size: 4\n  learning_rate: 1e200\n", 1),
			"run.yaml:7: invalid config: grpo.learning_rate: must be in (0, 1], got 1e+200"},
		{strings.Replace(valid, "  group_size: 4\n", "  group_size: 4\n  sft: {epochs: 1, batch_size: 2, learning_rate: 5}\n", 1),
			"run.yaml:7: invalid config: grpo.sft.learning_rate: must be in (0, 1], got 5"},
	}
	for _, c := range cases {
		_, err := Load(writeConfig(t, c.body), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want %q", err, c.want)
		}
	}
}

// Sizes have upper bounds: group_size 1e9 used to pass and exhaust memory at step 1.
func TestSizeUpperBounds(t *testing.T) {
	cases := []struct {
		body string
		sets []string
		want string
	}{
		{strings.Replace(valid, "group_size: 4", "group_size: 1e9", 1), nil, "run.yaml:6: invalid config: grpo.group_size: must be ≤ 1024"},
		{valid, []string{"grpo.prompts_per_step=100000", "grpo.group_size=1000"}, "rollouts per step"},
		{valid, []string{"grpo.max_tokens=1000000000"}, "grpo.max_tokens: must be in [1, 32768]"},
		{valid, []string{"grpo.steps=2000000000"}, "grpo.steps"},
		{valid, []string{"rollout.concurrency=100000000"}, "rollout.concurrency"},
		{valid, []string{"retrieval.candidates=1000000000"}, "retrieval.candidates"},
		{valid, []string{"rollout.cache_size=1000000000"}, "rollout.cache_size"},
	}
	for _, c := range cases {
		_, err := Load(writeConfig(t, c.body), c.sets)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.sets, err, c.want)
		}
	}
}

// An invalid --set value is blamed on the override, not on the file line of
// the section it sits in.
func TestOverrideValidationNamesOverride(t *testing.T) {
	p := writeConfig(t, valid)
	for set, want := range map[string]string{
		"grpo.group_size=1":   "--set grpo.group_size=1: invalid config: grpo.group_size: must be ≥ 2",
		"grpo.group_size=abc": "--set grpo.group_size=abc: ",
		"grpo.sft.epochs=2":   "--set grpo.sft.",
		"reward.alpha=-2":     "--set reward.alpha=-2: invalid config: reward.alpha",
	} {
		sets := []string{set}
		if set == "grpo.sft.epochs=2" {
			sets = []string{"grpo.sft.batch_size=0", set}
		}
		_, err := Load(p, sets)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "run.yaml") {
			t.Errorf("--set %s: got %v, want %q and no file line", set, err, want)
		}
	}
}

// "--set run.name=" used to leave the name unchanged (YAML reads an empty
// value as null); it sets the empty string, which validation refuses, and an
// explicit null is refused outright.
func TestOverrideEmptyAndNull(t *testing.T) {
	p := writeConfig(t, valid)
	if _, err := Load(p, []string{"run.name="}); err == nil || !strings.Contains(err.Error(), "--set run.name=: invalid config: run.name") {
		t.Errorf("run.name=: got %v", err)
	}
	if _, err := Load(p, []string{"run.name=~"}); err == nil || !strings.Contains(err.Error(), "null") {
		t.Errorf("run.name=~: got %v", err)
	}
	cfg, err := Load(p, []string{"data.eval="})
	if err != nil || cfg.Data.Eval != "" {
		t.Errorf("data.eval=: got %q, %v", cfg.Data.Eval, err)
	}
	if _, err := Load(p, []string{"grpo.group_size="}); err == nil || !strings.Contains(err.Error(), "--set grpo.group_size=") {
		t.Errorf("grpo.group_size=: got %v", err)
	}
}

// yaml.v3 truncates 8.7 to 8 and decodes -.inf as MinInt64 into an int field;
// both are refused, naming the key (and the line or the override).
func TestNonIntegralIntegerRejected(t *testing.T) {
	_, err := Load(writeConfig(t, strings.Replace(valid, "group_size: 4", "group_size: 8.7", 1)), nil)
	if err == nil || !strings.Contains(err.Error(), "run.yaml:6: grpo.group_size: want an integer, got 8.7") {
		t.Errorf("file: got %v", err)
	}
	for _, set := range []string{"grpo.sft.batch_size=-.inf", "grpo.steps=0.5", "trainer.embedded.init_seed=.nan"} {
		_, err := Load(writeConfig(t, valid), []string{set})
		key, _, _ := strings.Cut(set, "=")
		if err == nil || !strings.Contains(err.Error(), "--set "+set+": ") || !strings.Contains(err.Error(), key+": want an integer") {
			t.Errorf("--set %s: got %v", set, err)
		}
	}
	// Integral floats stay accepted (1e3 is a common way to write 1000).
	cfg, err := Load(writeConfig(t, valid), []string{"grpo.steps=1e3"})
	if err != nil || cfg.GRPO.Steps != 1000 {
		t.Errorf("grpo.steps=1e3: got %d, %v", cfg.GRPO.Steps, err)
	}
}

// A literal trainer.token used to land in the run's config.yaml (0644) and
// its HTML report; "$ENV" references stay as written, and a redacted token
// read back is refused with the fix.
func TestTokenRedacted(t *testing.T) {
	p := writeConfig(t, valid+"trainer:\n  endpoint: http://127.0.0.1:1\n  token: s3cr3t-value\n")
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Trainer.Token != "s3cr3t-value" {
		t.Fatalf("the loaded config must keep the token for use: %q", cfg.Trainer.Token)
	}
	out, err := cfg.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "s3cr3t") || !strings.Contains(string(out), "token: <redacted>") {
		t.Errorf("YAML keeps the token:\n%s", out)
	}
	cfg.Trainer.Token = "$HIMES_TRAINER_TOKEN"
	if out, _ := cfg.YAML(); !strings.Contains(string(out), "token: $HIMES_TRAINER_TOKEN") {
		t.Errorf("an $ENV reference must be kept:\n%s", out)
	}
	// The saved (redacted) config cannot be used as is.
	saved := writeConfig(t, valid+"trainer:\n  endpoint: http://127.0.0.1:1\n  token: <redacted>\n")
	if _, err := Load(saved, nil); err == nil || !strings.Contains(err.Error(), "trainer.token: was redacted") {
		t.Errorf("redacted token accepted: %v", err)
	}
	if _, err := Load(saved, []string{"trainer.token=$X"}); err != nil {
		t.Errorf("--set trainer.token=$X over a redacted one: %v", err)
	}
}

// A value of the wrong type, a key in the wrong place or a misspelled one is
// reported as FILE:LINE: dotted.key: what was wanted, in YAML words (yaml.v3
// alone says "cannot unmarshal !!str `three` into int" or names a Go type
// such as retrieval.Config). The expected messages are written by hand.
func TestTypeErrorsNameTheKey(t *testing.T) {
	cases := []struct{ name, body, want string }{
		{"string for an integer", "grpo:\n  group_size: 4\n  steps: three\n",
			`run.yaml:3: grpo.steps: want an integer, got "three"`},
		{"scalar for a section", "retrieval: bm25\n",
			`run.yaml:1: retrieval: want a section of keys (keys such as method, top_k, candidates, k1), got "bm25"`},
		{"misspelled key", "grpo:\n  group_sise: 4\n",
			"run.yaml:2: grpo.group_sise: unknown key; did you mean grpo.group_size?"},
		{"dash for underscore", "grpo:\n  group-size: 4\n",
			"run.yaml:2: grpo.group-size: unknown key; did you mean grpo.group_size?"},
		{"key in the wrong section", "grpo:\n  alpha: 0.5\n",
			"run.yaml:2: grpo.alpha: unknown key; did you mean reward.alpha?"},
		{"misspelled section", "rewards:\n  alpha: 0.5\n",
			"run.yaml:1: rewards: unknown key; did you mean reward?"},
		{"string for a number", "reward:\n  alpha: half\n",
			`run.yaml:2: reward.alpha: want a number, got "half"`},
		{"word for a boolean", "run:\n  tensorboard: maybe\n",
			`run.yaml:2: run.tensorboard: want true or false, got "maybe"`},
		{"bad duration", "rollout:\n  ollama:\n    timeout: soon\n",
			`run.yaml:3: rollout.ollama.timeout: want a duration such as 30s, 1m30s or 500ms, got "soon"`},
		{"list for a string", "run:\n  name: [a, b]\n",
			"run.yaml:2: run.name: want a string, got a list"},
		{"section for a number", "reward:\n  alpha:\n    x: 1\n",
			"run.yaml:3: reward.alpha: want a number, got a section of keys"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeConfig(t, c.body)
			_, err := Load(p, nil)
			if err == nil {
				t.Fatal("want an error")
			}
			got := strings.TrimPrefix(err.Error(), filepath.Dir(p)+string(filepath.Separator))
			if got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
			if strings.Contains(got, "unmarshal") || strings.Contains(got, "!!") {
				t.Errorf("yaml.v3 wording leaked: %s", got)
			}
		})
	}
	// The same words for --set, without a line.
	_, err := Load(writeConfig(t, valid), []string{"grpo.steps=three"})
	if want := `--set grpo.steps=three: grpo.steps: want an integer, got "three"`; err == nil || err.Error() != want {
		t.Errorf("--set: got %v, want %s", err, want)
	}
}

func TestClosestKey(t *testing.T) {
	keys := []string{"group_size", "steps", "lr", "advantage"}
	for typo, want := range map[string]string{
		"group_sise": "group_size", // one substitution
		"groupsize":  "group_size", // one deletion
		"GROUP_SIZE": "group_size", // case
		"step":       "steps",      // one insertion in a short key
		"advantge":   "advantage",
		"lrr":        "lr",
		"epochs":     "", // nothing close: no guess
		"stop":       "", // two edits from steps, too far for 4 letters
	} {
		if got := closestKey(keys, typo); got != want {
			t.Errorf("closestKey(%q) = %q, want %q", typo, got, want)
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance(kitten, sitting) = %d, want 3", d)
	}
}

// loadFails checks that Load refuses body with sets, with an error naming
// every want.
func loadFails(t *testing.T, body string, sets []string, want ...string) {
	t.Helper()
	_, err := Load(writeConfig(t, body), sets)
	if err == nil {
		t.Fatal("want an error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

// Defaults applies overrides to the defaults and validates as Load does,
// without asking for training data: a relative path resolves against the
// working directory, a missing file and a bad value are refused by key.
func TestDefaultsAppliesOverridesWithoutAConfigFile(t *testing.T) {
	cfg, err := Defaults([]string{"retrieval.top_k=7", "data.kb=config_test.go"})
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if cfg.Retrieval.TopK != 7 || cfg.Data.KB != filepath.Join(wd, "config_test.go") || cfg.Data.Train != "" {
		t.Errorf("top_k %d, kb %q, train %q", cfg.Retrieval.TopK, cfg.Data.KB, cfg.Data.Train)
	}
	for set, want := range map[string]string{
		"data.kb=no-such-file.jsonl": "data.kb",
		"reward.alpha=-1":            "reward.alpha",
		"retrieval.topk=2":           "retrieval.topk",
	} {
		if _, err := Defaults([]string{set}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want an error naming %s", set, err, want)
		}
	}
}
