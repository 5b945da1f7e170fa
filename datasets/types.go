package datasets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
)

// Message is one utterance of a dialogue history. Inputs may name the text
// content, as the Hugging Face / OpenAI chat convention does; it is written
// as text.
type Message struct {
	Role string `json:"role"` // "user" or "assistant"
	Text string `json:"text"`
}

// UnmarshalJSON accepts {role, text} and {role, content}.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w struct {
		Role    string  `json:"role"`
		Text    *string `json:"text"`
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	if w.Text != nil && w.Content != nil {
		return fmt.Errorf("message has both text and content: give one")
	}
	m.Role, m.Text = w.Role, ""
	if w.Text != nil {
		m.Text = *w.Text
	} else if w.Content != nil {
		m.Text = *w.Content
	}
	return nil
}

// PassageRef is a grounding passage of a turn; ID is an id of the knowledge base.
type PassageRef struct {
	ID        string `json:"id"`
	Title     string `json:"title,omitempty"`
	Text      string `json:"text,omitempty"`
	Relevance *int   `json:"relevance,omitempty"` // CAsT 0–4; nil when unknown
	// AnswerSnippets are answer spans annotated in the passage, flattened
	// and de-duplicated in order of first appearance.
	AnswerSnippets []string `json:"answer_snippets,omitempty"`
	// AnswerSnippetSets keeps the source's grouping when it is one list of
	// spans per annotator (CAsT-snippets); JSON writes this form when set.
	AnswerSnippetSets [][]string `json:"-"`
	// Source says where the judgment came from (CAsT: canonical passage or
	// CAsT-snippets); free text, "" when the source gives none.
	Source string `json:"source,omitempty"`
}

// Turn is one user turn of a conversation: the unit the rewriter is trained
// and evaluated on. It is the normalized schema of ../shared/data/conversations.
type Turn struct {
	ConvID   string    `json:"conv_id"`
	Turn     int       `json:"turn"`
	History  []Message `json:"history"`
	Question string    `json:"question"`
	Rewrite  *string   `json:"rewrite"` // nil where the source has none
	Answer   string    `json:"answer"`  // "" where the source has none
	// Answers are several reference answers (SQuAD-style); Answer is then
	// the first unless the source gives it. Scoring takes the best match
	// over References.
	Answers  []string       `json:"answers,omitempty"`
	Passages []PassageRef   `json:"passages"`
	Meta     map[string]any `json:"meta,omitempty"`

	// User is the long-term-memory key (see Config.UserField); filled by loaders.
	User string `json:"user,omitempty"`

	// TurnLabel is the source's turn id when it is not an integer (CAsT 2022
	// numbers turns of its flattened trees "1-3", "2-1"). Turn then holds the
	// 1-based position of the turn in its conversation (user messages in
	// History + 1), so Turn stays a usable ordinal. JSON round-trips the label.
	TurnLabel string `json:"-"`

	// Facts are the user's statements carried by the turn (data.memory_field)
	// and MemoryLabels the ids of the memories judged relevant to it
	// (data.memory_labels_field); filled by loaders when configured.
	Facts        []Fact   `json:"-"`
	MemoryLabels []string `json:"-"`
}

// ID is a stable identifier of the turn within its dataset.
func (t Turn) ID() string { return t.ConvID + "#" + strconv.Itoa(t.Turn) }

