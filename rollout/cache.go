package rollout

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// answerCache is a bounded LRU of frozen-model answers keyed by
// (responder name, rendered prompt), optionally backed by a directory with one
// JSON file per entry. The disk copy is unbounded on purpose: it is the
// cross-run memory; the in-memory LRU bounds what a process holds.
type answerCache struct {
	mu    sync.Mutex
	max   int
	ll    *list.List // front = most recently used
	items map[string]*list.Element
	dir   string
	log   *slog.Logger
}

type cacheEntry struct {
	Key    string `json:"key"`
	Answer string `json:"answer"`
}

func newAnswerCache(max int, dir string, log *slog.Logger) (*answerCache, error) {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("answer cache dir: %w", err)
		}
	}
	return &answerCache{max: max, ll: list.New(), items: map[string]*list.Element{}, dir: dir, log: log}, nil
}

func (c *answerCache) enabled() bool { return c != nil && (c.max > 0 || c.dir != "") }

// peek looks key up without changing the LRU's order or contents: a step
// reads the cache as it was when the step began (see cacheStep).
func (c *answerCache) peek(key string) (string, bool) {
	if !c.enabled() {
		return "", false
	}
	c.mu.Lock()
	if el, ok := c.items[key]; ok {
		a := el.Value.(*cacheEntry).Answer
		c.mu.Unlock()
		return a, true
	}
	c.mu.Unlock()
	if c.dir == "" {
		return "", false
	}
	raw, err := os.ReadFile(c.path(key))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn("answer cache read failed", "err", err)
		}
		return "", false
	}
	var e cacheEntry
	if err := json.Unmarshal(raw, &e); err != nil || e.Key != key {
		// A corrupt file or a hash collision is a miss, never a wrong answer.
		return "", false
	}
	return e.Answer, true
}

// putDisk writes the entry's file (the unbounded cross-run copy).
func (c *answerCache) putDisk(key, answer string) {
	if !c.enabled() || c.dir == "" {
		return
	}
	raw, err := json.Marshal(cacheEntry{Key: key, Answer: answer})
	if err == nil {
		err = atomicfile.WriteFile(c.path(key), raw, 0o644)
	}
	if err != nil {
		c.log.Warn("answer cache write failed", "err", err)
	}
}

// cacheStep is one Run's view of the cache. Its lookups see the LRU as it
// was when the step began plus the answers the step itself made; the LRU
// changes only in commit, in the step's job order. So which answers are
// evicted, and therefore which later lookups hit, never depends on the order
// in which concurrent jobs finished: the same run gives the same cache hits
// and responder calls.
type cacheStep struct {
	c    *answerCache
	mu   sync.Mutex
	made map[string]string
}

func (c *answerCache) step() *cacheStep { return &cacheStep{c: c, made: map[string]string{}} }

func (s *cacheStep) get(key string) (string, bool) {
	if !s.c.enabled() {
		return "", false
	}
	s.mu.Lock()
	a, ok := s.made[key]
	s.mu.Unlock()
	if ok {
		return a, true
	}
	return s.c.peek(key)
}

// put records an answer the step made; its file is written at once.
func (s *cacheStep) put(key, answer string) {
	if !s.c.enabled() {
		return
	}
	s.mu.Lock()
	s.made[key] = answer
	s.mu.Unlock()
	s.c.putDisk(key, answer)
}

// commit makes an answer the step used (made or found) the most recently
// used; called once per job, in job order, after every job ended.
func (s *cacheStep) commit(key, answer string) {
	if s.c.enabled() {
		s.c.putMem(key, answer)
	}
}

func (c *answerCache) putMem(key, answer string) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value.(*cacheEntry).Answer = answer
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&cacheEntry{Key: key, Answer: answer})
	for c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*cacheEntry).Key)
	}
}

func (c *answerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len()
}

func (c *answerCache) path(key string) string {
	h := sha256.Sum256([]byte(key))
	s := hex.EncodeToString(h[:])
	return filepath.Join(c.dir, s[:2], s+".json")
}
