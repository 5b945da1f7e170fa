package configs

import (
	"fmt"
	"math"
	"strconv"

	"github.com/himes-rl/himes/internal/fielderr"
)

// floatRange is a float key's documented range, closed unless loOpen.
type floatRange struct {
	lo, hi float64
	loOpen bool
}

func (r floatRange) contains(x float64) bool {
	return (x > r.lo || !r.loOpen && x == r.lo) && x <= r.hi
}

func (r floatRange) String() string {
	open := "["
	if r.loOpen {
		open = "("
	}
	return open + strconv.FormatFloat(r.lo, 'g', -1, 64) + ", " + strconv.FormatFloat(r.hi, 'g', -1, 64) + "]"
}

// floatRanges bounds the float keys that the sections check only from below
// (or not at all): a finite but absurd value (reward.alpha 1e300, a learning
// rate of 1e100) trains on and ends in +Inf far from its cause. The bounds are
// far outside any sensible setting; a section may still refuse values inside
// them (reward weights that sum to 0, clip_ratio_c in (0, 1]). Every float
// key must be bounded here or by its section (a test checks ±1e300).
var floatRanges = map[string]floatRange{
	"retrieval.k1":                                  {lo: 0, hi: 100},
	"retrieval.rrf_k":                               {lo: 0, hi: 1e6, loOpen: true},
	"retrieval.memory.recency_half_life":            {lo: 0, hi: 1e6, loOpen: true},
	"retrieval.memory.fusion_k":                     {lo: 0, hi: 1e6, loOpen: true},
	"retrieval.memory.signals.semantic":             {lo: 0, hi: 1000},
	"retrieval.memory.signals.topic":                {lo: 0, hi: 1000},
	"retrieval.memory.signals.recency":              {lo: 0, hi: 1000},
	"retrieval.memory.signals.importance":           {lo: 0, hi: 1000},
	"retrieval.memory.signals.entities":             {lo: 0, hi: 1000},
	"retrieval.ollama_launch.ready_timeout_seconds": {lo: 0, hi: 86400},
	"retrieval.ollama_launch.stop_timeout_seconds":  {lo: 0, hi: 3600},
	"rollout.ollama.temperature":                    {lo: 0, hi: 10},
	"rollout.openai.temperature":                    {lo: 0, hi: 10},
	"reward.alpha":                                  {lo: 0, hi: 1000},
	"reward.beta":                                   {lo: 0, hi: 1000},
	"reward.rank":                                   {lo: 0, hi: 1000},
	"reward.rouge_l":                                {lo: 0, hi: 1000},
	"reward.recall.weight":                          {lo: 0, hi: 1000},
	"reward.ndcg.weight":                            {lo: 0, hi: 1000},
	"reward.rr.weight":                              {lo: 0, hi: 1000},
	"grpo.temperature":                              {lo: 0, hi: 10},
	"grpo.optimizer.weight_decay":                   {lo: 0, hi: 10},
	"grpo.loss.clip_high":                           {lo: 0, hi: 10},
	"grpo.loss.kl_coef":                             {lo: 0, hi: 1000},
	"grpo.loss.clip_ratio_c":                        {lo: 0, hi: 1000},
	"grpo.loss.max_grad_norm":                       {lo: 0, hi: 1e6},
	"grpo.advantage.epsilon":                        {lo: 0, hi: 1},
	"grpo.guards.penalty":                           {lo: -1000, hi: 1000},
	"grpo.collapse.entropy_floor":                   {lo: 0, hi: 100},
	"trainer.timeout_seconds":                       {lo: 0, hi: 7 * 86400, loOpen: true},
	"trainer.embedded.init_bias":                    {lo: -100, hi: 100},
	"trainer.embedded.init_std":                     {lo: 0, hi: 10},
	"trainer.embedded.adam_eps":                     {lo: 0, hi: 1, loOpen: true},
	"trainer.embedded.sft_pos_weight":               {lo: 0, hi: 1000, loOpen: true},
	"trainer.launch.ready_timeout_seconds":          {lo: 0, hi: 86400},
	"trainer.launch.stop_timeout_seconds":           {lo: 0, hi: 3600},
}

// FloatRange returns the documented range of a float key bounded here, as
// "[lo, hi]" (configdoc prints it beside the key).
func FloatRange(key string) (string, bool) {
	r, ok := floatRanges[key]
	if !ok {
		return "", false
	}
	return r.String(), true
}

// checkFloat refuses a non-finite float anywhere and a finite one outside its
// key's documented range.
func checkFloat(key string, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fielderr.New(key, "must be a finite number, got %v", f)
	}
	if r, ok := floatRanges[key]; ok && !r.contains(f) {
		return fielderr.New(key, "must be in %v, got %s", r, fmt.Sprint(f))
	}
	return nil
}