// References are the turn's reference answers: Answer, then the Answers
// that differ from it; none when the source has no answer.
func (t Turn) References() []string {
	var out []string
	if t.Answer != "" {
		out = append(out, t.Answer)
	}
	for _, a := range t.Answers {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// HasRewrite reports whether the turn has a non-empty reference rewrite.
func (t Turn) HasRewrite() bool { return t.Rewrite != nil && *t.Rewrite != "" }

// GoldPassageIDs returns the ids of the turn's passages with relevance ≥ 1
// (or unknown relevance), the judgments that retrieval metrics use.
func (t Turn) GoldPassageIDs() []string {
	var ids []string
	for _, p := range t.Passages {
		if p.Relevance == nil || *p.Relevance >= 1 {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

// Qrels returns the turn's relevance judgments as retrieval metrics read
// them: passage id → grade, unknown relevance counting as 1 and a passage
// listed twice keeping its highest grade.
func (t Turn) Qrels() map[string]int {
	q := make(map[string]int, len(t.Passages))
	for _, p := range t.Passages {
		rel := 1
		if p.Relevance != nil {
			rel = *p.Relevance
		}
		if old, ok := q[p.ID]; !ok || rel > old {
			q[p.ID] = rel
		}
	}
	return q
}

type passageJSON PassageRef

// MarshalJSON writes answer_snippets in the grouped form when the source had it.
func (p PassageRef) MarshalJSON() ([]byte, error) {
	if p.AnswerSnippetSets == nil {
		return marshalNoEscape(passageJSON(p))
	}
	return marshalNoEscape(struct {
		passageJSON
		AnswerSnippets [][]string `json:"answer_snippets"`
	}{passageJSON(p), p.AnswerSnippetSets})
}

// UnmarshalJSON accepts answer_snippets as a list of strings or a list of
// lists of strings (one per annotator).
func (p *PassageRef) UnmarshalJSON(b []byte) error {
	var w struct {
		passageJSON
		AnswerSnippets json.RawMessage `json:"answer_snippets"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*p = PassageRef(w.passageJSON)
	return p.setSnippets(w.AnswerSnippets)
}

func (p *PassageRef) setSnippets(raw json.RawMessage) error {
	p.AnswerSnippets, p.AnswerSnippetSets = nil, nil
	if isNull(raw) {
		return nil
	}
	if err := json.Unmarshal(raw, &p.AnswerSnippets); err == nil {
		if len(p.AnswerSnippets) == 0 {
			p.AnswerSnippets = nil // [] and absent mean the same: no spans
		}
		return nil
	}
	var sets [][]string
	if err := json.Unmarshal(raw, &sets); err != nil {
		return fmt.Errorf("want an array of strings or of arrays of strings, got %s", describeJSON(raw))
	}
	p.AnswerSnippetSets = sets
	p.AnswerSnippets = flattenUnique(sets)
	return nil
}

func flattenUnique(sets [][]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, set := range sets {
		for _, s := range set {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// turnJSON is Turn without its methods, so (un)marshalling does not recurse.
type turnJSON Turn

// wireTurn is the on-disk shape: turn may be an integer or a label, question
// may be null (QReCC's SCAI sample has only rewrites).
type wireTurn struct {
	turnJSON
	Turn     json.RawMessage `json:"turn"`
	Question *string         `json:"question"`
}

// MarshalJSON writes the normalized schema; a TurnLabel is written as the turn.
func (t Turn) MarshalJSON() ([]byte, error) {
	w := wireTurn{turnJSON: turnJSON(t), Question: &t.Question}
	if t.TurnLabel != "" {
		b, err := marshalNoEscape(t.TurnLabel)
		if err != nil {
			return nil, err
		}
		w.Turn = b
	} else {
		w.Turn = json.RawMessage(strconv.Itoa(t.Turn))
	}
	if w.History == nil {
		w.History = []Message{}
	}
	if w.Passages == nil {
		w.Passages = []PassageRef{}
	}
	return marshalNoEscape(w)
}

// UnmarshalJSON reads the normalized schema. It is lenient about shapes the
// shared files use (string turn ids, null question); the loaders validate
// every field separately to report precise errors.
func (t *Turn) UnmarshalJSON(b []byte) error {
	var w wireTurn
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // keep meta numbers exact across a round trip
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*t = Turn(w.turnJSON)
	if t.Answer == "" && len(t.Answers) > 0 {
		t.Answer = t.Answers[0]
	}
	if w.Question != nil {
		t.Question = *w.Question
	}
	n, label, err := parseTurnNumber(w.Turn)
	if err != nil {
		return fmt.Errorf("turn: %w", err)
	}
	t.Turn, t.TurnLabel = n, label
	if label != "" {
		t.Turn = countUser(t.History) + 1
	}
	return nil
}

// parseTurnNumber accepts 3, "3" (returned as the integer) or "1-3" (returned
// as a label; the caller derives the ordinal).
func parseTurnNumber(raw json.RawMessage) (int, string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, "", fmt.Errorf("is missing")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, "", err
		}
		if s == "" {
			return 0, "", fmt.Errorf("is an empty string")
		}
		if n, err := strconv.Atoi(s); err == nil {
			return n, "", nil
		}
		return 0, s, nil
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil {
		return 0, "", fmt.Errorf("want an integer or a string label, got %s", truncate(string(raw), 40))
	}
	return n, "", nil
}

func countUser(h []Message) int {
	n := 0
	for _, m := range h {
		if m.Role == "user" {
			n++
		}
	}
	return n
}

// marshalNoEscape marshals without HTML escaping, so text with <, > and &
// stays readable in the files we write.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// PromptTurns are the turns a run uses as GRPO prompts or held-out turns:
// those with a reference answer (the reward needs it) and, with judgedOnly,
// relevance judgments too (data.judged_only). Order is kept.
func PromptTurns(turns []Turn, judgedOnly bool) []Turn {
	var out []Turn
	for _, t := range turns {
		if t.Answer == "" || (judgedOnly && len(t.Qrels()) == 0) {
			continue
		}
		out = append(out, t)
	}
	return out
}
