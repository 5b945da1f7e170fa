package datasets

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/himes-rl/himes/internal/parquetfile"
)

// Kinds of SFT example.
const (
	KindRewrite = "rewrite" // completion = the reference rewrite
	// KindNoRewrite: the reference rewrite equals the question, so the
	// completion is the question itself.
	KindNoRewrite = "no_rewrite_needed"
	// KindNoRewriteSynthetic: the question is replaced by its self-contained
	// reference rewrite, and the completion repeats it.
	KindNoRewriteSynthetic = "no_rewrite_needed_synthetic"
)

// Reasons a turn or an example is dropped, as counted in PrepStats.Dropped.
const (
	DropNoQuestion     = "no_question"
	DropNoRewrite      = "missing_rewrite"
	DropNoAnswer       = "no_answer"
	DropNoPassages     = "no_passages"
	DropEmptyPair      = "empty_pair"
	DropPromptLong     = "prompt_too_long"
	DropCompletionLong = "completion_too_long"
	DropDuplicate      = "duplicate"
	DropRenderError    = "render_error"
	// DropRatio counts identity examples left out to keep NoRewriteRatio.
	DropRatio = "over_no_rewrite_ratio"
)

// SFTExample is one (prompt, completion) pair for supervised fine-tuning.
type SFTExample struct {
	ID         string    `json:"id"` // turn id; synthetic identity examples add "/self"
	ConvID     string    `json:"conv_id"`
	Turn       int       `json:"turn"`
	User       string    `json:"user,omitempty"`
	Kind       string    `json:"kind"`
	System     string    `json:"system,omitempty"`
	UserPrompt string    `json:"user_prompt"` // the chat user message
	Prompt     string    `json:"prompt"`      // the flat completion-model prompt
	Completion string    `json:"completion"`
	Messages   []Message `json:"-"`
}

// PrepStats counts what a preparation kept and dropped, and why.
type PrepStats struct {
	Input      int            `json:"input_turns"`
	Train      int            `json:"train"`
	Validation int            `json:"validation"`
	Kinds      map[string]int `json:"kinds,omitempty"` // kept examples per kind (SFT)
	Dropped    map[string]int `json:"dropped"`
	TrainKeys  int            `json:"train_split_keys"`
	ValKeys    int            `json:"validation_split_keys"`
	// NoRewriteShortfall is how many no-rewrite-needed examples were missing
	// to reach NoRewriteRatio (too few candidates survived the filters).
	NoRewriteShortfall int `json:"no_rewrite_shortfall,omitempty"`
}

func newStats(n int) PrepStats {
	return PrepStats{Input: n, Kinds: map[string]int{}, Dropped: map[string]int{}}
}

// SplitKeyFunc returns the key of a split_by value (see PrepConfig.SplitBy).
// A turn without the key is an error naming the turn.
func SplitKeyFunc(by string) (func(Turn) (string, error), error) {
	switch by {
	case "", "conv_id":
		return func(t Turn) (string, error) { return t.ConvID, nil }, nil
	case "user":
		return func(t Turn) (string, error) {
			if t.User == "" {
				return t.ConvID, nil
			}
			return t.User, nil
		}, nil
	}
	f, err := userKeyFunc(by, "data.prep.split_by")
	if err != nil {
		return nil, fmt.Errorf("split_by: %w", err)
	}
	return func(t Turn) (string, error) {
		k, err := f(t)
		if err != nil {
			return "", fmt.Errorf("turn %s: %w", t.ID(), err)
		}
		return k, nil
	}, nil
}

// splitTurns splits by cfg.SplitBy, keeping input order in both parts.
func splitTurns(turns []Turn, cfg PrepConfig, seed int64, stats *PrepStats) (train, val []Turn, err error) {
	keyOf, err := SplitKeyFunc(cfg.SplitBy)
	if err != nil {
		return nil, nil, err
	}
	keys := make([]string, len(turns))
	for i, t := range turns {
		if keys[i], err = keyOf(t); err != nil {
			return nil, nil, err
		}
	}
	train, val = splitByKeys(turns, keys, cfg.ValFraction, seed)
	stats.TrainKeys, stats.ValKeys = countKeys(train, keyOf), countKeys(val, keyOf)
	return train, val, nil
}

func countKeys(ts []Turn, keyOf func(Turn) (string, error)) int {
	seen := map[string]bool{}
	for _, t := range ts {
		k, _ := keyOf(t) // already computed without error above
		seen[k] = true
	}
	return len(seen)
}

