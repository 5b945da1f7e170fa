package corpus

// Inputs in the shapes Pyserini and Anserini users have on disk: a
// collection directory of JSONL files ({"id", "contents"} per line, split
// over many files) as a knowledge base, and TSV topics (qid<TAB>query) as
// the queries of a TREC run. What cannot be read is refused with the format
// wanted, not a bare JSON error.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// kbFormatHint is the knowledge-base format in one sentence, for errors.
const kbFormatHint = `want one JSON object per line: {"id", "title", "text"}, or Pyserini's {"id", "contents"}`

// loadCollectionDir reads a Pyserini/Anserini JsonCollection directory: every
// *.jsonl and *.json file under dir (recursively, in lexical order of path,
// hidden files skipped), each holding passages one JSON object per line. Any
// other file is refused by name rather than skipped, so no part of a
// collection is silently left out. Passage ids must be unique across files.
// The fingerprint hashes each file's relative path, size and bytes in order.
func loadCollectionDir(ctx context.Context, dir string, lim Limits) (*KB, error) {
	files, err := collectionFiles(dir)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	kb := &KB{Path: dir}
	firstFile := map[string]string{} // passage id → file it came from
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("load knowledge base: %w", err)
		}
		rel, _ := filepath.Rel(dir, f)
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(raw))
		h.Write(raw)
		if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '[' {
			return nil, fmt.Errorf("%s: a JSON array: %s (one record per line, as Pyserini's JsonCollection .jsonl files are)", f, kbFormatHint)
		}
		ps, err := parsePassagesJSONL(ctx, f, bytes.NewReader(raw), lim)
		if err != nil {
			return nil, err
		}
		for _, p := range ps {
			if first, dup := firstFile[p.ID]; dup {
				return nil, fmt.Errorf("%s: field \"id\": duplicate passage id %q (also in %s)", f, p.ID, first)
			}
			firstFile[p.ID] = f
		}
		kb.Passages = append(kb.Passages, ps...)
	}
	if len(kb.Passages) == 0 {
		return nil, fmt.Errorf("%s: knowledge base has no passages (%d collection files)", dir, len(files))
	}
	kb.Fingerprint = hex.EncodeToString(h.Sum(nil))
	return kb, nil
}

// collectionFiles lists the JSONL files of a collection directory.
func collectionFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		switch ext := strings.ToLower(filepath.Ext(p)); ext {
		case ".jsonl", ".json":
			files = append(files, p)
		case ".gz":
			return fmt.Errorf("%s: compressed collection files are not read: gunzip them (the knowledge base is %s)", p, kbFormatHint)
		default:
			return fmt.Errorf("%s: not a .jsonl or .json file in the collection directory %s: a collection directory holds only JSONL files (%s); move the file out", p, dir, kbFormatHint)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load knowledge base: %w", err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("load knowledge base: directory %s has no .jsonl or .json files (a Pyserini collection directory: %s)", dir, kbFormatHint)
	}
	return files, nil
}

// refuseCollectionDir is for the on-disk index build, which streams one
// file by offset: a directory is refused with how to make it one file.
func refuseCollectionDir(path string) error {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return nil
	}
	return fmt.Errorf("knowledge base %s is a directory: the on-disk index (--disk) is built from one file; "+
		"concatenate the collection first (find %s -name '*.json*' | sort | xargs cat > kb.jsonl), or build the in-memory index, which reads the directory", path, path)
}

// explainKBLine adds the wanted format to a knowledge-base line that is not
// a JSON object (a TSV collection line, a JSON array), instead of a bare
// "invalid character" from encoding/json.
func explainKBLine(line []byte, err error) error {
	t := bytes.TrimSpace(line)
	switch {
	case len(t) > 0 && t[0] == '{':
		return err
	case len(t) > 0 && t[0] == '[':
		return fmt.Errorf("a JSON array, not an object: %s", kbFormatHint)
	case bytes.IndexByte(t, '\t') > 0:
		return fmt.Errorf("a tab-separated line (a TSV collection, id<TAB>text?): %s; convert it, e.g. with jq -R 'split(\"\\t\") | {id: .[0], contents: .[1]}'", kbFormatHint)
	}
	return fmt.Errorf("not a JSON object (%v): %s", err, kbFormatHint)
}
