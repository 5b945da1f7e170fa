package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/internal/ollama"

	"github.com/ollama/ollama/api"
)

// Classifier assigns taxonomy labels to texts. vecs are the texts'
// embeddings (the embedding classifier uses them; others may ignore them).
type Classifier interface {
	Classify(ctx context.Context, texts []string, vecs [][]float32) ([]Label, error)
}

// EmbeddingClassifier assigns the label whose description embedding is
// nearest (cosine) to the text's embedding; a text with no similarity to any
// label (e.g. no known words) gets the taxonomy's last label, the catch-all.
type EmbeddingClassifier struct {
	labels []Label
	vecs   [][]float32
}

// NewEmbeddingClassifier embeds the taxonomy's label descriptions with emb.
func NewEmbeddingClassifier(ctx context.Context, tax *Taxonomy, emb embedding.Embedder) (*EmbeddingClassifier, error) {
	vecs, err := emb.Embed(ctx, tax.labelTexts())
	if err != nil {
		return nil, fmt.Errorf("embed taxonomy labels: %w", err)
	}
	return &EmbeddingClassifier{labels: tax.Labels(), vecs: vecs}, nil
}

// Classify implements Classifier.
func (c *EmbeddingClassifier) Classify(_ context.Context, texts []string, vecs [][]float32) ([]Label, error) {
	if len(vecs) != len(texts) {
		return nil, fmt.Errorf("classify: %d texts but %d vectors", len(texts), len(vecs))
	}
	out := make([]Label, len(vecs))
	for i, v := range vecs {
		best, bestSim := len(c.labels)-1, 0.0
		for j, lv := range c.vecs {
			// strictly greater: the first label wins ties, deterministically
			if s := embedding.Cosine(v, lv); s > bestSim {
				best, bestSim = j, s
			}
		}
		out[i] = c.labels[best]
	}
	return out, nil
}

// labelNeighbours orders, for each label, the other labels from nearest to
// farthest: same-topic subtopics first, then the rest, each group by cosine
// of the label embeddings (ties in taxonomy order).
func labelNeighbours(labels []Label, vecs [][]float32) map[Label][]Label {
	out := make(map[Label][]Label, len(labels))
	for i, l := range labels {
		type cand struct {
			j    int
			same bool
			sim  float64
		}
		var cs []cand
		for j, m := range labels {
			if j != i {
				cs = append(cs, cand{j, m.Topic == l.Topic, embedding.Cosine(vecs[i], vecs[j])})
			}
		}
		slices.SortStableFunc(cs, func(a, b cand) int {
			if a.same != b.same {
				if a.same {
					return -1
				}
				return 1
			}
			switch {
			case a.sim > b.sim:
				return -1
			case a.sim < b.sim:
				return 1
			}
			return a.j - b.j
		})
		for _, c := range cs {
			out[l] = append(out[l], labels[c.j])
		}
	}
	return out
}

// OllamaClassifier asks an Ollama chat model for the label, with the output
// constrained by a JSON schema (`format`) whose enum is the taxonomy's
// "topic/subtopic" labels, at temperature 0.
type OllamaClassifier struct {
	client *ollama.Client
	model  string
	tax    *Taxonomy
	schema json.RawMessage
	system string
}

// NewOllamaClassifier prepares the schema and the instruction.
// host is "host:port" or a URL ("" = OLLAMA_HOST); calls have the timeout
// and retries of ollama.DefaultPolicy.
func NewOllamaClassifier(host, model string, tax *Taxonomy) (*OllamaClassifier, error) {
	if model == "" {
		return nil, fmt.Errorf("ollama classifier: model is empty")
	}
	var hosts []string
	if host != "" {
		hosts = []string{host}
	}
	client, err := ollama.New(hosts, 4, nil, ollama.DefaultPolicy, 1)
	if err != nil {
		return nil, fmt.Errorf("ollama classifier: %w", err)
	}
	var enum []string
	var b strings.Builder
	b.WriteString("Classify the user's query into exactly one label of this taxonomy. Answer with JSON {\"label\": \"topic/subtopic\"}.\n")
	for _, tp := range tax.Topics {
		for _, s := range tp.Subtopics {
			l := tp.Name + "/" + s.Name
			enum = append(enum, l)
			fmt.Fprintf(&b, "- %s: %s; %s\n", l, tp.Description, s.Description)
		}
	}
	schema, err := json.Marshal(map[string]any{
		"type":       "object",
		"properties": map[string]any{"label": map[string]any{"type": "string", "enum": enum}},
		"required":   []string{"label"},
	})
	if err != nil {
		return nil, err
	}
	return &OllamaClassifier{client: client, model: model, tax: tax, schema: schema, system: b.String()}, nil
}

// Classify implements Classifier, one request per text.
func (c *OllamaClassifier) Classify(ctx context.Context, texts []string, _ [][]float32) ([]Label, error) {
	out := make([]Label, len(texts))
	for i, t := range texts {
		content, err := c.client.Chat(ctx, ollama.ChatRequest{ChatRequest: api.ChatRequest{
			Model:    c.model,
			Messages: []api.Message{{Role: "system", Content: c.system}, {Role: "user", Content: t}},
			Format:   c.schema,
			Options:  map[string]any{"temperature": 0},
		}})
		if err != nil {
			return nil, fmt.Errorf("ollama classify (model %s): %w", c.model, err)
		}
		var resp struct {
			Label string `json:"label"`
		}
		if err := json.Unmarshal([]byte(content), &resp); err != nil {
			return nil, fmt.Errorf("ollama classify (model %s): reply %q is not the requested JSON: %w", c.model, content, err)
		}
		topic, sub, _ := strings.Cut(resp.Label, "/")
		l := Label{Topic: topic, Subtopic: sub}
		if !c.tax.Has(l) {
			return nil, fmt.Errorf("ollama classify (model %s): label %q is not in the taxonomy", c.model, resp.Label)
		}
		out[i] = l
	}
	return out, nil
}
