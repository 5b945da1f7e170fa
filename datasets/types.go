package datasets

import "strconv"

// Message is one utterance of a dialogue history.
type Message struct {
	Role string `json:"role"` // "user" or "assistant"
	Text string `json:"text"`
}

// PassageRef is a grounding passage of a turn; ID is an id of the knowledge base.
type PassageRef struct {
	ID             string   `json:"id"`
	Title          string   `json:"title,omitempty"`
	Text           string   `json:"text,omitempty"`
	Relevance      *int     `json:"relevance,omitempty"` // CAsT 0–4; nil when unknown
	AnswerSnippets []string `json:"answer_snippets,omitempty"`
}

// Turn is one user turn of a conversation: the unit the rewriter is trained
// and evaluated on. It is the normalized schema of ../shared/data/conversations.
type Turn struct {
	ConvID   string         `json:"conv_id"`
	Turn     int            `json:"turn"`
	History  []Message      `json:"history"`
	Question string         `json:"question"`
	Rewrite  *string        `json:"rewrite"` // nil where the source has none
	Answer   string         `json:"answer"`  // "" where the source has none
	Passages []PassageRef   `json:"passages"`
	Meta     map[string]any `json:"meta,omitempty"`

	// User is the long-term-memory key (see Config.UserField); filled by loaders.
	User string `json:"user,omitempty"`
}

// ID is a stable identifier of the turn within its dataset.
func (t Turn) ID() string { return t.ConvID + "#" + strconv.Itoa(t.Turn) }

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
