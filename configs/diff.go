package configs

import (
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// absent stands for a key one of two compared configs lacks.
const absent = "(absent)"

// Change is one key whose value differs between two rendered configs.
type Change struct {
	Key      string // dotted path, e.g. grpo.group_size
	Old, New string // YAML values; "(absent)" when the key is missing on one side
}

func (c Change) String() string {
	if strings.HasSuffix(c.Key, ".token") || c.Key == "token" {
		return c.Key + " (changed; value not shown)"
	}
	return fmt.Sprintf("%s: %s → %s", c.Key, c.Old, c.New)
}

// Diff compares two configs as rendered YAML (a run's saved config.yaml and
// a new one) key by key, ignoring the listed keys, and returns the changes
// sorted by key. Lists compare as whole values.
func Diff(oldYAML, newYAML []byte, ignore ...string) ([]Change, error) {
	fa, err := leaves(oldYAML)
	if err != nil {
		return nil, fmt.Errorf("saved config: %w", err)
	}
	fb, err := leaves(newYAML)
	if err != nil {
		return nil, fmt.Errorf("new config: %w", err)
	}
	return diffLeaves(fa, fb, ignore...), nil
}

// leaves maps every leaf of a rendered config to its dotted key and its
// value in flow-style YAML.
func leaves(raw []byte) (map[string]string, error) {
	var m map[string]any
	if err := yaml.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	out := map[string]string{}
	flatten("", m, out)
	return out, nil
}

// diffLeaves is Diff on flattened configs.
func diffLeaves(fa, fb map[string]string, ignore ...string) []Change {
	skip := map[string]bool{}
	for _, k := range ignore {
		skip[k] = true
	}
	var out []Change
	for k, va := range fa {
		vb, ok := fb[k]
		if !ok {
			vb = absent
		}
		if va != vb && !skip[k] {
			out = append(out, Change{Key: k, Old: va, New: vb})
		}
	}
	for k, vb := range fb {
		if _, ok := fa[k]; !ok && !skip[k] {
			out = append(out, Change{Key: k, Old: absent, New: vb})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// flatten maps every leaf of a decoded YAML mapping to its dotted key and
// its value in flow-style YAML.
func flatten(prefix string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok && (len(m) > 0 || prefix == "") {
		for k, sub := range m {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, sub, out)
		}
		return
	}
	out[prefix] = flowYAML(v)
}

func flowYAML(v any) string {
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	setFlow(n)
	b, err := yaml.Marshal(n)
	if err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSpace(string(b))
}

func setFlow(n *yaml.Node) {
	if n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode {
		n.Style = yaml.FlowStyle
	}
	for _, c := range n.Content {
		setFlow(c)
	}
}
