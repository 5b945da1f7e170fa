package ablate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/himes-rl/himes/configs"
)

// Grid is an ablation grid: config keys with the values to try. Its points
// are the Cartesian product, first axis outermost. The file is a YAML mapping
// of dotted config keys (as `--set` takes them) to a value or a list:
//
//	reward.alpha: [0, 0.5, 1]
//	reward.beta: [0, 0.5]
//	reward.hit: [answer, gold]
//
// Short aliases are accepted for the reward knobs: alpha, beta, hit,
// tokenizer, stem, aggregation / estimator / std / zero_variance for
// grpo.advantage.*, and seed for run.seed (points that differ only in it are
// summarized over seeds, see GroupSeeds).
type Grid struct {
	Source string
	Axes   []Axis
}

// Axis is one key of a grid with its values as YAML scalars.
type Axis struct {
	Key    string
	Values []string
	Line   int
}

// Point is one grid point: overrides in axis order.
type Point struct {
	Overrides []string // "reward.alpha=0.5"
	Name      string   // "alpha=0.5 beta=0"
}

var gridAliases = map[string]string{
	"alpha":         "reward.alpha",
	"beta":          "reward.beta",
	"hit":           "reward.hit",
	"tokenizer":     "reward.tokenizer",
	"stem":          "reward.stem",
	"rank":          "reward.rank",
	"aggregation":   "grpo.advantage.aggregation",
	"estimator":     "grpo.advantage.estimator",
	"std":           "grpo.advantage.std",
	"zero_variance": "grpo.advantage.zero_variance",
	"seed":          "run.seed",
}

// ReadGrid reads a grid file; errors name the file and line.
func ReadGrid(path string) (Grid, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Grid{}, fmt.Errorf("read grid: %w", err)
	}
	return ParseGrid(raw, path)
}

// ParseGrid parses grid YAML; name is used in error messages.
func ParseGrid(raw []byte, name string) (Grid, error) {
	g := Grid{Source: name}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return g, fmt.Errorf("%s: empty grid", name)
		}
		return g, fmt.Errorf("%s: %w", name, err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return g, fmt.Errorf("%s:%d: a grid is a mapping of config keys to values", name, doc.Line)
	}
	m := doc.Content[0]
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		key := k.Value
		if full, ok := gridAliases[key]; ok {
			key = full
		}
		if !strings.Contains(key, ".") {
			return g, fmt.Errorf("%s:%d: key %q: want a dotted config key such as reward.alpha", name, k.Line, k.Value)
		}
		if prev, dup := seen[key]; dup {
			return g, fmt.Errorf("%s:%d: key %s: already given on line %d", name, k.Line, key, prev)
		}
		seen[key] = k.Line
		ax := Axis{Key: key, Line: k.Line}
		switch v.Kind {
		case yaml.ScalarNode:
			ax.Values = []string{v.Value}
		case yaml.SequenceNode:
			first := map[string]int{}
			for _, e := range v.Content {
				if e.Kind != yaml.ScalarNode {
					return g, fmt.Errorf("%s:%d: key %s: values must be scalars", name, e.Line, key)
				}
				// A repeated value would run or rescore the same point twice,
				// under one name: a typo for another value, most likely.
				if prev, dup := first[e.Value]; dup {
					return g, fmt.Errorf("%s:%d: key %s: value %s already given on line %d", name, e.Line, key, e.Value, prev)
				}
				first[e.Value] = e.Line
				ax.Values = append(ax.Values, e.Value)
			}
			if len(ax.Values) == 0 {
				return g, fmt.Errorf("%s:%d: key %s: empty list of values", name, v.Line, key)
			}
		default:
			return g, fmt.Errorf("%s:%d: key %s: want a value or a list of values", name, v.Line, key)
		}
		g.Axes = append(g.Axes, ax)
	}
	if len(g.Axes) == 0 {
		return g, fmt.Errorf("%s: empty grid", name)
	}
	return g, nil
}

// Points enumerates the grid, first axis outermost. A point's name gives
// each axis by the last segment of its key, or by as many trailing segments
// as it takes to tell two axes apart (recall.weight=1 ndcg.weight=0, not
// weight=1 weight=0).
func (g Grid) Points() []Point {
	pts := []Point{{}}
	shorts := g.shortKeys()
	for ai, ax := range g.Axes {
		var next []Point
		for _, p := range pts {
			for _, v := range ax.Values {
				name := shorts[ai] + "=" + v
				if p.Name != "" {
					name = p.Name + " " + name
				}
				next = append(next, Point{
					Overrides: append(append([]string(nil), p.Overrides...), ax.Key+"="+v),
					Name:      name,
				})
			}
		}
		pts = next
	}
	return pts
}

// shortKeys names each axis by the fewest trailing segments of its key that
// no other axis's key ends with the same way.
func (g Grid) shortKeys() []string {
	out := make([]string, len(g.Axes))
	for i, ax := range g.Axes {
		segs := strings.Split(ax.Key, ".")
		for n := 1; n <= len(segs); n++ {
			out[i] = strings.Join(segs[len(segs)-n:], ".")
			clash := false
			for j, other := range g.Axes {
				if j != i && (other.Key == out[i] || strings.HasSuffix(other.Key, "."+out[i])) {
					clash = true
					break
				}
			}
			if !clash {
				break
			}
		}
	}
	return out
}

// Apply returns base with the point's overrides applied and validated;
// errors name the grid file and the axis's line.
func (g Grid) Apply(base configs.Config, p Point) (configs.Config, error) {
	cfg := base
	for _, o := range p.Overrides {
		if err := cfg.Override(o); err != nil {
			return cfg, fmt.Errorf("%s:%d: %w", g.Source, g.line(o), err)
		}
	}
	return cfg, nil
}

func (g Grid) line(override string) int {
	key, _, _ := strings.Cut(override, "=")
	for _, ax := range g.Axes {
		if ax.Key == key {
			return ax.Line
		}
	}
	return 0
}
