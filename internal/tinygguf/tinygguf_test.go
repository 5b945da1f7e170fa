package tinygguf

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ollama/ollama/fs/ggml"
)

// The file decodes with Ollama's own GGUF reader into the llama model the
// options describe: a loader-level check that needs no server.
func TestWriteDecodes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.gguf")
	if err := Write(path, Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, _, err := ggml.Decode(f, -1)
	if err != nil {
		t.Fatal(err)
	}
	kv := m.KV()
	if kv.Architecture() != "llama" || kv.BlockCount() != 2 || kv.Uint("embedding_length") != 64 ||
		kv.Uint("attention.head_count") != 4 || kv.Uint("feed_forward_length") != 128 {
		t.Errorf("hyperparameters: arch %s blocks %d embd %d heads %d ff %d", kv.Architecture(), kv.BlockCount(),
			kv.Uint("embedding_length"), kv.Uint("attention.head_count"), kv.Uint("feed_forward_length"))
	}
	// 3 special + 256 byte + "▁" + 26×2 letters + 13 words.
	const vocab = 3 + 256 + 1 + 52 + 13
	if toks := kv.Strings("tokenizer.ggml.tokens"); len(toks) != vocab || toks[1] != "<s>" || toks[3] != "<0x00>" {
		t.Errorf("vocabulary: %d tokens", len(toks))
	}
	// 3 global tensors + 9 per block.
	ts := m.Tensors().Items()
	if len(ts) != 3+2*9 {
		t.Errorf("%d tensors", len(ts))
	}
	var params uint64
	for _, tt := range ts {
		n := uint64(1)
		for _, d := range tt.Shape {
			n *= d
		}
		params += n
		if tt.Name == "token_embd.weight" && (len(tt.Shape) != 2 || tt.Shape[0]*tt.Shape[1] != vocab*64) {
			t.Errorf("token_embd shape %v", tt.Shape)
		}
	}
	// 2·vocab·64 + 64 + per block (2·64 + 4·64² + 3·64·128).
	want := uint64(2*vocab*64 + 64 + 2*(2*64+4*64*64+3*64*128))
	if params != want {
		t.Errorf("%d parameters, want %d", params, want)
	}
	st, _ := f.Stat()
	if st.Size() < int64(4*want) || st.Size() > int64(4*want)+64<<10 {
		t.Errorf("file is %d bytes for %d float32 parameters", st.Size(), want)
	}
	// Same seed, same bytes.
	again := filepath.Join(t.TempDir(), "again.gguf")
	if err := Write(again, Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Error("same seed gave different files")
	}
}
