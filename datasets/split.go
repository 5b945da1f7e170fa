package datasets

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
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

// RunSplits divides a run's training file into its parts: train (the GRPO
// prompts and, without data.sft, the SFT pairs), eval (the held-out test
// set) and dev (the in-domain model-selection split). heldOut is data.eval's
// turns: when c.Eval is set they are the eval set and all is train;
// otherwise c.EvalFraction of all's conversations is. Then c.DevFraction of
// the remaining training conversations becomes dev (none when 0), so dev
// never shares a conversation with train or with an eval carved from the
// same file. Both splits are by conversation and depend only on the
// conversation ids and seed, not on input order.
func RunSplits(all, heldOut []Turn, c Config, seed int64) (train, eval, dev []Turn, err error) {
	train = all
	if c.Eval != "" {
		eval = heldOut
	} else if c.EvalFraction > 0 {
		train, eval = SplitByConversation(all, c.EvalFraction, seed)
	}
	if c.DevFraction > 0 {
		// Another seed than the eval split's, so dev is not merely the
		// conversations ranked next after eval's.
		if c.DevGroup == "" {
			train, dev = SplitByConversation(train, c.DevFraction, seed^devSalt)
		} else if train, dev, err = splitWithinGroups(train, c.DevFraction, seed^devSalt, strings.TrimPrefix(c.DevGroup, "meta.")); err != nil {
			return nil, nil, nil, fmt.Errorf("data.dev_group %s: %w", c.DevGroup, err)
		}
	}
	return train, eval, dev, nil
}

// splitWithinGroups is SplitByConversation applied to each value of the turns'
// meta[key] on its own (the same fraction and seed), so every group gives its
// share; both outputs keep the input order. A conversation must not span two
// groups.
func splitWithinGroups(turns []Turn, fraction float64, seed int64, key string) (train, held []Turn, err error) {
	convGroup := map[string]string{}
	byGroup := map[string][]Turn{}
	var order []string
	for _, t := range turns {
		v, ok := t.Meta[key]
		if !ok || v == nil {
			return nil, nil, fmt.Errorf("turn %s has no meta.%s", t.ID(), key)
		}
		g := metaString(v)
		if prev, ok := convGroup[t.ConvID]; ok && prev != g {
			return nil, nil, fmt.Errorf("conversation %s is in groups %q and %q", t.ConvID, prev, g)
		}
		convGroup[t.ConvID] = g
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], t)
	}
	inHeld := map[string]bool{}
	for _, g := range order {
		_, h := SplitByConversation(byGroup[g], fraction, seed)
		for _, t := range h {
			inHeld[t.ConvID] = true
		}
	}
	for _, t := range turns {
		if inHeld[t.ConvID] {
			held = append(held, t)
		} else {
			train = append(train, t)
		}
	}
	return train, held, nil
}

// devSalt separates the dev split's ranking from the eval split's.
const devSalt = 0x64657673706c6974 // "devsplit"

// SharedConversations lists, sorted, the conversation ids that turns of a
// and of b both have.
func SharedConversations(a, b []Turn) []string {
	inA := map[string]bool{}
	for _, t := range a {
		inA[t.ConvID] = true
	}
	seen := map[string]bool{}
	var out []string
	for _, t := range b {
		if inA[t.ConvID] && !seen[t.ConvID] {
			seen[t.ConvID] = true
			out = append(out, t.ConvID)
		}
	}
	sort.Strings(out)
	return out
}
