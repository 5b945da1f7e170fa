"""Generates porter_nltk.tsv and python_oracle.jsonl: expectations for hser's tests, computed by
Python 3 with the reference code transcribed below (Google rouge-score's
tokenize.tokenize and rouge_scorer._score_lcs / scoring.fmeasure; the SQuAD
v1.1 evaluate-v1.1.py normalize_answer and f1_score) and NLTK's PorterStemmer.

Run it from anywhere: /usr/bin/python3 hser/testdata/gen_oracle.py [SHARED]
(needs python3-nltk; Debian 12 ships NLTK 3.8). SHARED is the shared data
directory, by default ../shared beside the repository root, as the tests
read it; the outputs are written next to this script.
"""
import collections, json, os, random, re, string, sys
from nltk.stem.porter import PorterStemmer

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # hser/testdata -> repository root
SHARED = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared")
if len(sys.argv) > 2 or not os.path.isdir(os.path.join(SHARED, "data")):
    sys.exit("usage: gen_oracle.py [SHARED]: %s has no data/ directory "
             "(the shared data, ../shared beside the repository root by default)" % SHARED)

# --- rouge-score (tokenize.py, rouge_scorer.py, scoring.py) ---
NON_ALPHANUM_RE = re.compile(r"[^a-z0-9]+")
SPACES_RE = re.compile(r"\s+")
VALID_TOKEN_RE = re.compile(r"^[a-z0-9]+$")
def rouge_tokenize(text, stemmer):
    text = text.lower()
    text = NON_ALPHANUM_RE.sub(" ", text)
    tokens = SPACES_RE.split(text)
    if stemmer:
        tokens = [stemmer.stem(x) if len(x) > 3 else x for x in tokens]
    return [x for x in tokens if VALID_TOKEN_RE.match(x)]
def lcs_table(ref, can):
    rows, cols = len(ref), len(can)
    t = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            if ref[i - 1] == can[j - 1]:
                t[i][j] = t[i - 1][j - 1] + 1
            else:
                t[i][j] = max(t[i - 1][j], t[i][j - 1])
    return t
def fmeasure(p, r):
    return 2 * p * r / (p + r) if p + r > 0 else 0.0
def score_lcs(target, prediction):
    if not target or not prediction:
        return (0, 0, 0)
    l = lcs_table(target, prediction)[-1][-1]
    p = l / len(prediction); r = l / len(target)
    return (p, r, fmeasure(p, r))

# --- SQuAD v1.1 ---
def normalize_answer(s):
    def remove_articles(text): return re.sub(r'\b(a|an|the)\b', ' ', text)
    def white_space_fix(text): return ' '.join(text.split())
    def remove_punc(text):
        exclude = set(string.punctuation)
        return ''.join(ch for ch in text if ch not in exclude)
    return white_space_fix(remove_articles(remove_punc(s.lower())))
def f1_score(prediction, ground_truth):
    pt = normalize_answer(prediction).split(); gt = normalize_answer(ground_truth).split()
    common = collections.Counter(pt) & collections.Counter(gt)
    num_same = sum(common.values())
    if num_same == 0: return 0
    precision = 1.0 * num_same / len(pt); recall = 1.0 * num_same / len(gt)
    return (2 * precision * recall) / (precision + recall)

stem = PorterStemmer()
texts = [
    "İstanbul İİ Kİ", "KELVIN \u212a 5\u212aelvin", "ΟΔΟΣ ΟΔΟΣ. Σ ΑΣΑ ΑΣ'", "ΌΣΟΣ\u0301 x",
    "the\u0301 cat", "a\u0300 an the", "The_the a_b", "don't stop-the music", "«the» „a“ the。",
    "x\x1cthe\x1dy\x1ez\x1f", "a\u00a0b\u3000the\u2028c", "ﬁnal ＴＨＥ ｔｈｅ", "北京 the 東京タワー 서울",
    "Café Müller naïve", "e\u0301te\u0301", "the-a.an,the", "²³ the ¼ a ⅷ", "Ⅻ the", "\u0660\u0661 a",
    "", "   ", "the a an", "A", "ſt ß ẞ", "x\u200bthe\u200by", "the\u00adend", "dogs are running quickly",
    "Generously the skies were dying", "ÆTHER Œuvre", "ǅemal ǈ", "ᾈ ᾼ", "\u0345x", "i\u0307s",
]
rows = []
for t in texts:
    rows.append({"kind": "text", "text": t, "rouge": rouge_tokenize(t, None),
                 "rouge_stem": rouge_tokenize(t, stem), "squad": normalize_answer(t)})

rng = random.Random(7)
answers = []
for line in open(os.path.join(SHARED, "data", "conversations", "mtrag_human_eval_subset.jsonl")):
    d = json.loads(line)
    if d.get("answer"): answers.append(d["answer"])
def clip(s):
    w = s.split()
    if len(w) < 4: return s
    i = rng.randrange(len(w)); j = min(len(w), i + rng.randint(3, 60))
    return " ".join(w[i:j])
pairs = [(a, b) for a, b in zip(texts, texts[1:])]
for _ in range(300):
    a = rng.choice(answers); b = a if rng.random() < 0.5 else rng.choice(answers)
    pairs.append((clip(a), clip(b)))
for pred, ref in pairs:
    rows.append({"kind": "pair", "prediction": pred, "reference": ref,
                 "rouge": score_lcs(rouge_tokenize(ref, None), rouge_tokenize(pred, None)),
                 "rouge_stem": score_lcs(rouge_tokenize(ref, stem), rouge_tokenize(pred, stem)),
                 "em": normalize_answer(pred) == normalize_answer(ref), "f1": f1_score(pred, ref)})
with open(os.path.join(HERE, "python_oracle.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
print(len(rows))

# porter_nltk.tsv: every [a-z0-9]{4,} token (not all digits) of the shared
# knowledge base plus edge cases, with NLTK's stem.
import nltk
vocab = set()
for line in open(os.path.join(SHARED, "data", "kb", "passages.jsonl")):
    d = json.loads(line)
    for t in re.split(r"[^a-z0-9]+", (d["title"] + " " + d["text"]).lower()):
        if len(t) > 3 and not t.isdigit(): vocab.add(t)
vocab |= set("""skies dying lying tying news innings cannings outings howe proceed exceed succeed
 yyyy yyyyy syzygy boyish sayings ayes eyed ieee feed agreed bled sing fizzed hissing failing filing
 hopping tanned falling conflated troubled sized happy enjoy spied died flies dies relational
 conditional rational valenci hesitanci digitizer conformabli radicalli differentli vileli
 analogousli vietnamization predication operator feudalism decisiveness hopefulness callousness
 formaliti sensitiviti sensibiliti triplicate formative formalize electriciti electrical hopeful
 goodness revival allowance inference airliner gyroscopic adjustable defensible irritant replacement
 adjustment dependent adoption homologou communism activate angulariti homologous effective
 bowdlerize probate rate cease controll roll generously generous archaeology geology theology
 hopefulli fulli alli logi ions tion""".split())
with open(os.path.join(HERE, "porter_nltk.tsv"), "w") as f:
    f.write("# word<TAB>NLTK %s PorterStemmer().stem(word) (NLTK_EXTENSIONS), generated by gen_oracle.py\n" % nltk.__version__)
    for w in sorted(vocab):
        f.write("%s\t%s\n" % (w, stem.stem(w)))
