package configs

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// keyError is a config value that cannot be decoded into its key: the key's
// dotted path, the YAML line, and what was wanted in words a user of the
// YAML file knows (no Go type names).
type keyError struct {
	Line int
	Key  string
	Msg  string
}

func (e *keyError) Error() string {
	if e.Key == "" {
		return e.Msg
	}
	return e.Key + ": " + e.Msg
}

// checkTypes walks the YAML tree against the Config type before yaml.v3
// decodes it, so an unknown key or a value of the wrong type is reported with
// its dotted key (yaml.v3 says "cannot unmarshal !!str `three` into int", or
// names a Go type such as retrieval.Config). It also refuses a non-integral
// float for an integer key, which yaml.v3 would truncate (8.7 → 8) or turn
// into MinInt64 (-.inf) without a word.
func checkTypes(n *yaml.Node, t reflect.Type, path string) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil // decoding null leaves the default
	}
	// A type with its own YAML decoding (e.g. a host list that takes one
	// string or a list) says itself what it accepts.
	if reflect.PointerTo(t).Implements(reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()) {
		if err := n.Decode(reflect.New(t).Interface()); err != nil {
			return &keyError{n.Line, path, fmt.Sprintf("cannot use %s here: %s", describeNode(n), yamlReason(err))}
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeOf(time.Duration(0)) {
			break
		}
		if n.Kind != yaml.MappingNode {
			return &keyError{n.Line, path, fmt.Sprintf("want a section of keys (%s), got %s", keyList(t, 4), describeNode(n))}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" && k.Tag == "!!merge" {
				continue // merge keys are checked by the decoder
			}
			key := join(path, k.Value)
			f, ok := fieldByYAMLKey(t, k.Value)
			if !ok {
				return &keyError{k.Line, key, unknownKeyMsg(t, path, k.Value)}
			}
			if err := checkTypes(v, f.Type, key); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return &keyError{n.Line, path, fmt.Sprintf("want a mapping of %s, got %s", wantOf(t.Elem()), describeNode(n))}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := checkTypes(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			return &keyError{n.Line, path, fmt.Sprintf("want a list of %s, got %s", wantOf(t.Elem()), describeNode(n))}
		}
		for i, c := range n.Content {
			if err := checkTypes(c, t.Elem(), path+"."+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Interface:
		return nil
	}
	// A scalar key.
	if n.Kind != yaml.ScalarNode {
		return &keyError{n.Line, path, fmt.Sprintf("want %s, got %s", wantOf(t), describeNode(n))}
	}
	if n.Tag == "!!float" && isIntKind(t.Kind()) && t != reflect.TypeOf(time.Duration(0)) {
		var f float64
		if err := n.Decode(&f); err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
			return &keyError{n.Line, path, fmt.Sprintf("want an integer, got %s", describeNode(n))}
		}
	}
	if err := n.Decode(reflect.New(t).Interface()); err != nil {
		return &keyError{n.Line, path, fmt.Sprintf("want %s, got %s", wantOf(t), describeNode(n))}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// wantOf says in YAML terms what a value of type t looks like.
func wantOf(t reflect.Type) string {
	if t == reflect.TypeOf(time.Duration(0)) {
		return "a duration such as 30s, 1m30s or 500ms"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list of " + plural(wantOf(t.Elem()))
	case reflect.Map:
		return "a mapping of keys to " + plural(wantOf(t.Elem()))
	case reflect.Struct:
		return "a section of keys"
	}
	return "a value"
}

// plural turns "an integer" into "integers" for "a list of integers".
func plural(s string) string {
	switch {
	case strings.HasPrefix(s, "an "):
		return strings.TrimPrefix(s, "an ") + "s"
	case strings.HasPrefix(s, "a "):
		return strings.TrimPrefix(s, "a ") + "s"
	}
	return s
}

// describeNode quotes a string value and names a section or a list.
func describeNode(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section of keys"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 60 {
			v = v[:57] + "..."
		}
		if n.Tag == "!!str" {
			return strconv.Quote(v)
		}
		return v
	}
	return "a value"
}

// yamlReason keeps the sentence of a yaml.v3 error without its "yaml:
// unmarshal errors: line N:" frame.
func yamlReason(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && strings.HasPrefix(s, "yaml:") {
		s = s[i+2:]
	}
	return typeNameRe.ReplaceAllString(s, "")
}

// yamlKeys lists the YAML keys of a section, inline sections included.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			keys = append(keys, yamlKeys(f.Type)...)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	return keys
}

// keyList names the first max keys of a section, for "want a section (...)".
func keyList(t reflect.Type, max int) string {
	keys := yamlKeys(t)
	if len(keys) > max {
		return "keys such as " + strings.Join(keys[:max], ", ")
	}
	return "keys " + strings.Join(keys, ", ")
}

// unknownKeyMsg says a key is unknown and suggests the key meant: a close
// spelling in the same section, else the same key in another section.
func unknownKeyMsg(t reflect.Type, section, key string) string {
	if s := closestKey(yamlKeys(t), key); s != "" {
		return fmt.Sprintf("unknown key; did you mean %s?", join(section, s))
	}
	if elsewhere := keyPaths(reflect.TypeOf(Config{}), "", key); len(elsewhere) > 0 {
		return fmt.Sprintf("unknown key; did you mean %s?", strings.Join(elsewhere, " or "))
	}
	where := "this section"
	if section != "" {
		where = section
	}
	return fmt.Sprintf("unknown key; %s has %s", where, strings.Join(yamlKeys(t), ", "))
}

// closestKey returns the key nearest to typo by edit distance, after
// folding case and '-' to '_', if it is close enough to be the one meant (at
// most one edit in four characters, and never more than 3).
func closestKey(keys []string, typo string) string {
	fold := func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
	best, bestD := "", math.MaxInt
	for _, k := range keys {
		if d := editDistance(fold(k), fold(typo)); d < bestD {
			best, bestD = k, d
		}
	}
	limit := min(3, max(1, len(typo)/4))
	if bestD <= limit {
		return best
	}
	return ""
}

// keyPaths lists the dotted paths of every key named key anywhere in the
// config, sorted, for a key written in the wrong section.
func keyPaths(t reflect.Type, path, key string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeOf(time.Duration(0)) {
		return nil
	}
	var out []string
	for _, k := range yamlKeys(t) {
		f, _ := fieldByYAMLKey(t, k)
		if k == key {
			out = append(out, join(path, k))
		}
		out = append(out, keyPaths(f.Type, join(path, k), key)...)
	}
	sort.Strings(out)
	return out
}

// editDistance is the Levenshtein distance between a and b (bytes: keys
// are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