// BuildSFT turns conversations into (prompt, completion = reference rewrite)
// pairs, split into train and validation by cfg.SplitBy so that no key
// straddles the two. It adds "no rewrite needed" examples at
// cfg.NoRewriteRatio, de-duplicates (prompt, completion) pairs across both
// splits (train first), and drops empty and over-long pairs. Every turn and
// candidate example not kept is counted in stats.Dropped under its reason.
// The result depends only on the turns, cfg and seed.
func BuildSFT(ctx context.Context, turns []Turn, r *Renderer, cfg PrepConfig, seed int64) (train, val []SFTExample, stats PrepStats, err error) {
	stats = newStats(len(turns))
	var usable []Turn
	for _, t := range turns {
		switch {
		case strings.TrimSpace(t.Question) == "":
			stats.Dropped[DropNoQuestion]++
		case t.Rewrite == nil:
			stats.Dropped[DropNoRewrite]++
		default:
			usable = append(usable, t)
		}
	}
	trainTurns, valTurns, err := splitTurns(usable, cfg, seed, &stats)
	if err != nil {
		return nil, nil, stats, err
	}
	seen := map[string]bool{}
	if train, err = buildSFTSplit(ctx, trainTurns, r, cfg, seed, seen, &stats); err != nil {
		return nil, nil, stats, err
	}
	if val, err = buildSFTSplit(ctx, valTurns, r, cfg, seed, seen, &stats); err != nil {
		return nil, nil, stats, err
	}
	stats.Train, stats.Validation = len(train), len(val)
	return train, val, stats, nil
}

func buildSFTSplit(ctx context.Context, turns []Turn, r *Renderer, cfg PrepConfig, seed int64, seen map[string]bool, stats *PrepStats) ([]SFTExample, error) {
	type cand struct {
		t   Turn
		pos int // index in turns, to restore input order
	}
	type kept struct {
		ex  SFTExample
		pos int
	}
	var out []kept
	// add renders and filters one candidate; it reports whether it was kept.
	add := func(c cand, kind string) bool {
		t := c.t
		completion := strings.TrimSpace(*t.Rewrite)
		if kind != KindRewrite {
			completion = strings.TrimSpace(t.Question)
		}
		if completion == "" {
			stats.Dropped[DropEmptyPair]++
			return false
		}
		p, err := r.RenderContext(ctx, t)
		if err != nil {
			stats.Dropped[DropRenderError]++
			return false
		}
		switch {
		case cfg.MaxPromptChars > 0 && utf8.RuneCountInString(p.Text) > cfg.MaxPromptChars:
			stats.Dropped[DropPromptLong]++
			return false
		case cfg.MaxCompletionChars > 0 && utf8.RuneCountInString(completion) > cfg.MaxCompletionChars:
			stats.Dropped[DropCompletionLong]++
			return false
		}
		key := p.Text + "\x00" + completion
		if seen[key] {
			stats.Dropped[DropDuplicate]++
			return false
		}
		seen[key] = true
		id := t.ID()
		if kind == KindNoRewriteSynthetic {
			id += "/self"
		}
		out = append(out, kept{SFTExample{
			ID: id, ConvID: t.ConvID, Turn: t.Turn, User: t.User, Kind: kind,
			System: p.System, UserPrompt: p.User, Prompt: p.Text, Completion: completion,
			Messages: append(append([]Message(nil), p.Messages...), Message{Role: "assistant", Text: completion}),
		}, c.pos})
		stats.Kinds[kind]++
		return true
	}

	var identity, rewriting []cand
	for i, t := range turns {
		if sameQuery(t.Question, *t.Rewrite) {
			identity = append(identity, cand{t, i})
		} else {
			rewriting = append(rewriting, cand{t, i})
		}
	}
	var keptRewrites []cand
	for i, c := range rewriting {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if add(c, KindRewrite) {
			keptRewrites = append(keptRewrites, c)
		}
	}
	// Identity examples up to ratio/(1-ratio) per rewrite example: natural
	// ones first, in a seeded order, then synthetic ones from rewrite turns.
	want := 0
	if cfg.NoRewriteRatio > 0 {
		want = int(float64(len(keptRewrites))*cfg.NoRewriteRatio/(1-cfg.NoRewriteRatio) + 0.5)
	}
	got := 0
	for _, i := range seededOrder(identity, seed, func(c cand) string { return c.t.ID() }) {
		if got >= want {
			stats.Dropped[DropRatio]++
			continue
		}
		if add(identity[i], KindNoRewrite) {
			got++
		}
	}
	for _, i := range seededOrder(keptRewrites, seed, func(c cand) string { return c.t.ID() }) {
		if got >= want {
			break
		}
		self := keptRewrites[i]
		self.t.Question = strings.TrimSpace(*self.t.Rewrite)
		if add(self, KindNoRewriteSynthetic) {
			got++
		}
	}
	stats.NoRewriteShortfall += want - got
	// Present examples in input order, a synthetic example after its turn's.
	sort.SliceStable(out, func(i, j int) bool { return out[i].pos < out[j].pos })
	exs := make([]SFTExample, len(out))
	for i, k := range out {
		exs[i] = k.ex
	}
	return exs, nil
}

