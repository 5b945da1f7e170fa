package datasets

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"sort"
)

// SplitByConversation holds out about evalFraction of the conversations (not
// turns) for evaluation. See SplitByKey.
func SplitByConversation(turns []Turn, evalFraction float64, seed int64) (train, eval []Turn) {
	return SplitByKey(turns, evalFraction, seed, func(t Turn) string { return t.ConvID })
}

// SplitByKey splits turns into train and eval so that no key (conversation,
// topic, user) has turns in both. The eval keys are the first
// round(evalFraction·keys) in an order given by a seeded hash of the key, so
// the split depends only on the set of keys and the seed, not on input order
// or the Go version. With evalFraction > 0 and at least two keys, each side
// gets at least one key; a single key is all train. Both outputs keep the
// input order.
func SplitByKey(turns []Turn, evalFraction float64, seed int64, key func(Turn) string) (train, eval []Turn) {
	keyOf := make([]string, len(turns))
	for i, t := range turns {
		keyOf[i] = key(t)
	}
	return splitByKeys(turns, keyOf, evalFraction, seed)
}

// splitByKeys is SplitByKey with the key of each turn precomputed.
func splitByKeys(turns []Turn, keyOf []string, evalFraction float64, seed int64) (train, eval []Turn) {
	var keys []string
	seen := map[string]bool{}
	for _, k := range keyOf {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	// A lone key stays in train: an empty training set is never useful.
	n := 0
	if evalFraction > 0 && len(keys) >= 2 {
		n = min(max(int(math.Round(evalFraction*float64(len(keys)))), 1), len(keys)-1)
	}
	rank := make(map[string]uint64, len(keys))
	for _, k := range keys {
		rank[k] = seededHash(seed, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if rank[keys[i]] != rank[keys[j]] {
			return rank[keys[i]] < rank[keys[j]]
		}
		return keys[i] < keys[j]
	})
	inEval := make(map[string]bool, n)
	for _, k := range keys[:n] {
		inEval[k] = true
	}
	for i, t := range turns {
		if inEval[keyOf[i]] {
			eval = append(eval, t)
		} else {
			train = append(train, t)
		}
	}
	return train, eval
}

// seededHash is FNV-1a over the seed and s: stable across platforms and
// releases, unlike math/rand's stream.
func seededHash(seed int64, s string) uint64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(s))
	return h.Sum64()
}
