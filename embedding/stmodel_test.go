package embedding

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stDir writes a minimal sentence-transformers BERT directory, with files
// overridden by over (an empty value removes the file).
func stDir(t *testing.T, over map[string]string) string {
	dir := t.TempDir()
	files := map[string]string{
		"config.json":               `{"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 384}`,
		"modules.json":              `[{"type": "sentence_transformers.models.Transformer", "path": ""}, {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}]`,
		"1_Pooling/config.json":     `{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": false}`,
		"sentence_bert_config.json": `{"max_seq_length": 256}`,
		"tokenizer.json":            `{"model": {"type": "WordPiece", "vocab": {"[UNK]": 0, "the": 1}}}`,
		"model.safetensors":         "\x08\x00\x00\x00\x00\x00\x00\x00{}      ",
	}
	for k, v := range over {
		files[k] = v
	}
	for rel, body := range files {
		if body == "" {
			continue
		}
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestReadSTModel(t *testing.T) {
	m, err := ReadSTModel(stDir(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	want := "1_Pooling/config.json config.json model.safetensors modules.json sentence_bert_config.json tokenizer.json"
	if m.Dim != 384 || m.MaxSeqLength != 256 || m.Pooling != "mean" || strings.Join(m.Files, " ") != want {
		t.Fatalf("%+v", m)
	}
	bad := []struct {
		over map[string]string
		want string // in the error, with the file's name
	}{
		{map[string]string{"config.json": `{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8}`}, "config.json: architectures"},
		{map[string]string{"modules.json": ""}, "modules.json"},
		{map[string]string{"modules.json": `[{"type": "sentence_transformers.models.Transformer", "path": ""}]`}, "no sentence_transformers.models.Pooling"},
		{map[string]string{"1_Pooling/config.json": `{"pooling_mode_max_tokens": true}`}, "1_Pooling/config.json: max"},
		{map[string]string{"tokenizer.json": `{"model": {"type": "BPE", "vocab": {"a": 0}}}`}, "tokenizer.json: model.type \"BPE\""},
		{map[string]string{"model.safetensors": "version https://git-lfs.github.com/spec/v1\noid sha256:0\n"}, "model.safetensors: a Git LFS pointer"},
		{map[string]string{"sentence_bert_config.json": `{"max_seq_length": 0}`}, "sentence_bert_config.json: max_seq_length 0"},
	}
	for _, b := range bad {
		dir := stDir(t, b.over)
		_, err := ReadSTModel(dir)
		if err == nil || !strings.Contains(err.Error(), b.want) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%v: error %v, want one naming %s and %q", b.over, err, dir, b.want)
		}
	}
}
