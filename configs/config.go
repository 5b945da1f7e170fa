// Package configs composes the run configuration from the packages' own config
// sections, loads it strictly from YAML with command-line overrides, and
// validates it before any work starts. The YAML files beside this file are the
// shipped run configs.
package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/fielderr"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// RunSection names the run and where its outputs go.
type RunSection struct {
	// Name of the run; its directory is OutputDir/Name (at most 200 bytes).
	Name string `yaml:"name"`
	// OutputDir holds run directories (default "checkpoints", git-ignored).
	OutputDir string `yaml:"output_dir"`
	// Seed drives every random choice of the run (data order, sampling seeds).
	Seed int64 `yaml:"seed"`
	// TensorBoard writes the metrics (same names as metrics.jsonl, nested
	// keys joined with '/') and each evaluation's samples table as
	// TensorBoard event files under <run>/tb/ (`tensorboard --logdir`;
	// W&B imports them with `wandb sync --sync-tensorboard`).
	TensorBoard bool `yaml:"tensorboard"`
}

// Config is a whole run configuration. Each section is owned by its package.
type Config struct {
	Run       RunSection       `yaml:"run"`
	Data      datasets.Config  `yaml:"data"`
	Retrieval retrieval.Config `yaml:"retrieval"`
	Rollout   rollout.Config   `yaml:"rollout"`
	Reward    hser.Config      `yaml:"reward"`
	GRPO      grpo.Config      `yaml:"grpo"`
	Trainer   trainer.Config   `yaml:"trainer"`

	// Source is the file the config was loaded from ("" for defaults).
	Source string `yaml:"-"`
	// lines maps dotted key paths to their line in Source, for error messages.
	lines map[string]int
	// overrides maps each key set by --set to the override as given, so a
	// validation error blames the override rather than the file.
	overrides map[string]string
}

// Default returns every package's defaults: the one place they are composed.
func Default() Config {
	return Config{
		Run:       RunSection{Name: "run", OutputDir: "checkpoints", Seed: 1, TensorBoard: true},
		Data:      datasets.DefaultConfig(),
		Retrieval: retrieval.DefaultConfig(),
		Rollout:   rollout.DefaultConfig(),
		Reward:    hser.DefaultConfig(),
		GRPO:      grpo.DefaultConfig(),
		Trainer:   trainer.DefaultConfig(),
	}
}

// Load reads path strictly (unknown keys and wrong types are errors naming
// the file and line), applies overrides of the form "section.key=value" in
// order, resolves relative data paths against the config file's directory,
// and validates the result.
func Load(path string, overrides []string) (Config, error) {
	cfg := Default()
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	cfg.Source = path
	if err := decodeStrict(raw, &cfg); err != nil {
		if ke, ok := err.(*keyError); ok {
			return cfg, fmt.Errorf("%s:%d: %w", path, ke.Line, err)
		}
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err == nil {
		cfg.lines = map[string]int{}
		collectLines(&root, "", cfg.lines)
	}
	for _, o := range overrides {
		if err := cfg.Override(o); err != nil {
			return cfg, err
		}
	}
	cfg.resolvePaths(filepath.Dir(path))
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Defaults returns the defaults with overrides applied, for a command whose
// --config is optional, so that a --set given without --config changes what
// it says instead of being dropped. Relative paths resolve against the
// working directory, where they were typed, and everything is validated as
// Load does, except that no training data is required: the command may
// never read it.
func Defaults(overrides []string) (Config, error) {
	cfg := Default()
	for _, o := range overrides {
		if err := cfg.Override(o); err != nil {
			return cfg, err
		}
	}
	cfg.resolvePaths(".")
	if err := cfg.validate(false); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Override applies one "dotted.key=value" override; value is parsed as YAML,
// so numbers, booleans and lists work as they would in the file.
func (c *Config) Override(o string) error {
	key, value, ok := strings.Cut(o, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("--set %q: want key=value, e.g. grpo.group_size=8", o)
	}
	// YAML reads an empty value (and null, ~) as null, and decoding null over
	// a field leaves it unchanged: "--set run.name=" would silently do
	// nothing. An empty value is the empty string; an explicit null is refused.
	if strings.TrimSpace(value) == "" {
		value = `""`
	}
	// Build {a: {b: {c: value}}} and decode it over the config strictly: only
	// the named key changes, and an unknown key is reported as such.
	var valNode yaml.Node
	if err := yaml.Unmarshal([]byte(value), &valNode); err != nil {
		return fmt.Errorf("--set %s: value %q is not valid YAML: %w", key, value, err)
	}
	if len(valNode.Content) != 1 || valNode.Content[0].Tag == "!!null" {
		return fmt.Errorf("--set %s=%s: null changes nothing; give a value (%s=\"\" for an empty string)", key, value, key)
	}
	leaf := valNode.Content[0]
	parts := strings.Split(key, ".")
	node := leaf
	for i := len(parts) - 1; i >= 0; i-- {
		node = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: parts[i]}, node}}
	}
	doc, err := yaml.Marshal(node)
	if err != nil {
		return fmt.Errorf("--set %s: %w", key, err)
	}
	if err := decodeStrict(doc, c); err != nil {
		if _, ok := err.(*keyError); ok {
			return fmt.Errorf("--set %s=%s: %w", key, value, err)
		}
		return fmt.Errorf("--set %s=%s: %w", key, value, stripLine(err))
	}
	// The value no longer comes from the file: forget its lines (and those
	// of the keys under it, when a whole section was set).
	for k := range c.lines {
		if k == key || strings.HasPrefix(k, key+".") {
			delete(c.lines, k)
		}
	}
	if c.overrides == nil {
		c.overrides = map[string]string{}
	}
	c.overrides[key] = o
	return nil
}

