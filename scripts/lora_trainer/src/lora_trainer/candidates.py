"""The candidate terms of a term-selection prompt, exactly as the embedded policy ranks them.

trainer/PROTOCOL.md, "The embedded policy" (Go: trainer/embedded/terms.go) defines
token_kind "decisions": token k of a sample is keep (1) / drop (0) for the
k-th candidate term of the prompt. Any policy that speaks that kind must
propose the same terms in the same order, or the harness's decisions mean
something else here than there. trainer/testdata/candidates.jsonl holds the
Go ranking of every shared turn; tests/test_candidates.py checks this module
against it.

Pure Python (no torch), so the rule can be read and tested on its own.
"""

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

# internal/words/stopwords.go: functionWords and dialogueFillers
# (tests/test_candidates.py compares these with the Go source).
FUNCTION_WORDS = """a an the and or but if of at by for with about against between into through during before after
above below to from up down in out on off over under again further then once here there when
where why how what which who whom whose this that these those am is are was were be been being
have has had having do does did doing i me my myself we our ours you your yours he him his she
her hers it its they them their theirs s t can will just don should now would could also than
too very so such no nor not only own same few more most other some any each both all tell know
like get much many"""
DIALOGUE_FILLERS = """as because else even ever gets got herself himself itself let may might must one ourselves
please say says thank thanks themselves until us well while yes yet yourself yourselves ok okay
d ll m re ve doesn didn isn aren wasn weren won wouldn shouldn couldn think want really thing
things something anything sure oh hi hello"""
STOPWORDS = frozenset(FUNCTION_WORDS.split()) | frozenset(DIALOGUE_FILLERS.split())

# trainer/embedded/terms.go: anaphors, the question words that point back.
ANAPHORS = frozenset(
    "it its they them their theirs this that these those he him his she her hers there such former latter same one ones".split()
)

LEAD_WORDS = 12  # an assistant message's first words: a passage's title or topic


def _is_word_rune(c: str) -> bool:
    # Go: unicode.IsLetter (categories L*) or unicode.IsDigit (Nd).
    return c.isalpha() or c.isdecimal()


def go_lower(run: str) -> str:
    """strings.ToLower: each rune by its simple lowercase mapping. Python's
    str.lower applies the full mapping (U+0130 'İ' → 'i̇', two runes) and the
    context-dependent final sigma; rune by rune, neither applies."""
    return "".join("i" if c == "\u0130" else c.lower() for c in run)


@dataclass
class Word:
    start: int  # character offset in its text
    end: int
    lower: str
    upper: bool  # the first rune is upper-case (unicode.IsUpper)


def words(s: str) -> List[Word]:
    """Maximal runs of letters and digits (internal/words.Fields), lowercased."""
    out: List[Word] = []
    i, n = 0, len(s)
    while i < n:
        if not _is_word_rune(s[i]):
            i += 1
            continue
        j = i + 1
        while j < n and _is_word_rune(s[j]):
            j += 1
        run = s[i:j]
        out.append(Word(i, j, go_lower(run), run[0].isupper()))
        i = j
    return out


def tokens(s: str) -> List[str]:
    """The lowercased letter/digit runs of s (trainer.Tokens): SFT targets."""
    return [w.lower for w in words(s)]


@dataclass
class Occurrence:
    source: str  # "history" or "memory"
    index: int  # message or memory index
    start: int
    end: int


@dataclass
class Candidate:
    term: str
    first: int  # rank of first occurrence (history, then memories): the rewrite's word order
    occurrences: List[Occurrence] = field(default_factory=list)
    tf: int = 0
    user_tf: int = 0
    last: int = 0
    user: bool = False
    assistant: bool = False
    upper: bool = False
    first_turn: bool = False
    last_user: bool = False
    last_assistant: bool = False
    lead: bool = False
    memory_only: bool = False


@dataclass
class Context:
    """The structured view of a prompt (trainer/embedded/terms.go contextOf)."""

    history: List[Dict[str, str]]  # [{role, content}]
    question: str
    memories: List[Dict] = field(default_factory=list)  # [{id, text, score}]


def context_of(prompt: Dict) -> Context:
    """Dialogue first, then messages (history = the messages before the last
    user message, system messages dropped), then text (question = text)."""
    d = prompt.get("dialogue")
    if d:
        hist = [{"role": m.get("role", ""), "content": m.get("content", "")} for m in (d.get("history") or [])]
        mems = [{"id": m.get("id", ""), "text": m.get("text", ""), "score": m.get("score", 0.0)} for m in (d.get("memories") or [])]
        return Context(hist, d.get("question", "") or "", mems)
    msgs = prompt.get("messages") or []
    last = max((i for i, m in enumerate(msgs) if m.get("role") == "user"), default=-1)
    if last >= 0:
        hist = [{"role": m["role"], "content": m.get("content", "")} for m in msgs[:last] if m.get("role") != "system"]
        return Context(hist, msgs[last].get("content", ""))
    return Context([], prompt.get("text", "") or "")


