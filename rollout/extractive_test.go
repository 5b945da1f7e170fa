package rollout

import (
	"reflect"
	"testing"

	"github.com/himes-rl/himes/retrieval"
)

func chunks(texts ...string) []retrieval.Ranked {
	out := make([]retrieval.Ranked, len(texts))
	for i, t := range texts {
		out[i] = retrieval.Ranked{Chunk: retrieval.Chunk{ID: string(rune('a' + i)), Text: t}, Score: float64(len(texts) - i)}
	}
	return out
}

func TestExtractivePicksBestSentence(t *testing.T) {
	e := NewExtractive(ExtractiveConfig{})
	cases := []struct {
		name, question string
		chunks         []retrieval.Ranked
		want           string
	}{
		{
			// "eiffel", "tower", "built" all occur in the second sentence (3), none in the first.
			name:     "best sentence of the top chunk",
			question: "When was the Eiffel Tower built?",
			chunks:   chunks("Paris is the capital of France. The Eiffel Tower was built in 1889 for the World's Fair. It is 330 m tall."),
			want:     "The Eiffel Tower was built in 1889 for the World's Fair.",
		},
		{
			// Chunk b's sentence has 2 content words of the question, chunk a's 1.
			name:     "a lower-ranked chunk with more overlap wins",
			question: "How tall is the Eiffel Tower?",
			chunks:   chunks("The tower stands in Paris.", "The Eiffel tower is 330 metres tall."),
			want:     "The Eiffel tower is 330 metres tall.",
		},
		{
			// Both sentences contain "python" and "release" (2): the better-ranked chunk wins the tie.
			name:     "ties go to the better-ranked chunk",
			question: "python release",
			chunks:   chunks("Python had a release in 1991.", "The python release was big."),
			want:     "Python had a release in 1991.",
		},
		{
			name:     "no overlap: first sentence of the top chunk",
			question: "zebra migration",
			chunks:   chunks("Cats sleep a lot.\nDogs bark.", "Birds fly."),
			want:     "Cats sleep a lot.",
		},
		{
			// Only stopwords and question words in common: they do not count.
			name:     "stopwords carry no evidence",
			question: "what is it that they did",
			chunks:   chunks("Alpha beta.", "What is it that they did?"),
			want:     "Alpha beta.",
		},
		{
			name:     "no chunks: empty answer",
			question: "anything",
			chunks:   nil,
			want:     "",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := e.Respond(t.Context(), c.question, c.chunks)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("answer %q, want %q", got, c.want)
			}
		})
	}
}

func TestExtractiveLimits(t *testing.T) {
	// MaxChunks 1: the matching chunk b is not read.
	e := NewExtractive(ExtractiveConfig{MaxChunks: 1, MaxWords: 40})
	got, _ := e.Respond(t.Context(), "moon landing", chunks("Nothing here.", "The moon landing was in 1969."))
	if got != "Nothing here." {
		t.Errorf("MaxChunks 1: %q", got)
	}
	// MaxWords 4 on a 10-word sentence: windows start at 0, 2, 4 and the last
	// is aligned to the end (words 6..9). "gold medal" (words 6, 7) is in the
	// windows [4:8] and [6:10], both scoring 2: the earlier one wins.
	e = NewExtractive(ExtractiveConfig{MaxChunks: 3, MaxWords: 4})
	got, _ = e.Respond(t.Context(), "gold medal", chunks("one two three four five six gold medal nine ten"))
	if got != "five six gold medal" {
		t.Errorf("MaxWords 4: %q", got)
	}
	wantSpans := []string{"one two three four", "three four five six", "five six gold medal", "gold medal nine ten"}
	if s := spans("one two three four five six gold medal nine ten", 4); !reflect.DeepEqual(s, wantSpans) {
		t.Errorf("spans = %q, want %q", s, wantSpans)
	}
}

func TestExtractiveDeterministicAndNamed(t *testing.T) {
	e := NewExtractive(DefaultExtractiveConfig())
	c := chunks("A b c. D e f! G h i? J k l")
	first, _ := e.Respond(t.Context(), "e h", c)
	for range 10 {
		if got, _ := e.Respond(t.Context(), "e h", c); got != first {
			t.Fatalf("answers differ: %q vs %q", got, first)
		}
	}
	if first != "D e f!" {
		t.Errorf("answer %q, want the first of the tied sentences, %q", first, "D e f!")
	}
	if NewExtractive(ExtractiveConfig{MaxWords: 10}).Name() == e.Name() {
		t.Error("settings that change answers must change the name (the cache key)")
	}
	if got := sentences("A b c. D e f! G h i? J k l"); !reflect.DeepEqual(got, []string{"A b c.", "D e f!", "G h i?", "J k l"}) {
		t.Errorf("sentences = %q", got)
	}
	// Decimal points and abbreviations without a following space do not split.
	if got := sentences("It costs 3.5 dollars.Really"); len(got) != 1 {
		t.Errorf("sentences split inside a number: %q", got)
	}
}