// Validate checks every section and that the input files exist. A field error
// names the dotted key and, when it came from the file, its line.
func (c *Config) Validate() error { return c.validate(true) }

// validate is Validate; requireTrain false accepts an empty data.train.
func (c *Config) validate(requireTrain bool) error {
	// NaN passes every range check written as a comparison (NaN < 0 is
	// false), so non-finite floats are refused here, for every key at once.
	if err := checkFinite(reflect.ValueOf(*c), ""); err != nil {
		return c.fieldErr(err)
	}
	if len(c.Run.Name) > maxRunName {
		// The name is a directory name (NAME_MAX 255 with room for suffixes); a
		// long one is quoted only in part.
		return c.fieldErr(fielderr.New("run.name", "is %d bytes, at most %d (it names the run directory): %.40q…", len(c.Run.Name), maxRunName, c.Run.Name))
	}
	if c.Run.Name == "" || strings.ContainsAny(c.Run.Name, `/\`) || c.Run.Name == "." || c.Run.Name == ".." {
		return c.fieldErr(fielderr.New("run.name", "must be a non-empty name without path separators, got %q", c.Run.Name))
	}
	if c.Run.OutputDir == "" {
		return c.fieldErr(fielderr.New("run.output_dir", "is required"))
	}
	sections := []struct {
		name string
		err  error
	}{
		{"data", c.validateData(requireTrain)},
		{"retrieval", c.Retrieval.Validate()},
		{"rollout", c.Rollout.Validate()},
		{"reward", c.Reward.Validate()},
		{"grpo", c.GRPO.Validate()},
		{"trainer", c.Trainer.Validate()},
	}
	for _, s := range sections {
		if s.err != nil {
			return c.fieldErr(fielderr.Prefix(s.name, s.err))
		}
	}
	for _, f := range c.inputFiles() {
		if *f.path == "" {
			continue
		}
		if _, err := os.Stat(*f.path); err != nil {
			return c.fieldErr(fielderr.New(f.key, "file %s: %v", *f.path, errors.Unwrap(err)))
		}
	}
	return nil
}

func (c *Config) validateData(requireTrain bool) error {
	if requireTrain {
		return c.Data.Validate()
	}
	return c.Data.ValidateSettings()
}

type pathField struct {
	key  string
	path *string
}

// inputFiles lists the config fields that name files the run reads.
func (c *Config) inputFiles() []pathField {
	return []pathField{
		{"data.train", &c.Data.Train},
		{"data.eval", &c.Data.Eval},
		{"data.sft", &c.Data.SFT},
		{"data.kb", &c.Data.KB},
		{"retrieval.memory.partitions", &c.Retrieval.Memory.Partitions},
		{"retrieval.memory.taxonomy", &c.Retrieval.Memory.Taxonomy},
		{"retrieval.ollama_launch.model_dir", &c.Retrieval.OllamaLaunch.ModelDir},
	}
}

// resolvePaths makes relative input paths absolute, so a config works
// from any working directory. A path written in the file is relative to the
// config's directory (dir); one given by a --set override is relative to
// the working directory, where it was typed, like every other path on the
// command line (--data, --out). Output locations (run.output_dir, cache
// directories) stay relative to the working directory.
func (c *Config) resolvePaths(dir string) {
	// Absolute, so that the config snapshot in a run directory still points
	// at the same files from any working directory.
	abs := func(key, p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		base := dir
		if c.overridden(key) {
			base = "."
		}
		if a, err := filepath.Abs(filepath.Join(base, p)); err == nil {
			return a
		}
		return filepath.Join(base, p)
	}
	for _, f := range c.inputFiles() {
		*f.path = abs(f.key, *f.path)
	}
	c.Retrieval.Index = abs("retrieval.index", c.Retrieval.Index)
}

// overridden reports whether key's value came from a --set override: of
// the key itself or of a section above it.
func (c *Config) overridden(key string) bool {
	for k := range c.overrides {
		if k == key || strings.HasPrefix(key, k+".") {
			return true
		}
	}
	return false
}

// fieldErr adds the file and line to a field error when the key came from the file.
func (c *Config) fieldErr(err error) error {
	var fe *fielderr.Error
	if !errors.As(err, &fe) {
		return fmt.Errorf("invalid config: %w", err)
	}
	if o, ok := c.overrideOf(fe.Field); ok {
		if len(o) > 80 {
			o = fmt.Sprintf("%.60s… (%d bytes)", o, len(o)) // a huge value is not echoed whole
		}
		return fmt.Errorf("--set %s: invalid config: %w", o, err)
	}
	// Walk up the dotted path to the nearest key present in the file.
	for key := fe.Field; key != ""; {
		if line, ok := c.lines[key]; ok && c.Source != "" {
			return fmt.Errorf("%s:%d: invalid config: %w", c.Source, line, err)
		}
		i := strings.LastIndex(key, ".")
		if i < 0 {
			break
		}
		key = key[:i]
	}
	if c.Source != "" {
		return fmt.Errorf("%s: invalid config: %w", c.Source, err)
	}
	return fmt.Errorf("invalid config: %w", err)
}

// overrideOf returns the --set override that set field, a section above it
// or a key below it (a cross-field check reports the section).
func (c *Config) overrideOf(field string) (string, bool) {
	if o, ok := c.overrides[field]; ok {
		return o, true
	}
	for key := field; ; {
		i := strings.LastIndex(key, ".")
		if i < 0 {
			break
		}
		key = key[:i]
		if o, ok := c.overrides[key]; ok {
			return o, true
		}
	}
	best := ""
	for k := range c.overrides {
		if strings.HasPrefix(k, field+".") && (best == "" || k < best) {
			best = k
		}
	}
	if best != "" {
		return c.overrides[best], true
	}
	return "", false
}

// checkFinite walks every float of the config (by its YAML key) and reports
// the first NaN or ±Inf, or value outside its key's range (floatRanges), as a
// field error.
func checkFinite(v reflect.Value, path string) error {
	join := func(name string) string {
		if path == "" {
			return name
		}
		if name == "" {
			return path
		}
		return path + "." + name
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return checkFloat(path, v.Float())
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return checkFinite(v.Elem(), path)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if tag == "-" {
				continue
			}
			name := tag
			if name == "" && !strings.Contains(f.Tag.Get("yaml"), "inline") {
				name = strings.ToLower(f.Name)
			}
			if err := checkFinite(v.Field(i), join(name)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := checkFinite(v.Index(i), join(strconv.Itoa(i))); err != nil {
				return err
			}
		}
	case reflect.Map:
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
		for _, k := range keys {
			if err := checkFinite(v.MapIndex(k), join(fmt.Sprint(k))); err != nil {
				return err
			}
		}
	}
	return nil
}

// YAML returns the fully resolved config as YAML, with a literal
// trainer.token redacted ("$ENV" references are kept as written).
func (c Config) YAML() ([]byte, error) {
	c.Trainer = c.Trainer.Redacted()
	return yaml.Marshal(c)
}

func decodeStrict(raw []byte, out *Config) error {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err == nil && len(root.Content) == 1 {
		if err := checkTypes(root.Content[0], reflect.TypeOf(*out), ""); err != nil {
			return err
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file means all defaults
		}
		return cleanYAMLError(err)
	}
	return nil
}

func isIntKind(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// fieldByYAMLKey finds the struct field a YAML key decodes into, looking
// through inline structs.
func fieldByYAMLKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			if g, ok := fieldByYAMLKey(f.Type, key); ok {
				return g, true
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

var typeNameRe = regexp.MustCompile(` in type [\w.]+`)

// cleanYAMLError turns yaml.v3's "yaml: unmarshal errors:\n  line 3: field x
// not found in type grpo.Config" into "line 3: unknown key \"x\"".
func cleanYAMLError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, m := range te.Errors {
		m = typeNameRe.ReplaceAllString(m, "")
		if strings.Contains(m, "field ") && strings.HasSuffix(m, " not found") {
			m = strings.Replace(m, "field ", "unknown key \"", 1)
			m = strings.TrimSuffix(m, " not found") + "\""
		}
		msgs = append(msgs, m)
	}
	return errors.New(strings.Join(msgs, "; "))
}

var lineRe = regexp.MustCompile(`line \d+: `)

func stripLine(err error) error { return errors.New(lineRe.ReplaceAllString(err.Error(), "")) }

// collectLines records the line of every mapping key under its dotted path.
func collectLines(n *yaml.Node, prefix string, out map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			collectLines(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			key := k.Value
			if prefix != "" {
				key = prefix + "." + k.Value
			}
			out[key] = k.Line
			collectLines(n.Content[i+1], key, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			collectLines(c, prefix+"."+strconv.Itoa(i), out)
		}
	}
}

// maxRunName bounds run.name in bytes.
const maxRunName = 200