def _rank_class(c: Candidate) -> int:
    if c.user:
        return 0
    if c.memory_only:
        return 1
    return 2


def candidates(ctx: Context, limit: Optional[int] = None) -> Tuple[List[Candidate], bool]:
    """The ranked candidate terms of ctx, at most `limit`, and whether the cap cut any off.

    Terms: history words of at least two runes, neither stopwords nor words of
    the question, de-duplicated; then the memories' words of the same kind
    that the history lacks. Ranked: terms of user messages first, then
    memory-only terms (in memory order), then the rest (assistant-only), each
    class by the latest message the term occurs in, ties by first occurrence.
    """
    in_question = {w.lower for w in words(ctx.question)}
    last_user = max((i for i, m in enumerate(ctx.history) if m["role"] == "user"), default=-1)
    last_asst = max((i for i, m in enumerate(ctx.history) if m["role"] == "assistant"), default=-1)
    seen: Dict[str, Candidate] = {}
    order: List[str] = []

    def admissible(w: Word) -> bool:
        return w.lower not in STOPWORDS and w.lower not in in_question and len(w.lower) >= 2

    for i, m in enumerate(ctx.history):
        role = m["role"]
        for pos, w in enumerate(words(m["content"])):
            if not admissible(w):
                continue
            c = seen.get(w.lower)
            if c is None:
                c = Candidate(w.lower, len(order))
                seen[w.lower] = c
                order.append(w.lower)
            c.occurrences.append(Occurrence("history", i, w.start, w.end))
            c.tf += 1
            c.last = i
            if role == "user":
                c.user_tf += 1
                c.user = True
            if role == "assistant":
                c.assistant = True
                c.lead = c.lead or pos < LEAD_WORDS
            c.upper = c.upper or w.upper
            c.first_turn = c.first_turn or i == 0
            c.last_user = c.last_user or i == last_user
            c.last_assistant = c.last_assistant or i == last_asst
    for k, mem in enumerate(ctx.memories):
        for w in words(mem["text"]):
            if not admissible(w):
                continue
            c = seen.get(w.lower)
            if c is None:
                c = Candidate(w.lower, len(order), memory_only=True)
                seen[w.lower] = c
                order.append(w.lower)
            if c.memory_only:
                c.upper = c.upper or w.upper
            c.occurrences.append(Occurrence("memory", k, w.start, w.end))
    # A stable sort: memory-only terms keep memory order, ties keep first occurrence.
    ranked = sorted((seen[t] for t in order), key=lambda c: (_rank_class(c), 0 if c.memory_only else -c.last))
    if limit is not None and len(ranked) > limit:
        return ranked[:limit], True
    return ranked, False


# The history features of a candidate (the embedded policy's φ without the
# knowledge-base ones: idf, in_kb and the NPMI features need corpus counts
# this process does not have). Same definitions as trainer/embedded/terms.go.
FEATURE_NAMES = (
    "log_tf",
    "recency",
    "in_user_turn",
    "in_assistant_turn",
    "capitalized",
    "in_first_turn",
    "in_last_user_turn",
    "is_number",
    "log_len",
    "log_user_tf",
    "in_last_assistant_turn",
    "question_content_words",
    "question_anaphor",
    "in_assistant_lead",
    "from_memory",
)


def features(ctx: Context, cands: Sequence[Candidate]) -> List[List[float]]:
    q = words(ctx.question)
    q_content = {w.lower for w in q if w.lower not in STOPWORDS}
    qc = min(len(q_content), 10) / 5
    anaphor = float(any(w.lower in ANAPHORS for w in q))
    n = len(ctx.history)
    out = []
    for c in cands:
        out.append(
            [
                math.log1p(c.tf),
                0.0 if c.memory_only else 1.0 / (1 + n - 1 - c.last),
                float(c.user),
                float(c.assistant),
                float(c.upper),
                float(c.first_turn),
                float(c.last_user),
                float(c.term.isdecimal()),
                math.log(len(c.term)),
                math.log1p(c.user_tf),
                float(c.last_assistant),
                qc,
                anaphor,
                float(c.lead),
                float(c.memory_only),
            ]
        )
    return out


def rewrite_text(question: str, kept: Sequence[Candidate]) -> str:
    """The question followed by the kept terms in the order they first occur
    (history, then memories), separated by single spaces (trainer/embedded/embedded.go rewriteText)."""
    parts = [question.strip()] + [c.term for c in sorted(kept, key=lambda c: c.first)]
    return " ".join(parts).strip()
