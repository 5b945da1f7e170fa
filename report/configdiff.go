package report

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// DiffRow is one config key whose value differs between the runs of a
// report, with its value in each run (in the runs' order).
type DiffRow struct {
	Key    string
	Values []string
}

// absent marks a key a run's config does not have (or a run without config.yaml).
const absent = "–"

// ConfigDiff lists the config keys (dotted, as --set takes them) whose values
// differ between the runs, sorted by key; run.name is left out (the runs are
// labeled by it). Nil with fewer than two runs, or when no run has a config.
func ConfigDiff(sums []Summary) ([]DiffRow, error) {
	if len(sums) < 2 {
		return nil, nil
	}
	flat := make([]map[string]string, len(sums))
	keys := map[string]bool{}
	haveConfig := false
	for i, s := range sums {
		flat[i] = map[string]string{}
		if s.Config == "" {
			continue
		}
		haveConfig = true
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(s.Config), &doc); err != nil {
			return nil, fmt.Errorf("config.yaml of %s: %w", s.Dir, err)
		}
		flatten("", doc, flat[i])
		for k := range flat[i] {
			keys[k] = true
		}
	}
	if !haveConfig {
		return nil, nil
	}
	var out []DiffRow
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if k == "run.name" {
			continue
		}
		row := DiffRow{Key: k, Values: make([]string, len(sums))}
		same := true
		for i := range sums {
			v, ok := flat[i][k]
			if !ok {
				v = absent
			}
			if k == "trainer.token" && v != "" && v != absent && !strings.HasPrefix(v, "$") {
				v = "(literal, redacted)"
			}
			row.Values[i] = v
			same = same && v == row.Values[0]
		}
		if !same {
			out = append(out, row)
		}
	}
	return out, nil
}

// flatten writes the scalars of a decoded YAML mapping under dotted keys;
// lists are kept whole, as compact JSON.
func flatten(prefix string, v any, out map[string]string) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, x, out)
		}
	case nil:
		out[prefix] = "null"
	case string:
		out[prefix] = t
	case []any:
		b, err := json.Marshal(t)
		if err != nil {
			b = []byte(fmt.Sprint(t))
		}
		out[prefix] = string(b)
	default:
		out[prefix] = fmt.Sprint(t)
	}
}