// seededOrder returns the indices of xs ordered by a seeded hash of their
// id (ties in input order).
func seededOrder[T any](xs []T, seed int64, id func(T) string) []int {
	idx := make([]int, len(xs))
	h := make([]uint64, len(xs))
	for i, x := range xs {
		idx[i], h[i] = i, seededHash(seed, id(x))
	}
	sort.SliceStable(idx, func(a, b int) bool { return h[idx[a]] < h[idx[b]] })
	return idx
}

// sameQuery compares two queries ignoring case, punctuation and spacing.
func sameQuery(a, b string) bool { return normQuery(a) == normQuery(b) }

func normQuery(s string) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteRune(r)
			space = false
		} else {
			space = true
		}
	}
	return b.String()
}

// BuildRL selects the GRPO prompt set: turns with a question and a reference
// answer (and gold passages when cfg.RequirePassages), without repeats of an
// identical (history, question) already kept, split by cfg.SplitBy. Turns
// keep their passages (the gold ids for evaluation) and user key.
func BuildRL(turns []Turn, cfg PrepConfig, seed int64) (train, val []Turn, stats PrepStats, err error) {
	stats = newStats(len(turns))
	stats.Kinds = nil
	seen := map[string]bool{}
	var keep []Turn
	for _, t := range turns {
		switch {
		case strings.TrimSpace(t.Question) == "":
			stats.Dropped[DropNoQuestion]++
			continue
		case strings.TrimSpace(t.Answer) == "":
			stats.Dropped[DropNoAnswer]++
			continue
		case cfg.RequirePassages && len(t.Passages) == 0:
			stats.Dropped[DropNoPassages]++
			continue
		}
		k := dialogueKey(t)
		if seen[k] {
			stats.Dropped[DropDuplicate]++
			continue
		}
		seen[k] = true
		keep = append(keep, t)
	}
	if train, val, err = splitTurns(keep, cfg, seed, &stats); err != nil {
		return nil, nil, stats, err
	}
	stats.Train, stats.Validation = len(train), len(val)
	return train, val, stats, nil
}

// dialogueKey identifies a turn by what the rewriter sees and what it is
// scored against, so the repeated prefixes of CAsT 2022's flattened trees
// count once.
func dialogueKey(t Turn) string {
	var b strings.Builder
	for _, m := range t.History {
		b.WriteString(m.Role)
		b.WriteByte(0)
		b.WriteString(m.Text)
		b.WriteByte(0)
	}
	b.WriteString(t.Question)
	b.WriteByte(0)
	b.WriteString(t.Answer)
	return b.String()
}

// SFT output layouts.
const (
	LayoutPromptCompletion = "prompt_completion"
	LayoutMessages         = "messages"
)

// WriteSFT writes the SFT splits under dir in the layouts TRL's SFTTrainer
// loads, each as JSONL and Parquet:
//
//	prompt_completion/{train,validation}.{jsonl,parquet}   {"prompt", "completion"}
//	messages/{train,validation}.{jsonl,parquet}            {"messages": [{"role", "content"}, …]}
//	examples/{train,validation}.jsonl                      every field of SFTExample
//
// Rows are in the same order in every file. An empty split writes no files.
// It returns the paths written.
func WriteSFT(ctx context.Context, dir string, train, val []SFTExample) ([]string, error) {
	var written []string
	for _, split := range []struct {
		name string
		ex   []SFTExample
	}{{"train", train}, {"validation", val}} {
		if len(split.ex) == 0 {
			continue
		}
		pc := make([]promptCompletion, len(split.ex))
		ms := make([]chatRow, len(split.ex))
		for i, e := range split.ex {
			pc[i] = promptCompletion{Prompt: e.Prompt, Completion: e.Completion}
			ms[i] = chatRow{Messages: chatMessages(e.Messages)}
		}
		files := []struct {
			path  string
			write func(string) error
		}{
			{filepath.Join(dir, LayoutPromptCompletion, split.name+".jsonl"), func(p string) error { return WriteJSONLValues(ctx, p, pc) }},
			{filepath.Join(dir, LayoutPromptCompletion, split.name+".parquet"), func(p string) error { return writePromptCompletionParquet(p, pc) }},
			{filepath.Join(dir, LayoutMessages, split.name+".jsonl"), func(p string) error { return WriteJSONLValues(ctx, p, ms) }},
			{filepath.Join(dir, LayoutMessages, split.name+".parquet"), func(p string) error { return writeMessagesParquet(p, ms) }},
			{filepath.Join(dir, "examples", split.name+".jsonl"), func(p string) error { return WriteJSONLValues(ctx, p, split.ex) }},
		}
		for _, f := range files {
			if err := ctx.Err(); err != nil {
				return written, err
			}
			if err := f.write(f.path); err != nil {
				return written, err
			}
			written = append(written, f.path)
		}
	}
	return written, nil
}

