"""LanceDB is imported without running the REST client package's __init__ (memory/vectors.py
import_lancedb): every process that touches memory starts 1.5-2 s sooner. The vector store still
writes, searches and reads its rows, and the package's own names still load when asked for."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import numpy as np
from cortex_pipelines.memory.vectors import SEMANTIC, VectorStore

store = VectorStore(sys.argv[1])
vector = np.zeros(384, dtype=np.float32)
vector[0] = 1.0
row = {"id": 7, "text": "The user sits by the window", "vector": vector}
store.upsert(SEMANTIC, [row], "all-MiniLM-L6-v2")
deferred = "lance_namespace_urllib3_client.api" not in sys.modules
hits = store.vector_search(SEMANTIC, vector, k=1)
import threading
import lance_namespace_urllib3_client as client
names = []
def ask():  # four threads at once: the deferred __init__ runs once, and every one gets the name
    names.append(client.ApiClient.__name__)
threads = [threading.Thread(target=ask) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
seen = {"deferred": deferred, "hits": [h["text"] for h in hits]}
seen |= {"client": sorted(set(names)), "asked": len(names)}
print(json.dumps(seen))
"""


def test_the_vector_store_works_without_the_rest_client_it_never_uses(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path / "lance")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "deferred": True,
        "hits": ["The user sits by the window"],
        "client": ["ApiClient"],
        "asked": 4,
    }
