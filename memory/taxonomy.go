package memory

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"

	"gopkg.in/yaml.v3"
)

//go:embed taxonomy.yaml
var defaultTaxonomyYAML []byte

// Taxonomy is the Atomic Topic Modeling label set: topics, each with
// subtopics and short descriptions.
type Taxonomy struct {
	Topics []Topic `yaml:"topics"`
	// Fingerprint is the SHA-256 of the YAML it was parsed from; persisted
	// memories record it so labels from another taxonomy are not mixed in.
	Fingerprint string `yaml:"-"`
}

// Topic is a top-level label.
type Topic struct {
	Name        string     `yaml:"name"`
	Description string     `yaml:"description"`
	Subtopics   []Subtopic `yaml:"subtopics"`
}

// Subtopic is a leaf label: the unit of a memory partition.
type Subtopic struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
}

// Label is a (topic, subtopic) pair.
type Label struct {
	Topic    string `json:"topic"`
	Subtopic string `json:"subtopic"`
}

func (l Label) String() string { return l.Topic + "/" + l.Subtopic }

// DefaultTaxonomy returns the shipped taxonomy (16 topics).
func DefaultTaxonomy() (*Taxonomy, error) {
	return ParseTaxonomy(defaultTaxonomyYAML, "default taxonomy")
}

// LoadTaxonomy reads a taxonomy YAML file; "" gives the default.
func LoadTaxonomy(path string) (*Taxonomy, error) {
	if path == "" {
		return DefaultTaxonomy()
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load taxonomy: %w", err)
	}
	return ParseTaxonomy(raw, path)
}

// ParseTaxonomy decodes strictly and checks that names are present and unique.
func ParseTaxonomy(raw []byte, name string) (*Taxonomy, error) {
	var t Taxonomy
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if len(t.Topics) == 0 {
		return nil, fmt.Errorf("%s: no topics", name)
	}
	seen := map[string]bool{}
	for i, tp := range t.Topics {
		if tp.Name == "" {
			return nil, fmt.Errorf("%s: topics[%d]: empty name", name, i)
		}
		if seen[tp.Name] {
			return nil, fmt.Errorf("%s: topics[%d]: duplicate topic %q", name, i, tp.Name)
		}
		seen[tp.Name] = true
		if len(tp.Subtopics) == 0 {
			return nil, fmt.Errorf("%s: topic %q has no subtopics", name, tp.Name)
		}
		sub := map[string]bool{}
		for j, s := range tp.Subtopics {
			if s.Name == "" || sub[s.Name] {
				return nil, fmt.Errorf("%s: topic %q subtopics[%d]: empty or duplicate name %q", name, tp.Name, j, s.Name)
			}
			sub[s.Name] = true
		}
	}
	sum := sha256.Sum256(raw)
	t.Fingerprint = hex.EncodeToString(sum[:])
	return &t, nil
}

// Labels lists every (topic, subtopic) in file order.
func (t *Taxonomy) Labels() []Label {
	var out []Label
	for _, tp := range t.Topics {
		for _, s := range tp.Subtopics {
			out = append(out, Label{Topic: tp.Name, Subtopic: s.Name})
		}
	}
	return out
}

// Has reports whether l is a label of the taxonomy.
func (t *Taxonomy) Has(l Label) bool {
	for _, x := range t.Labels() {
		if x == l {
			return true
		}
	}
	return false
}

// labelTexts are what the embedding classifier embeds for each label.
func (t *Taxonomy) labelTexts() []string {
	var out []string
	for _, tp := range t.Topics {
		for _, s := range tp.Subtopics {
			out = append(out, tp.Name+": "+tp.Description+". "+s.Name+": "+s.Description)
		}
	}
	return out
}
