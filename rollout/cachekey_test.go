package rollout

import (
	"context"
	"strings"
	"testing"

	"github.com/himes-rl/himes/retrieval"
)

type nameOnly struct{ name string }

func (n nameOnly) Name() string { return n.name }
func (n nameOnly) Respond(context.Context, string, []retrieval.Ranked) (string, error) {
	return "", nil
}

type rendering struct{ nameOnly }

func (rendering) RenderPrompt(q string, chunks []retrieval.Ranked) (string, error) {
	return "Q: " + q + " (" + chunks[0].ID + ")", nil
}

// The answer cache persists under these keys, so their layout is fixed:
// name NUL question, then NUL id SOH text per chunk; or name NUL rendered
// prompt for responders that render one.
func TestCacheKeyLayout(t *testing.T) {
	chunks := []retrieval.Ranked{{Chunk: retrieval.Chunk{ID: "A#0", Text: strings.Repeat("alpha ", 300)}},
		{Chunk: retrieval.Chunk{ID: "B#1", Text: "beta"}}}
	r := &Runner{resp: nameOnly{"resp"}}
	got, err := r.cacheKey("why?", chunks)
	if err != nil {
		t.Fatal(err)
	}
	if want := "resp\x00why?\x00A#0\x01" + strings.Repeat("alpha ", 300) + "\x00B#1\x01beta"; got != want {
		t.Errorf("key %q, want %q", got, want)
	}
	r = &Runner{resp: rendering{nameOnly{"ren"}}}
	if got, err := r.cacheKey("why?", chunks); err != nil || got != "ren\x00Q: why? (A#0)" {
		t.Errorf("rendered key %q (%v)", got, err)
	}
}

// BenchmarkCacheKey is one rollout's answer-cache key with three chunks of
// ~2 KB.
func BenchmarkCacheKey(b *testing.B) {
	var chunks []retrieval.Ranked
	for _, id := range []string{"CAR_2be8f82bc9f5be2c938e5167c8eb6aa4c629e2c2#0", "MARCO_1234#1", "CAR_13dc65331f11fb62f340167578ad33e191288a5e#2"} {
		chunks = append(chunks, retrieval.Ranked{Chunk: retrieval.Chunk{ID: id, Text: strings.Repeat("words of a passage ", 100)}})
	}
	r := &Runner{resp: nameOnly{"slow"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.cacheKey("What was the role of the National Guard in the protests?", chunks); err != nil {
			b.Fatal(err)
		}
	}
}