type promptCompletion struct {
	Prompt     string `json:"prompt"`
	Completion string `json:"completion"`
}

// ChatMessage is a message in the {role, content} form chat templates use.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRow struct {
	Messages []ChatMessage `json:"messages"`
}

func chatMessages(ms []Message) []ChatMessage {
	out := make([]ChatMessage, len(ms))
	for i, m := range ms {
		out[i] = ChatMessage{Role: m.Role, Content: m.Text}
	}
	return out
}

func writePromptCompletionParquet(path string, rows []promptCompletion) error {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "prompt", Type: arrow.BinaryTypes.String},
		{Name: "completion", Type: arrow.BinaryTypes.String},
	}, nil)
	return writeParquetRows(path, schema, len(rows), func(b *array.RecordBuilder, i int) {
		b.Field(0).(*array.StringBuilder).Append(rows[i].Prompt)
		b.Field(1).(*array.StringBuilder).Append(rows[i].Completion)
	})
}

func writeMessagesParquet(path string, rows []chatRow) error {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "messages", Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "content", Type: arrow.BinaryTypes.String},
		))},
	}, nil)
	return writeParquetRows(path, schema, len(rows), func(b *array.RecordBuilder, i int) {
		lb := b.Field(0).(*array.ListBuilder)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		lb.Append(true)
		for _, m := range rows[i].Messages {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(m.Role)
			sb.FieldBuilder(1).(*array.StringBuilder).Append(m.Content)
		}
	})
}

// writeParquetRows writes n rows, appended by add, atomically
// (internal/parquetfile), a row group per parquetRowGroup rows.
func writeParquetRows(path string, schema *arrow.Schema, n int, add func(*array.RecordBuilder, int)) error {
	return parquetfile.WriteFile(path, schema, parquetfile.Options{RowGroupRows: parquetRowGroup}, func(w *parquetfile.Writer) error {
		for start := 0; start < n; start += parquetRowGroup {
			b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			for i := start; i < min(start+parquetRowGroup, n); i++ {
				add(b, i)
			}
			rec := b.NewRecordBatch()
			err := w.Write(rec)
			rec.Release()
			b.Release()
			if err != nil {
				return fmt.Errorf("write rows %d..: %w", start, err)
			}
		}
		return nil
	})
}

// SFTOutputs lists every file WriteSFT may write under dir.
func SFTOutputs(dir string) []string {
	var out []string
	for _, split := range []string{"train", "validation"} {
		out = append(out,
			filepath.Join(dir, LayoutPromptCompletion, split+".jsonl"), filepath.Join(dir, LayoutPromptCompletion, split+".parquet"),
			filepath.Join(dir, LayoutMessages, split+".jsonl"), filepath.Join(dir, LayoutMessages, split+".parquet"),
			filepath.Join(dir, "examples", split+".jsonl"))
	}
	return out
}

// RLOutputs lists every file WriteRL may write under dir.
func RLOutputs(dir string) []string {
	var out []string
	for _, split := range []string{"train", "validation"} {
		out = append(out, filepath.Join(dir, split+".jsonl"), filepath.Join(dir, split+".parquet"))
	}
	return out
}

// WriteRL writes the RL prompt set under dir as {train,validation}.jsonl and
// .parquet (the normalized schema, user key included). An empty split writes
// no files. It returns the paths written.
func WriteRL(ctx context.Context, dir string, train, val []Turn) ([]string, error) {
	var written []string
	for _, split := range []struct {
		name  string
		turns []Turn
	}{{"train", train}, {"validation", val}} {
		if len(split.turns) == 0 {
			continue
		}
		j := filepath.Join(dir, split.name+".jsonl")
		if err := WriteJSONLContext(ctx, j, split.turns); err != nil {
			return written, err
		}
		p := filepath.Join(dir, split.name+".parquet")
		if err := WriteParquetContext(ctx, p, split.turns); err != nil {
			return append(written, j), err
		}
		written = append(written, j, p)
	}
	return written, nil
}

// WriteSummary writes v (a PrepStats or a report holding one) as indented
// JSON, atomically.
func WriteSummary(path string, v any) error {
	return writeFileAtomic(path, func(w io.Writer) error {
		b, err := marshalIndentNoEscape(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}

func marshalIndentNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
